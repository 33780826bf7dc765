"""Per-sequence cross-attention state for incremental generation, and the cache layer holding it.

The state lives inside the Hugging Face ``EncoderDecoderCache`` (its cross-attention part), in a
:class:`SRformerCacheLayer` that replaces the layer's ``DynamicLayer``. Every cache operation that
``generate()`` performs — beam reordering, batch repetition and selection, offloading, reset —
therefore applies to every state tensor, not only to the keys and values (``docs/design.md``,
"Generation cache").
"""

from __future__ import annotations

import functools
from collections.abc import Callable
from dataclasses import dataclass, fields, replace

import torch
from transformers.cache_utils import DynamicLayer


def autocast_off(method: Callable) -> Callable:
    """Decorator for the methods that build or update per-sequence state (``K^T V`` products, ``W``,
    ``norm(K)``, the RAF membrane): they run with autocast off on the device of their first argument
    (a tensor, or a :class:`CrossAttentionState`), so that under bf16/fp16 autocast these einsums and
    linear layers still compute in float32 or wider (autocast would otherwise recast their inputs to
    its low-precision dtype; see :func:`accumulation_dtype`)."""

    @functools.wraps(method)
    def wrapper(self, first, *args, **kwargs):
        device = first.device if isinstance(first, torch.Tensor) else first.lengths.device
        with torch.autocast(device_type=device.type, enabled=False):
            return method(self, first, *args, **kwargs)

    return wrapper


def accumulation_dtype(dtype: torch.dtype) -> torch.dtype:
    """The dtype in which per-sequence state (``K^T V`` products, ``W P_i``, ``norm(K)``, the RAF
    membrane) is accumulated for inputs of ``dtype``: float32 as a floor under reduced precision
    (bf16/fp16 keys and values, or autocast), and the input's own dtype when it is wider (a float64
    model keeps a float64 state, so ``torch.autograd.gradcheck`` and float64 references apply).

    Args:
        dtype: a floating dtype (the projected keys'/values'/queries' dtype).

    Returns:
        ``torch.promote_types(dtype, torch.float32)``.
    """
    return torch.promote_types(dtype, torch.float32)


def required(tensor: torch.Tensor | None, name: str) -> torch.Tensor:
    """A field of a :class:`CrossAttentionState` that the caller's variant and layout must hold.

    Fields are None in the layouts and variants that do not use them (see the class's attributes);
    one missing where it is needed means the state was built by another module.

    Args:
        tensor: the field's value.
        name: the field's name, for the message.

    Returns:
        ``tensor``, known not to be None.

    Raises:
        ValueError: if ``tensor`` is None.
    """
    if tensor is None:
        raise ValueError(
            f"The cross-attention state has no `{name}`: it was built by another variant or in the other layout "
            "(standard vs lean_cache). Build it with this module's init_state() (start generation with a fresh cache)."
        )
    return tensor


