"""Per-sequence cross-attention state for incremental generation, and the cache layer holding it.

The state lives inside the Hugging Face ``EncoderDecoderCache`` (its cross-attention part), in a
:class:`SRformerCacheLayer` that replaces the layer's ``DynamicLayer``. Every cache operation that
``generate()`` performs — beam reordering, batch repetition and selection, offloading, reset —
therefore applies to every state tensor, not only to the keys and values (``docs/design.md``,
"Generation cache").
"""

from __future__ import annotations

import functools
import weakref
from collections.abc import Callable
from dataclasses import dataclass, fields, replace
from typing import Any, ClassVar, Self, TypeVar

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
    """An optional field of a lean state that the caller needs (e.g. the current segment's keys, which
    exist only after the step that entered the segment).

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
            f"The cross-attention state has no `{name}` yet. Build it with this module's init_state() "
            "(start generation with a fresh cache)."
        )
    return tensor


@dataclass(kw_only=True)
class CrossAttentionState:
    """Base of every per-sequence cross-attention state: what one layer carries between decoder steps
    (one example per row). Each mechanism's module defines its own subclass, whose fields are its
    tensors (``srformer.attention.segmented.SegmentState``, ``...srformer.SRformerState``, ...; the
    registry names them, :attr:`srformer.core.schema.Mechanism.state`).

    Every field that is a tensor has the batch (B = batch times beams) on axis 0, so beam reordering,
    batch repetition/selection and offloading (:class:`SRformerCacheLayer`) apply :meth:`map_batch` to
    all of them, whatever the subclass; a field may be None only where its subclass says so.

    Attributes:
        lengths: (B,) long, real encoder lengths in tokens (0 for an empty document).
        num_segments: (B,) long, ``m = ceil(length / s)``, at least 1 (an empty document has one empty
            segment); 1 for a mechanism without segments.
        last_segment: (B,) long, the segment of the previous decoder step (-1 before the first).
        is_lean: class attribute: no encoder-length keys/values are kept (the lean layout, and ``linear``).
        reads_encoder_rows: class attribute: each step projects rows of the encoder output, which must
            therefore stay alive (the lean layout of the segment-based mechanisms).
    """

    lengths: torch.Tensor
    num_segments: torch.Tensor
    last_segment: torch.Tensor

    is_lean: ClassVar[bool] = False
    reads_encoder_rows: ClassVar[bool] = False

    def anchors(self) -> tuple[torch.Tensor, torch.Tensor]:
        """Two tensors of the state, batch on axis 0, whose device is the state's (device queries of the cache
        layer). Not the keys/values transformers reads: those are :meth:`encoder_keys`/:meth:`encoder_values`."""
        raise NotImplementedError(f"{type(self).__name__} must define anchors().")

    def encoder_keys(self, encoder_length: int) -> torch.Tensor | None:
        """The projected encoder keys in transformers' layout, (B, H, k, d) in encoder order, computed from
        the state at each call (not stored), or None for a state that keeps no per-position keys (a lean
        layout, a summary). Subclasses that keep them override this.

        Args:
            encoder_length: ``k``, the encoder length in tokens (padding included).
        """
        return None

    def encoder_values(self, encoder_length: int) -> torch.Tensor | None:
        """The projected encoder values, as :meth:`encoder_keys`."""
        return None

    def anchor(self) -> torch.Tensor:
        """The first of :meth:`anchors`: the tensor whose device is the state's."""
        return self.anchors()[0]

    def map_batch(self, fn: Callable[[torch.Tensor], torch.Tensor]) -> Self:
        """A new state of the same class with ``fn`` applied to every tensor field (all have the batch on axis 0)."""
        changes = {}
        for field in fields(self):
            value = getattr(self, field.name)
            if isinstance(value, torch.Tensor):
                changes[field.name] = fn(value)
        return replace(self, **changes)

    def shared(self) -> tuple[object, int] | None:
        """A structure this state shares with other layers' states (``knn``'s search index), and its bytes: counted
        once however many layers hold it. None here."""
        return None

    def nbytes(self) -> int:
        """Bytes held by all state tensors (not :meth:`shared`)."""
        total = 0
        for field in fields(self):
            value = getattr(self, field.name)
            if isinstance(value, torch.Tensor):
                total += value.numel() * value.element_size()
        return total


def shares_storage(tensor: torch.Tensor, other: torch.Tensor) -> bool:
    """Whether ``tensor`` and ``other`` are views of one storage (writing one may change the other)."""
    return tensor.untyped_storage().data_ptr() == other.untyped_storage().data_ptr()


def rows_in_encoder_order(rows: torch.Tensor, positions: torch.Tensor, encoder_length: int) -> torch.Tensor:
    """Per-head rows of a state's own layout moved back to encoder order, zero where no row lands (padding).

    Args:
        rows: (B, H, n, d), row ``j`` of an example holding encoder position ``positions[:, j]``; rows past an
            example's real positions must be zero (they carry some position and are added there).
        positions: (B, n) integer encoder positions.
        encoder_length: ``k``.

    Returns:
        (B, H, k, d): one scatter, ``O(n·d)`` per head.
    """
    batch, heads, _, d = rows.shape
    index = positions.to(torch.long)[:, None, :, None].expand(-1, heads, -1, d)
    return rows.new_zeros(batch, heads, encoder_length, d).scatter_add_(2, index, rows)


