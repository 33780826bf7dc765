"""What srformer needs to know about one transformers model family: :class:`Family`.

Each file beside this one holds one family's entry (``t5.py``: ``FAMILY = Family(...)``); the registry
(:mod:`srformer.models.families`) lists them, and conversion, loading, srformer's config and model classes, their
Auto-class registration and the encoder's input limit all derive from the entries. ``docs/adding-a-family.md`` gives
the steps for a new family.
"""

from __future__ import annotations

import importlib
from collections.abc import Callable
from dataclasses import dataclass
from functools import cached_property
from typing import Any

#: The calling conventions of transformers' cross-attention modules (:mod:`srformer.models.families.calls`):
#: ``"t5"``: ``(hidden_states, mask, key_value_states, position_bias, cache)`` -> ``(output, position_bias,
#: weights)``; ``"bart"``: ``(hidden_states, key_value_states, cache, attention_mask)`` -> ``(output, weights)``;
#: ``"led"``: as ``"bart"`` with an ``output_attentions`` argument, -> ``(output, weights, cache)``.
CALLS = ("t5", "bart", "led")


def position_table(attribute: str) -> Callable[[Any], int | None]:
    """An input limit read from the config attribute ``attribute`` (a learned or fixed position table's size, in
    tokens); None where the config has no positive int there."""

    def limit(config: Any) -> int | None:
        value = getattr(config, attribute, None)
        return value if isinstance(value, int) and value > 0 else None

    limit.__doc__ = f"``config.{attribute}`` (tokens)."
    return limit


def no_limit(config: Any) -> None:
    """Relative positions: no input limit."""
    return None


@dataclass(frozen=True)
class Family:
    """One model family srformer converts.

    Attributes:
        name: the ``model_type`` of the family's transformers config (``"t5"``, ``"led"``); srformer's own model
            type is ``"srformer_" + name``.
        modeling_module: the transformers module defining its classes (``"transformers.models.led.modeling_led"``).
        attention_class: the class of its decoder cross attention in that module (``"LEDDecoderAttention"``);
            subclasses convert too.
        cross_attention_attribute: the attribute of a decoder layer that holds the cross attention
            (``"EncDecAttention"`` in T5's families, ``"encoder_attn"`` in BART's).
        call: its calling convention, one of :data:`CALLS`.
        config_class: the name of its config class (``"LEDConfig"``).
        heads: ``(class name, Auto class name)`` of the transformers classes srformer registers a converted class
            of (``("LEDForConditionalGeneration", "AutoModelForSeq2SeqLM")``); every other head that the Auto classes
            map for the family gets one too, made on demand.
        projections: the attribute names of the module's query, key, value and output projections (``nn.Linear``).
        num_heads: the attribute holding the number of heads ``H``.
        head_dim: the attribute holding the head size ``d``.
        scale: the attribute holding the softmax scale (``scaling``: ``d^-0.5`` in BART's families, 1.0 in T5's),
            or None for 1.0.
        weights_always: whether the module returns attention weights whenever ``output_attentions`` is passed
            (LED's decoder attention, which has no other implementation); otherwise only under the ``eager``
            attention implementation, as transformers' ``sdpa`` path returns none.
        input_limit: the longest input the encoder positions, in tokens, from the config (a position table's
            size), or None where positions are relative.
        native_window: the window chunked encoding uses by default, in tokens, from the config: the encoder's own
            limit for a family with a position table, the length it was pretrained on for T5's relative positions,
            None for an encoder built for long inputs without a limit (LongT5: no chunked encoding unless
            ``encoder_window`` is set).
        long_document: a checkpoint users start from for long documents (a hub id), or None for a family built for
            short inputs.

    The cache layout is transformers' ``EncoderDecoderCache`` in every family: the cross-attention state of the
    module with ``layer_idx`` ``i`` lives at ``cache.cross_attention_cache.layers[i]``
    (:mod:`srformer.models.cross_attention`). The encoder mask reaches the module as transformers builds it (a
    4-D additive or boolean mask, :func:`~srformer.models.cross_attention.key_padding_from_mask`).
    """

    name: str
    modeling_module: str
    attention_class: str
    cross_attention_attribute: str
    call: str
    config_class: str
    heads: tuple[tuple[str, str], ...]
    projections: tuple[str, str, str, str] = ("q_proj", "k_proj", "v_proj", "out_proj")
    num_heads: str = "num_heads"
    head_dim: str = "head_dim"
    scale: str | None = "scaling"
    weights_always: bool = False
    input_limit: Callable[[Any], int | None] = position_table("max_position_embeddings")
    native_window: Callable[[Any], int | None] | None = None
    long_document: str | None = None

    def __post_init__(self) -> None:
        if self.call not in CALLS:
            raise ValueError(f"Family {self.name!r}: `call` must be one of {CALLS}, got {self.call!r}.")

    @cached_property
    def module(self) -> Any:
        """The imported transformers modeling module."""
        return importlib.import_module(self.modeling_module)

    @cached_property
    def attention_type(self) -> type:
        """The cross-attention class."""
        found: type = getattr(self.module, self.attention_class)
        return found

    @cached_property
    def config_type(self) -> type:
        """The transformers config class."""
        import transformers

        found: type = getattr(transformers, self.config_class)
        return found

    def window(self, config: Any) -> int | None:
        """The default window of chunked encoding for ``config`` (tokens): :attr:`native_window` if given, else
        :attr:`input_limit`."""
        return (self.native_window or self.input_limit)(config)