@dataclass
class CrossAttentionState:
    """Everything one cross-attention layer needs between decoder steps (one example per row).

    Shapes use B = batch (times beams), H = heads, d = head_dim, s = segment_size,
    M = the largest number of segments in the batch.

    Two layouts exist. The standard one keeps the projected keys/values and the RAF output of
    every segment (paper Table 1 memory: ``k*d + m*d^2`` per head). The lean one (``lean_cache=True``)
    keeps neither: each step projects its segment's rows of the encoder output, which
    ``generate()`` hands to every layer anyway, so the per-layer state is ``O(heads * d^2)``
    numbers plus a compaction index.

    Attributes:
        lengths: (B,) long, real encoder lengths in tokens (0 for an empty document).
        num_segments: (B,) long, ``m = ceil(length / s)``, at least 1 (an empty document has one empty segment).
        last_segment: (B,) long, the segment of the previous decoder step (-1 before the first).
        keys: standard layout: (B, M, H, s, d) segment-major keys: block ``j`` holds compacted positions
            ``j*s .. j*s + s - 1`` (each example's real positions moved to the front, zeros after them, so
            padding never enters a segment, ``K^T V`` or ``norm(K)``). The (B, M) axes flatten to a view,
            so one ``index_select`` reads a segment's block per example (a step) or per query
            (training). None in the lean layout.
        values: (B, M, H, s, d) values, same layout as ``keys``; None in the lean layout.
        positions: (B, M*s) int32, the encoder position of each compacted position (the lean layout
            gathers its segment's rows of the encoder output with it).
        segment_table: (B, T+1) long, ``i(t)`` for ``t = 0 .. T`` (later steps use column T).
        segment_valid: (B, M, s) bool, the positions a softmax may attend: the real ones, and for an
            empty document all of segment 0 (zero keys and values, so its output is 0).
        raf_readout: standard layout: (B, M, H, d, d) accumulation-dtype ``scale * RAF_out_j / norm(K)``: the
            RAF output in force while segment ``j`` is attended (Eq. 13-16, A.2), computed once for
            every visited segment, with the attention scale and ``norm(K)`` folded in, so that
            ``O_R[t] = Q_t . raf_readout[i(t)]``. None in the lean layout or without recurrence.
        raf_total: (B, H, d, d) accumulation-dtype ``W K^T V`` over real positions (Eq. 15; ``W`` is the RAF
            linear layer, applied on the last axis), or None without recurrent attention.
        key_norm: (B, H, d) accumulation-dtype ``norm(K) + eps`` over real positions (Eq. 13), or None.
        membrane: lean layout: (B, H, d, d) accumulation-dtype RAF membrane potential; None otherwise.
        raf_output: lean layout: (B, H, d, d) accumulation-dtype RAF output of the current segment; None otherwise.
        segment_keys: lean layout: (B, H, s, d) the current segment's projected keys (zero at padding),
            kept from the step that entered the segment; None before the first step and otherwise.
        segment_values: lean layout: (B, H, s, d) the current segment's projected values.
        segment_allowed: lean layout: (B, s) bool, the current segment's attendable positions.
        segment_readout: lean layout with recurrence: (B, H, d, d) accumulation-dtype readout of the current segment.
        global_keys: ``longt5``: (B, H, M, d) mean of each segment's real keys; None otherwise.
        global_values: ``longt5``: (B, H, M, d) mean of each segment's real values; None otherwise.
        global_valid: ``longt5``: (B, M) bool, segments holding a real token; None otherwise.
        linear_kv: ``linear``: (B, H, d, d) accumulation-dtype ``phi(K)^T V`` over real positions; None otherwise.
        linear_key_sum: ``linear``: (B, H, d) accumulation-dtype ``sum_j phi(K_j)`` over real positions.
    """

    lengths: torch.Tensor
    num_segments: torch.Tensor
    last_segment: torch.Tensor
    keys: torch.Tensor | None = None
    values: torch.Tensor | None = None
    positions: torch.Tensor | None = None
    segment_table: torch.Tensor | None = None
    segment_valid: torch.Tensor | None = None
    raf_readout: torch.Tensor | None = None
    raf_total: torch.Tensor | None = None
    key_norm: torch.Tensor | None = None
    membrane: torch.Tensor | None = None
    raf_output: torch.Tensor | None = None
    segment_keys: torch.Tensor | None = None
    segment_values: torch.Tensor | None = None
    segment_allowed: torch.Tensor | None = None
    segment_readout: torch.Tensor | None = None
    global_keys: torch.Tensor | None = None
    global_values: torch.Tensor | None = None
    global_valid: torch.Tensor | None = None
    linear_kv: torch.Tensor | None = None
    linear_key_sum: torch.Tensor | None = None

    @property
    def is_lean(self) -> bool:
        """True when no encoder-length keys/values are kept (the lean layout, and ``linear``)."""
        return self.keys is None

    @property
    def reads_encoder_rows(self) -> bool:
        """True for the lean layout of ``segmented``/``srformer``: each step projects its segment's
        rows of the encoder output, which must therefore stay alive (``linear`` needs no rows)."""
        return self.keys is None and self.positions is not None

    def anchor(self) -> torch.Tensor:
        """The tensor a cache layer exposes as its ``keys``/``values`` (for generic cache code):
        the keys, else the lean layout's positions, else the linear-attention product."""
        for tensor in (self.keys, self.positions, self.linear_kv):
            if tensor is not None:
                return tensor
        raise ValueError("A cross-attention state holds neither keys, positions nor a linear-attention product.")

    def map_batch(self, fn: Callable[[torch.Tensor], torch.Tensor]) -> CrossAttentionState:
        """A new state with ``fn`` applied to every tensor (all have the batch on axis 0)."""
        changes = {}
        for field in fields(self):
            value = getattr(self, field.name)
            if value is not None:
                changes[field.name] = fn(value)
        return replace(self, **changes)

    def nbytes(self) -> int:
        """Bytes held by all state tensors."""
        total = 0
        for field in fields(self):
            value = getattr(self, field.name)
            if value is not None:
                total += value.numel() * value.element_size()
        return total