S = TypeVar("S", bound=CrossAttentionState)


def extend(cls: type[S], state: CrossAttentionState, **extra: Any) -> S:
    """A ``cls`` state holding every field of ``state`` plus ``extra`` (a subclass's own fields).

    Args:
        cls: the subclass to build; its fields must be ``state``'s fields plus the keys of ``extra``.
        state: the state to extend (its fields are shared, not copied).
        extra: the added fields.

    Raises:
        TypeError: if the fields do not match ``cls``'s.
    """
    values: dict[str, Any] = {field.name: getattr(state, field.name) for field in fields(state)}
    return cls(**values, **extra)


def reorder_rows(tensor: torch.Tensor, index: torch.Tensor) -> torch.Tensor:
    """``tensor.index_select(0, index)`` with ``tensor``'s strides: ``index_select`` returns a contiguous tensor
    (and is the faster gather for one), while indexing keeps the layout of a dense non-contiguous one, such as a
    transposed view kept so that a later matmul reads it in the order it wants.

    Args:
        tensor: (B, ...) any tensor with the batch on axis 0.
        index: (B',) long, rows of ``tensor`` in the new order.
    """
    return tensor.index_select(0, index) if tensor.is_contiguous() else tensor[index]


class SharedMapping:
    """One batch operation (a beam reorder, a repeat, a selection) that a cache applies to its layers' states one
    layer at a time: a tensor that several layers' states hold (``knn``'s encoder rows) is mapped once and the
    result handed to each, so that it stays one tensor, not one copy per layer. The operation is named by a
    ``(name, argument)`` pair, the argument compared by identity (a tensor such as ``beam_idx``) or by value (an
    int); inputs and results are held weakly, and an input changed in place since is mapped again.
    """

    def __init__(self) -> None:
        self._operation: tuple[str, Any] | None = None
        self._results: dict[int, tuple[weakref.ref, int, weakref.ref]] = {}

    def map(self, operation: tuple[str, Any], tensor: torch.Tensor,
            fn: Callable[[torch.Tensor], torch.Tensor]) -> torch.Tensor:
        """``fn(tensor)``, or the result this operation already gave for this very tensor."""
        if not self._same(operation):
            name, argument = operation
            held = weakref.ref(argument) if isinstance(argument, torch.Tensor) else argument
            self._operation, self._results = (name, held), {}
        entry = self._results.get(id(tensor))
        if entry is not None and entry[0]() is tensor and entry[1] == tensor_version(tensor):
            result = entry[2]()
            if result is not None:
                return result
        result = fn(tensor)
        self._results[id(tensor)] = (weakref.ref(tensor), tensor_version(tensor), weakref.ref(result))
        return result

    def _same(self, operation: tuple[str, Any]) -> bool:
        if self._operation is None or self._operation[0] != operation[0]:
            return False
        held, argument = self._operation[1], operation[1]
        if isinstance(argument, torch.Tensor):
            return isinstance(held, weakref.ref) and held() is argument
        return not isinstance(held, weakref.ref) and held == argument


def tensor_version(tensor: torch.Tensor) -> int:
    """The tensor's in-place version counter (-1 for an inference tensor, which has none: it cannot be modified in
    place outside inference mode either)."""
    try:
        return int(tensor._version)
    except RuntimeError:
        return -1


#: The batch operations of every cache (one at a time: a cache maps its layers in turn).
SHARED_MAPPING = SharedMapping()


class _PresentedTensor:
    """The ``keys`` or ``values`` attribute of an :class:`SRformerCacheLayer`: read, the layer's
    ``_presented(name)``; assigned, None is accepted (transformers' base classes assign it on construction and
    reset) and a tensor is refused."""

    def __set_name__(self, owner: type, name: str) -> None:
        self.name = name

    def __get__(self, layer: SRformerCacheLayer | None, owner: type | None = None) -> Any:
        return self if layer is None else layer._presented(self.name)

    def __set__(self, layer: SRformerCacheLayer, value: torch.Tensor | None) -> None:
        layer._refuse_assignment(self.name, value)


