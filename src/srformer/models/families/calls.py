"""The forward passes of converted cross-attention modules, one per calling convention of transformers' modules
(:data:`~srformer.models.families.entry.CALLS`: T5's, BART's and LED's).

A converted module keeps its class's projections (and their pretrained weights) and gains a
``srformer`` child (built by :func:`~srformer.attention.variants.build_cross_attention`). Its class becomes a
subclass of the original class and of the mixin of its family's calling convention (:data:`MIXINS`), with the
family's entry as ``srformer_family`` (which names its projections and head sizes), so ``isinstance`` checks inside
transformers (output recorders, weight init) still hold.
"""

from __future__ import annotations

from functools import cache
from typing import Any

import torch
from torch import nn

from srformer.attention.base import CrossAttentionMechanism
from srformer.attention.projection import HeadProjection
from srformer.attention.schedule import tracing
from srformer.models.cross_attention import attention_weights_requested, run_cross_attention
from srformer.models.families.entry import Family


def generation_cache(cache: Any, past_key_values: Any) -> Any:
    """The generation cache handed to a converted attention module: transformers up to 5.23 passes it as
    ``past_key_values``, 5.24 and later as ``cache`` (the old name is deprecated there). Whichever is given.

    Raises:
        ValueError: if both are given (and are not the same object): which one is meant is ambiguous.
    """
    if cache is not None and past_key_values is not None and cache is not past_key_values:
        raise ValueError("Got both `cache` and `past_key_values`: pass the generation cache once, as `cache`.")
    return cache if cache is not None else past_key_values


class _ConvertedCrossAttention:
    """The forward pass every family shares: project the queries, hand the key/value projection to
    :func:`~srformer.models.cross_attention.run_cross_attention` with the family's mask and generation cache, and
    project the heads back. The family's entry (``srformer_family``, set on the converted class) names its
    projections and head sizes (:meth:`_projections`)."""

    srformer: CrossAttentionMechanism
    srformer_family: Family
    # provided by the attention class the family mixin is combined with
    layer_idx: int | None
    dropout: float
    training: bool

    def _projections(self) -> tuple[nn.Linear, nn.Linear, nn.Linear, nn.Linear, int, int]:
        """``(query, key, value, output, num_heads, head_dim)`` of the wrapped module, by its family's names."""
        family = self.srformer_family
        query, key, value, out = (getattr(self, name) for name in family.projections)
        return query, key, value, out, getattr(self, family.num_heads), getattr(self, family.head_dim)

    def _attend(
        self,
        hidden_states: torch.Tensor,
        key_value_states: torch.Tensor | None,
        mask: torch.Tensor | None,
        cache: Any,
        output_attentions: bool | None,
    ) -> tuple[torch.Tensor, torch.Tensor | None]:
        """``(output (B, q, d_model), weights (B, H, q, k) or None)`` for hidden_states (B, q, d_model) attending
        to key_value_states (B, k, d_model).

        Raises:
            RuntimeError: without ``key_value_states`` (a converted module replaces cross attention only).
        """
        if key_value_states is None:
            raise RuntimeError("An SRformer module replaces decoder cross attention only; it got no encoder states.")
        query, key, value, out, num_heads, head_dim = self._projections()
        batch, q_len = hidden_states.shape[:2]
        step = q_len == 1  # a decoding step: (B, 1, d_model) projected as (B, d_model), no transposes
        if step:
            queries = self._step_linear(query, hidden_states.view(batch, -1)).view(batch, -1, 1, head_dim)
        else:
            queries = query(hidden_states).view(batch, q_len, -1, head_dim).transpose(1, 2)

        def project(states: torch.Tensor) -> tuple[torch.Tensor, torch.Tensor]:
            keys = key(states).view(states.shape[0], -1, num_heads, head_dim).transpose(1, 2)
            values = value(states).view(states.shape[0], -1, num_heads, head_dim).transpose(1, 2)
            return keys, values

        output, weights = run_cross_attention(
            self.srformer,
            queries,
            key_value_states,
            project,
            mask,
            cache,
            self.layer_idx,
            dropout=self.dropout if self.training else 0.0,
            output_attentions=bool(output_attentions) if self.srformer_family.weights_always
            else attention_weights_requested(self, output_attentions),
            projection=HeadProjection.from_linear(key, value, num_heads, head_dim),
        )
        if step:  # (B, H, 1, d) is (B, H·d) as it is: the output projection of 2-D rows (3 calls, not 6)
            return self._step_linear(out, output.reshape(batch, -1)).view(batch, 1, -1), weights
        return out(output.transpose(1, 2).reshape(batch, q_len, -1)), weights

    def _step_linear(self, linear: nn.Module, rows: torch.Tensor) -> torch.Tensor:
        """``linear(rows)`` for the 2-D rows (B, in) of a decoding step: for an ``nn.Linear``, one ``mm`` (``addmm``
        with a bias) with the transposed view of its weight that this module keeps between steps, where ``linear``
        makes that view again at every call (one call per projection and step fewer; a view launches no kernel,
        but costs the dispatcher's time). The kept view shares the weight's memory, so it sees in-place updates (an
        optimizer step); it is made again when the weight is another tensor, device or dtype, and not kept while
        autograd records through the weight or ``torch.compile`` traces. Any other module (quantized,
        adapter-wrapped) is called as it is.

        Args:
            linear: the projection. rows: (B, in_features).

        Returns:
            (B, out_features), as ``linear(rows)``.
        """
        if type(linear) is not nn.Linear or tracing() or (torch.is_grad_enabled() and linear.weight.requires_grad):
            return linear(rows)
        weight = linear.weight
        key = (weight.data_ptr(), weight.dtype, weight.device)
        kept: dict[int, tuple[tuple[Any, ...], torch.Tensor]] = self.__dict__.setdefault("_srformer_step_weights", {})
        entry = kept.get(id(linear))
        if entry is None or entry[0] != key:
            entry = kept[id(linear)] = (key, weight.t())
        if linear.bias is None:
            return torch.mm(rows, entry[1])
        return torch.addmm(linear.bias, rows, entry[1])


