"""Chunked encoding for inputs longer than the encoder's window (SLED, Ivgi et al. 2023; Unlimiformer, Bertsch et
al. 2023).

An input of ``n`` tokens longer than ``encoder_window`` (``w``) is cut into windows of ``w`` tokens that start every
``stride = max(1, round(w * (1 - window_overlap)))`` tokens. Each window is encoded on its own (T5's relative and
BART's learned positions stay inside it), and each token keeps the encoding of the one window in which it lies
farthest from an edge: window ``j`` (start ``a_j``) keeps ``[b_{j-1}, b_j)`` with
``b_j = floor((a_j + a_{j+1} + w - 1) / 2) + 1``, the first window keeps from token 0 and an example's last window
keeps to its last real token. With ``window_overlap = 0.5`` a kept token has at least ``w / 4`` tokens of context on
each side (SLED's "context padding"), except at the document's ends. The kept parts are joined in order, so the
decoder sees one encoder output of ``n`` positions and every cross attention works on it unchanged.

Windows are planned over each example's real tokens (padding is moved out first and put back after), so an
example's encoding does not depend on the batch it is in. An input that fits one window takes the encoder's own
path, unchanged. See ``docs/long-inputs.md``.
"""

from __future__ import annotations

import importlib
from dataclasses import dataclass
from functools import cache
from typing import Any

import torch
from torch import nn
from transformers import PreTrainedModel
from transformers.modeling_outputs import BaseModelOutput

from srformer.attention.schedule import compaction_order, tracing
from srformer.core import SRformerConfig, check_window_settings
from srformer.models.families import family_of_config
from srformer.models.families.entry import Family, position_table
from srformer.models.families.t5 import PRETRAINED_LENGTH
from srformer.models.memory_estimate import check_decode_memory


@dataclass(frozen=True)
class EncoderWindows:
    """The windows of one input of ``length`` tokens (:func:`plan_windows`).

    Attributes:
        starts: first token of each window (tokens).
        keep_starts: first token each window keeps (absolute position, tokens).
        keep_ends: one past the last token each window keeps; ``keep_ends[j] == keep_starts[j + 1]`` and the last is
            ``length``.
        window: window size ``w`` in tokens.
    """

    starts: tuple[int, ...]
    keep_starts: tuple[int, ...]
    keep_ends: tuple[int, ...]
    window: int


def window_stride(window: int, overlap: float) -> int:
    """Tokens between the starts of two consecutive windows: ``max(1, round(window * (1 - overlap)))``."""
    return max(1, round(window * (1.0 - overlap)))