class SRformerCacheLayer(DynamicLayer):
    """A cross-attention cache layer that carries a :class:`CrossAttentionState`.

    ``keys``/``values`` mirror ``state.keys``/``state.values`` in the standard layout (otherwise
    both point at :meth:`CrossAttentionState.anchor`) so that generic cache code (``get_seq_length``,
    device queries) keeps working; every batch operation is applied to the whole state.
    """

    state: CrossAttentionState | None

    def __init__(self, state: CrossAttentionState) -> None:
        super().__init__()
        self.set_state(state)

    def set_state(self, state: CrossAttentionState) -> None:
        """Replace the held state (keys and values follow)."""
        self.state = state
        self.keys = state.anchor()
        self.values = state.values if state.values is not None else self.keys
        self.dtype, self.device = self.keys.dtype, self.keys.device
        self.is_initialized = True

    def update(self, key_states, value_states, *args, **kwargs):  # noqa: D102 - cross attention is never appended to
        raise RuntimeError(
            "An SRformer cross-attention cache layer cannot be updated with new keys/values; "
            "it is filled once per sequence by the SRformer attention module."
        )

    def held_state(self) -> CrossAttentionState:
        """The held state.

        Raises:
            RuntimeError: after :meth:`reset`, until the next forward pass builds a new state.
        """
        if self.state is None:
            raise RuntimeError(
                "This SRformer cross-attention cache layer was reset and holds no state; run a forward pass "
                "(the next one rebuilds the state from the encoder output) before using it."
            )
        return self.state

    def reorder_cache(self, beam_idx: torch.LongTensor) -> None:
        """Reorder every state tensor for beam search."""
        self.set_state(self.held_state().map_batch(lambda x: x.index_select(0, beam_idx.to(x.device))))

    def batch_repeat_interleave(self, repeats: int) -> None:
        """Repeat every state tensor ``repeats`` times along the batch axis."""
        self.set_state(self.held_state().map_batch(lambda x: x.repeat_interleave(repeats, dim=0)))

    def batch_select_indices(self, indices: torch.Tensor) -> None:
        """Keep only ``indices`` of the batch axis in every state tensor."""
        self.set_state(self.held_state().map_batch(lambda x: x[indices, ...]))

    def crop(self, tokens_to_remove: int) -> None:
        """Cross-attention state does not grow with decoder tokens: nothing to crop."""

    def offload(self) -> None:
        """Move the state to the CPU."""
        device = self.device
        self.set_state(self.held_state().map_batch(lambda x: x.to("cpu", non_blocking=True)))
        self.device = device

    def prefetch(self) -> None:
        """Move the state back to the layer's device."""
        state = self.held_state()
        if state.anchor().device != self.device:
            device = self.device
            self.set_state(state.map_batch(lambda x: x.to(device, non_blocking=True)))

    def reset(self) -> None:
        """Drop the state (the next forward pass rebuilds it from the encoder output)."""
        self.state = None
        super().reset()