class SRformerCacheLayer(DynamicLayer):
    """A cross-attention cache layer that carries a :class:`CrossAttentionState`.

    The state keeps the layout the mechanism's step reads (segment-major blocks, a summary, a few ``d x d``
    matrices); the layer presents transformers' view of a cross-attention layer on top of it
    (``docs/design.md``, "Generation cache"):

    * :meth:`get_seq_length` is the encoder length ``k`` (as for a ``DynamicLayer`` holding the encoder's
      keys), so ``cache.cross_attention_cache.get_seq_length()`` and ``EncoderDecoderCache``'s
      ``is_updated`` agree with an unconverted model's;
    * ``keys``/``values`` are (B, H, k, d) tensors in the keys' dtype. A state that keeps the encoder's keys
      and values (standard layouts of the segment-based and content-based mechanisms) gives them in encoder
      order, zero at padded positions, computed from the state when read (:meth:`CrossAttentionState.encoder_keys`;
      nothing is stored, and generation never reads them). A state without per-position keys (the lean layouts,
      ``linear``, ``fastformer``, the summaries, ``performer``) gives a zero tensor of that shape expanded from
      one element (stride 0, no memory of its own): the shape and dtype transformers' format checks read, with
      no values, since the layer has none to give.
    * Beam reordering, batch repetition and selection, offloading and reset apply to every tensor of the
      state, whatever its class; ``crop`` has nothing to remove (the state does not grow with decoder tokens).

    Args:
        state: the layer's state.
        key_shape: ``(heads, k, head_dim)`` of the keys the layer presents.
        dtype: their dtype (the projected keys' dtype).
    """

    state: CrossAttentionState | None
    #: A NaN/inf check of the state still to be read at the layer's next step (on an accelerator:
    #: :class:`srformer.models.cross_attention.PendingFiniteCheck`), or None.
    pending_check: object | None = None

    def __init__(self, state: CrossAttentionState, key_shape: tuple[int, int, int], dtype: torch.dtype) -> None:
        super().__init__()
        self.key_shape = key_shape
        self.dtype = dtype
        self.set_state(state)

    def set_state(
        self, state: CrossAttentionState, key_shape: tuple[int, int, int] | None = None,
        dtype: torch.dtype | None = None,
    ) -> None:
        """Replace the held state; ``key_shape`` and ``dtype`` (as in the constructor) when they change (a new
        sequence), else kept."""
        self.state = state
        if key_shape is not None:
            self.key_shape = key_shape
        if dtype is not None:
            self.dtype = dtype
        self.device = state.anchor().device
        self.is_initialized = True

    # transformers' layer attributes, presented from the state (see the class docstring)
    keys = _PresentedTensor()
    values = _PresentedTensor()

    def _presented(self, name: str) -> torch.Tensor | None:
        state = getattr(self, "state", None)
        if state is None:
            return None
        heads, length, head_dim = self.key_shape
        rows = state.encoder_keys(length) if name == "keys" else state.encoder_values(length)
        if rows is not None:
            return rows.to(self.dtype)
        anchor = state.anchor()
        return anchor.new_zeros((), dtype=self.dtype).expand(anchor.shape[0], heads, length, head_dim)

    @staticmethod
    def _refuse_assignment(name: str, value: torch.Tensor | None) -> None:
        # transformers' base classes assign None on construction and reset; anything else would be lost
        if value is not None:
            raise AttributeError(
                f"An SRformer cross-attention cache layer presents `{name}` from its state and cannot be assigned "
                "tensors; replace the state with set_state()."
            )

    def get_seq_length(self) -> int:
        """The encoder length ``k`` (0 without a state)."""
        return self.key_shape[1] if self.state is not None else 0

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
        """Reorder every state tensor for beam search, keeping each tensor's memory layout (a state may hold a
        transposed view on purpose, such as ``block-topk``'s mean keys; :func:`reorder_rows`). A tensor that other
        layers' states hold too stays shared (:class:`SharedMapping`)."""
        self.set_state(self.held_state().map_batch(
            lambda x: SHARED_MAPPING.map(("reorder", beam_idx), x, lambda t: reorder_rows(t, beam_idx.to(t.device)))))

    def batch_repeat_interleave(self, repeats: int) -> None:
        """Repeat every state tensor ``repeats`` times along the batch axis (a shared one once)."""
        self.set_state(self.held_state().map_batch(
            lambda x: SHARED_MAPPING.map(("repeat", repeats), x, lambda t: t.repeat_interleave(repeats, dim=0))))

    def batch_select_indices(self, indices: torch.Tensor) -> None:
        """Keep only ``indices`` of the batch axis in every state tensor (a shared one once)."""
        self.set_state(self.held_state().map_batch(
            lambda x: SHARED_MAPPING.map(("select", indices), x, lambda t: t[indices, ...])))

    def crop(self, tokens_to_remove: int) -> None:
        """Cross-attention state does not grow with decoder tokens: nothing to crop."""

    def offload(self) -> None:
        """Move the state to the CPU (a tensor shared by layers once)."""
        device = self.device
        self.set_state(self.held_state().map_batch(
            lambda x: SHARED_MAPPING.map(("offload", "cpu"), x, lambda t: t.to("cpu", non_blocking=True))))
        self.device = device

    def prefetch(self) -> None:
        """Move the state back to the layer's device (a tensor shared by layers once)."""
        state = self.held_state()
        if state.anchor().device != self.device:
            device = self.device
            self.set_state(state.map_batch(
                lambda x: SHARED_MAPPING.map(("prefetch", str(device)), x, lambda t: t.to(device, non_blocking=True))))

    def reset(self) -> None:
        """Drop the state (the next forward pass rebuilds it from the encoder output)."""
        self.state = None
        self.pending_check = None
        super().reset()