def plan_windows(length: int, window: int, overlap: float) -> EncoderWindows:
    """The windows of an input of ``length`` tokens and the part of each that is kept (module docstring).

    Args:
        length: real input length ``n`` in tokens (>= 0; 0 gives one empty window).
        window: ``w``, tokens per window (>= 1).
        overlap: share of a window shared with the next one, in ``[0, 1)``.

    Returns:
        :class:`EncoderWindows`; one window when ``length <= window``. The kept parts cover ``[0, length)`` exactly
        once, in order, and each lies inside its window.

    Raises:
        ValueError: for ``length < 0``, ``window < 1`` or ``overlap`` outside ``[0, 1)``.
    """
    check_window_settings(window, overlap, 1)
    if length < 0:
        raise ValueError(f"`length` must be >= 0 tokens, got {length}.")
    stride = window_stride(window, overlap)
    count = 1 if length <= window else 1 + -(-(length - window) // stride)
    starts = tuple(j * stride for j in range(count))
    bounds = [(starts[j] + starts[j + 1] + window - 1) // 2 + 1 for j in range(count - 1)]
    return EncoderWindows(starts, (0, *bounds), (*bounds, length), window)


def encoder_input_limit(config: Any) -> int | None:
    """The longest input (tokens) ``config``'s encoder can position, from its family's entry
    (:attr:`~srformer.models.families.entry.Family.input_limit`): the position table's size for BART's families,
    LED, PEGASUS-X and BigBirdPegasus; None for relative positions (T5, mT5, LongT5: no hard limit) and for a config
    of no family srformer converts."""
    return _family_limit(config, family_of_config(config))


def _family_limit(config: Any, family: Family | None) -> int | None:
    """:func:`encoder_input_limit` of ``config``, whose family is ``family`` (None: of no family srformer converts)."""
    return None if family is None else family.input_limit(config)


def default_window(config: Any) -> int | None:
    """The window used when ``encoder_window`` is None, from the family's entry
    (:meth:`~srformer.models.families.entry.Family.window`): the encoder's own input limit, the length T5 was
    pretrained on (``n_positions``, else 512 tokens), or None for an encoder built for long inputs without a limit
    (LongT5), which then reads every input whole. A config of no family srformer converts: its
    ``max_position_embeddings``, else 512."""
    return _family_window(config, family_of_config(config))


def _family_window(config: Any, family: Family | None) -> int | None:
    """:func:`default_window` of ``config``, whose family is ``family`` (None: of no family srformer converts)."""
    if family is not None:
        return family.window(config)
    return position_table("max_position_embeddings")(config) or PRETRAINED_LENGTH


@dataclass(frozen=True)
class WindowSettings:
    """Chunked encoding's settings on an encoder (:func:`install_windows`): ``window``
    tokens per window, ``overlap`` in ``[0, 1)``, ``batch_size`` windows per encoder call."""

    window: int
    overlap: float
    batch_size: int


def resolve_window_settings(
    config: Any, family: Family | None, encoder_window: int | None, window_overlap: float, window_batch_size: int
) -> WindowSettings | None:
    """The :class:`WindowSettings` of a model with Hugging Face config ``config`` of ``family`` (None: of no family
    srformer converts), or None where the encoder reads every input whole (no ``encoder_window`` and a family
    without a default window: LongT5).

    Raises:
        ValueError: for bad settings (:func:`check_window_settings`), or an ``encoder_window`` larger than the
            positions of a model with a position table (the message gives the limit).
    """
    window = _family_window(config, family) if encoder_window is None else encoder_window
    if window is None:
        check_window_settings(1, window_overlap, window_batch_size)
        return None
    check_window_settings(window, window_overlap, window_batch_size)
    limit = _family_limit(config, family)
    if limit is not None and window > limit:
        raise ValueError(
            f"`encoder_window` is {window} tokens but this model's encoder has positions for {limit} tokens: use "
            f"encoder_window <= {limit}."
        )
    return WindowSettings(window, float(window_overlap), window_batch_size)


class ChunkedEncoderMixin:
    """The forward pass of an encoder re-classed by :func:`install_windows`: inputs longer
    than the window are encoded window by window (module docstring); shorter ones take the encoder's own ``forward``.

    Called as the encoder is (``input_ids`` (B, n) or ``inputs_embeds`` (B, n, d_model), ``attention_mask`` (B, n));
    returns a ``BaseModelOutput`` with ``last_hidden_state`` (B, n, d_model), zero at padding positions, and with
    ``hidden_states`` joined the same way when ``output_hidden_states`` is set.

    Raises:
        MemoryError: at inference (no gradient), before encoding, for an input whose generation state would not fit
            in the memory left (:func:`srformer.models.memory_estimate.check_decode_memory`).
        ValueError: if ``output_attentions`` is requested for an input longer than the window (each window has
            its own attention map; there is no joined one), or such an input is traced by ``torch.compile`` /
            ``torch.export``.
    """

    srformer_windows: WindowSettings | None
    srformer_config: SRformerConfig
    config: Any

    def forward(self, input_ids: Any = None, attention_mask: Any = None, inputs_embeds: Any = None, **kwargs: Any):
        source = input_ids if input_ids is not None else inputs_embeds
        settings = getattr(self, "srformer_windows", None)
        if source is None or settings is None or source.shape[1] <= settings.window:
            return super().forward(  # type: ignore[misc]
                input_ids=input_ids, attention_mask=attention_mask, inputs_embeds=inputs_embeds, **kwargs
            )
        if tracing():
            raise ValueError(
                f"An input of {source.shape[1]} tokens is longer than encoder_window={settings.window}, and chunked "
                "encoding plans its windows on the host, which torch.compile/torch.export cannot trace: run the "
                "encoder in eager mode (compile the decoder only), or raise encoder_window."
            )
        config = getattr(self, "srformer_config", None)
        if config is not None and not torch.is_grad_enabled():  # inference: refuse what cannot fit, before encoding
            dtype = _dtype_of(self) if isinstance(self, nn.Module) else torch.float32
            check_decode_memory(config, self.config, source.shape[0], source.shape[1], dtype, source.device)
        if kwargs.get("output_attentions"):
            raise ValueError(
                f"output_attentions is not available for an input of {source.shape[1]} tokens, longer than "
                f"encoder_window={settings.window}: each window is encoded on its own and has its own attention map. "
                "Request encoder attentions on inputs that fit one window."
            )
        return encode_in_windows(
            lambda ids, mask, embeds, **more: super(ChunkedEncoderMixin, self).forward(  # type: ignore[misc]
                input_ids=ids, attention_mask=mask, inputs_embeds=embeds, **more
            ),
            settings, input_ids, attention_mask, inputs_embeds, **kwargs,
        )


def _dtype_of(module: nn.Module) -> torch.dtype:
    """The dtype of ``module``'s first floating-point parameter (float32 without one)."""
    return next((p.dtype for p in module.parameters() if p.is_floating_point()), torch.float32)


def encode_in_windows(
    encode: Any,
    settings: WindowSettings,
    input_ids: torch.Tensor | None,
    attention_mask: torch.Tensor | None,
    inputs_embeds: torch.Tensor | None,
    **kwargs: Any,
) -> BaseModelOutput:
    """Encode an input window by window with ``encode(ids, mask, embeds, **kwargs)`` (the encoder's own forward)
    and join the kept parts (module docstring).

    Args:
        encode: the encoder's own forward, called with (window batch, w) ids or (window batch, w, d_model) embeds.
        settings: the window settings.
        input_ids: (B, n) long, or None when ``inputs_embeds`` is given.
        attention_mask: (B, n), 1 at real tokens, or None (no padding).
        inputs_embeds: (B, n, d_model), or None.
        **kwargs: passed on to ``encode`` (``output_hidden_states``, ...).

    Returns:
        ``BaseModelOutput``: ``last_hidden_state`` (B, n, d_model), zero at padding positions; ``hidden_states``
        (each (B, n, d_model)) when requested.
    """
    source = input_ids if input_ids is not None else inputs_embeds
    assert source is not None
    batch, length = source.shape[:2]
    valid = None if attention_mask is None else attention_mask.to(torch.bool)
    lengths = [length] * batch if valid is None else valid.sum(dim=1).tolist()
    order = None
    if valid is not None and min(lengths) < length:  # move each example's real tokens to the front, in order
        order = compaction_order(valid)
        if input_ids is not None:
            input_ids = input_ids.gather(1, order)
        if inputs_embeds is not None:
            inputs_embeds = inputs_embeds.gather(1, order[..., None].expand_as(inputs_embeds))
    plans = [plan_windows(n, settings.window, settings.overlap) for n in lengths]
    tasks = [(b, j) for b, plan in enumerate(plans) if lengths[b] > 0 for j in range(len(plan.starts))]
    want_hidden = bool(kwargs.get("output_hidden_states"))
    joined: list[torch.Tensor] | None = None
    window = settings.window
    for first in range(0, len(tasks), settings.batch_size):
        chunk = tasks[first:first + settings.batch_size]
        ids, mask, embeds = _window_inputs(chunk, plans, lengths, window, input_ids, inputs_embeds)
        output = encode(ids, mask, embeds, **{**kwargs, "return_dict": True})
        layers = (output.last_hidden_state,) + (tuple(output.hidden_states) if want_hidden else ())
        if joined is None:
            joined = [layer.new_zeros(batch, length, layer.shape[-1]) for layer in layers]
        for row, (b, j) in enumerate(chunk):
            plan = plans[b]
            start, end = plan.keep_starts[j], plan.keep_ends[j]
            for target, layer in zip(joined, layers, strict=True):
                target[b, start:end] = layer[row, start - plan.starts[j]:end - plan.starts[j]]
    if joined is None:  # every document empty: the all-masked output, zero (one masked token gives its size)
        empty = encode(*_empty_window(input_ids, inputs_embeds), **{**kwargs, "return_dict": True})
        layers = (empty.last_hidden_state,) + (tuple(empty.hidden_states) if want_hidden else ())
        joined = [layer.new_zeros(batch, length, layer.shape[-1]) for layer in layers]
    if order is not None:  # back to the caller's positions
        index = order[..., None].expand(-1, -1, joined[0].shape[-1])
        joined = [torch.zeros_like(layer).scatter(1, index, layer) for layer in joined]
    return BaseModelOutput(last_hidden_state=joined[0], hidden_states=tuple(joined[1:]) if want_hidden else None)


def _window_inputs(
    chunk: list[tuple[int, int]],
    plans: list[EncoderWindows],
    lengths: list[int],
    window: int,
    input_ids: torch.Tensor | None,
    inputs_embeds: torch.Tensor | None,
) -> tuple[torch.Tensor | None, torch.Tensor, torch.Tensor | None]:
    """``(ids (c, w) or None, mask (c, w), embeds (c, w, d_model) or None)`` of the windows ``chunk`` ((example,
    window) pairs) of compacted inputs, padded to ``w`` tokens (mask 0) where a window runs past the real tokens."""
    source = input_ids if input_ids is not None else inputs_embeds
    assert source is not None
    width = min(window, max(min(lengths[b], plans[b].starts[j] + window) - plans[b].starts[j] for b, j in chunk))
    mask = torch.zeros(len(chunk), width, dtype=torch.long, device=source.device)
    rows = []
    for row, (b, j) in enumerate(chunk):
        start = plans[b].starts[j]
        real = min(lengths[b], start + width) - start
        mask[row, :real] = 1
        piece = source[b, start:start + width]
        if piece.shape[0] < width:
            pad = piece.new_zeros((width - piece.shape[0], *piece.shape[1:]))
            piece = torch.cat([piece, pad])
        rows.append(piece)
    stacked = torch.stack(rows)
    return (stacked, mask, None) if input_ids is not None else (None, mask, stacked)


def _empty_window(
    input_ids: torch.Tensor | None, inputs_embeds: torch.Tensor | None
) -> tuple[torch.Tensor | None, torch.Tensor, torch.Tensor | None]:
    """A one-token, masked window (for the output size of a batch of empty documents)."""
    source = input_ids if input_ids is not None else inputs_embeds
    assert source is not None
    mask = torch.zeros(1, 1, dtype=torch.long, device=source.device)
    if input_ids is not None:
        return input_ids[:1, :1], mask, None
    assert inputs_embeds is not None
    return None, mask, inputs_embeds[:1, :1]


@cache
def chunked_class(encoder_class: type) -> type:
    """The subclass of ``encoder_class`` with :class:`ChunkedEncoderMixin`'s forward (one per class)."""
    name = f"SRformerChunked{encoder_class.__name__}"
    return type(name, (ChunkedEncoderMixin, encoder_class), {"__module__": __name__})


def check_expanded_memory(model: nn.Module, encoder_hidden_states: torch.Tensor, beams: int) -> None:
    """Refuse, before ``generate`` copies the encoder output ``beams`` times (``max(num_beams,
    num_return_sequences)``), a chunked input whose generation state would then not fit
    (:func:`srformer.models.memory_estimate.check_decode_memory` with the beams; the chunked encoder checked the
    input alone). Nothing is checked with a gradient, for one copy, or for an input that fit one window.

    Args:
        model: an encoder-decoder model whose encoder has chunked encoding (:func:`install_windows`).
        encoder_hidden_states: the encoder output, (B, k, d_model).
        beams: copies of each input generation will decode.

    Raises:
        MemoryError: as :func:`~srformer.models.memory_estimate.check_decode_memory`, naming the beams.
    """
    encoder = model_encoder(model)
    windows = getattr(encoder, "srformer_windows", None)
    config = getattr(encoder, "srformer_config", None)
    if (beams <= 1 or windows is None or config is None or torch.is_grad_enabled()
            or encoder_hidden_states.shape[1] <= windows.window):
        return
    batch, length = encoder_hidden_states.shape[:2]
    check_decode_memory(config, getattr(model, "config", None), batch, length, encoder_hidden_states.dtype,
                        encoder_hidden_states.device, beams)


def model_encoder(model: nn.Module) -> nn.Module | None:
    """The encoder of an encoder-decoder ``model`` (``model.get_encoder()``), or None for a model without one (a
    decoder stack saved alone: transformers' ``get_encoder`` then returns the model itself)."""
    if not getattr(getattr(model, "config", None), "is_encoder_decoder", False):
        return None
    get_encoder = getattr(model, "get_encoder", None)
    encoder = get_encoder() if callable(get_encoder) else None
    if not isinstance(encoder, nn.Module) or encoder is model or getattr(encoder.config, "is_decoder", False):
        return None
    return encoder


def install_windows(model: nn.Module, config: SRformerConfig, family: Family | None) -> None:
    """Give ``model``'s encoder chunked encoding with ``config``'s ``encoder_window``, ``window_overlap`` and
    ``window_batch_size``: the encoder is re-classed to a subclass of its class (:func:`chunked_class`; weights and
    state dict unchanged) holding the resolved settings. Called again, it updates them.

    An encoder that reads every input whole by default (LongT5, :func:`default_window` None) is left as it is unless
    ``encoder_window`` is set.

    Args:
        model: an encoder-decoder model (a model without an encoder is left alone).
        config: the settings.
        family: the family of ``model.config`` (:func:`~srformer.models.families.family_of_config`), or None.

    Raises:
        ValueError: for an ``encoder_window`` larger than the positions of a model with a position table.
    """
    encoder = model_encoder(model)
    if encoder is None:
        return
    encoder_class: Any = type(encoder)  # a class is hashable (the cache's key)
    chunked_type = encoder_class if isinstance(encoder, ChunkedEncoderMixin) else chunked_class(encoder_class)
    settings = resolve_window_settings(
        model.config, family, config.encoder_window, config.window_overlap, config.window_batch_size
    )
    if settings is None and chunked_type is not encoder_class:
        return  # an encoder that reads every input whole (LongT5) stays the family's own
    if chunked_type is not encoder_class:
        encoder.__class__ = chunked_type
        if RECORDABLE_OUTPUTS is not None and isinstance(encoder, PreTrainedModel):
            RECORDABLE_OUTPUTS[encoder] = encoder._can_record_outputs
    chunked: Any = encoder
    chunked.srformer_windows = settings
    chunked.srformer_config = config


def _recordable_outputs_registry() -> Any:
    """transformers' registry of recordable outputs (``output_hidden_states``, ...) keyed by model class, or
    None for a transformers version that records outputs another way."""
    try:
        module = importlib.import_module("transformers.utils.output_capturing")
    except ImportError:
        return None
    return getattr(module, "_CAN_RECORD_REGISTRY", None)


#: transformers' registry of the outputs each model class records (``output_hidden_states``, ...), filled by
#: ``PreTrainedModel.__init__``: a model re-classed without running ``__init__`` is entered there by whoever
#: re-classes it (here and :func:`srformer.models.classes.adopt_class`), else its hidden states would silently not
#: be returned. None for a transformers version that records outputs another way.
RECORDABLE_OUTPUTS: Any = _recordable_outputs_registry()