class SRformerT5AttentionMixin(_ConvertedCrossAttention):
    """Forward pass of a converted module with T5's calling convention (T5, mT5, LongT5: projections ``q``, ``k``,
    ``v``, ``o``, heads ``n_heads``, head size ``key_value_proj_dim``, scale 1, as its family's entry names them).
    Called as
    ``(hidden_states, mask, key_value_states, position_bias, past_key_values, **kwargs)`` (transformers >= 5.24
    passes the cache as ``cache``; both names are taken, see :func:`generation_cache`) and
    returns ``(output, position_bias, weights)``: T5 cross attention has no relative position bias,
    so ``position_bias`` is passed through unused; ``weights`` is None unless ``output_attentions``
    is set under the eager implementation (:func:`~srformer.models.cross_attention.attention_weights_requested`),
    then the weights of :func:`~srformer.attention.weights.cross_attention_weights`.

    Shapes: hidden_states (B, q, d_model), key_value_states (B, k, d_model), output (B, q, d_model),
    weights (B, H, q, k).
    """

    def forward(
        self,
        hidden_states: torch.Tensor,
        mask: torch.Tensor | None = None,
        key_value_states: torch.Tensor | None = None,
        position_bias: torch.Tensor | None = None,
        past_key_values: Any = None,
        cache: Any = None,
        **kwargs: Any,
    ) -> tuple[torch.Tensor, torch.Tensor | None, torch.Tensor | None]:
        output, weights = self._attend(hidden_states, key_value_states, mask, generation_cache(cache, past_key_values),
                                       kwargs.get("output_attentions"))
        return output, position_bias, weights


class SRformerBartAttentionMixin(_ConvertedCrossAttention):
    """Forward pass of a converted module with BART's calling convention (BART, mBART, Pegasus, Marian, PEGASUS-X,
    BigBirdPegasus: projections ``q_proj``, ``k_proj``, ``v_proj``, ``out_proj``, ``num_heads``, ``head_dim``,
    ``scaling = head_dim^-0.5``, as its family's entry names them). Called as
    ``(hidden_states, key_value_states, past_key_values, attention_mask, **kwargs)`` (or ``cache=``, as for
    :class:`SRformerT5AttentionMixin`) and returns
    ``(output, weights)``, ``weights`` as for :class:`SRformerT5AttentionMixin`.

    Shapes: hidden_states (B, q, d_model), key_value_states (B, k, d_model), output (B, q, d_model),
    weights (B, H, q, k).
    """

    def forward(
        self,
        hidden_states: torch.Tensor,
        key_value_states: torch.Tensor | None = None,
        past_key_values: Any = None,
        attention_mask: torch.Tensor | None = None,
        cache: Any = None,
        **kwargs: Any,
    ) -> tuple[torch.Tensor, torch.Tensor | None]:
        return self._attend(hidden_states, key_value_states, attention_mask, generation_cache(cache, past_key_values),
                            kwargs.get("output_attentions"))


class SRformerLEDAttentionMixin(_ConvertedCrossAttention):
    """Forward pass of a converted ``LEDDecoderAttention`` (BART's projections and sizes). Called as
    ``(hidden_states, key_value_states, cache, attention_mask, output_attentions)`` (or ``past_key_values=``, as for
    :class:`SRformerT5AttentionMixin`) and returns ``(output, weights, cache)``: LED's module has no ``sdpa`` path,
    so ``weights`` are returned whenever ``output_attentions`` is set.

    Shapes: hidden_states (B, q, d_model), key_value_states (B, k, d_model), output (B, q, d_model),
    weights (B, H, q, k).
    """

    def forward(
        self,
        hidden_states: torch.Tensor,
        key_value_states: torch.Tensor | None = None,
        cache: Any = None,
        attention_mask: torch.Tensor | None = None,
        output_attentions: bool = False,
        past_key_values: Any = None,
        **kwargs: Any,
    ) -> tuple[torch.Tensor, torch.Tensor | None, Any]:
        cache = generation_cache(cache, past_key_values)
        output, weights = self._attend(hidden_states, key_value_states, attention_mask, cache, output_attentions)
        return output, weights, cache


#: The mixin of each calling convention (:data:`~srformer.models.families.entry.CALLS`).
MIXINS: dict[str, type[_ConvertedCrossAttention]] = {
    "t5": SRformerT5AttentionMixin, "bart": SRformerBartAttentionMixin, "led": SRformerLEDAttentionMixin,
}



@cache
def converted_class(base: type, family: Family) -> type:
    """``SRformer<base>``: the class a cross-attention module of class ``base`` (of ``family``) takes when it is
    converted: the mixin of the family's calling convention (:data:`MIXINS`) before ``base``, with the family's entry
    as ``srformer_family``. Made once per class."""
    return type(f"SRformer{base.__name__}", (MIXINS[family.call], base),
                {"__module__": __name__, "srformer_family": family})
