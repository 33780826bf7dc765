"""Sparse Transformer strided pattern (Child, Gray, Radford & Sutskever 2019, Generating Long Sequences with
Sparse Transformers, Sec. 4.2-4.3), as decoder cross attention: the ``strided`` variant.

Child et al. factorise attention into a local part (the previous ``l`` positions) and a strided part (every
``l``-th position); in the "fixed" pattern the strided part is the last position of every block of ``l``
("summary" cells, ``c = 1``), which every later position attends. As cross attention, the local part is the
scheduled segment ``i(t)`` (:mod:`srformer.attention.schedule`), and decoder position ``t`` attends with
one softmax to the union

    segment(i(t))  ∪  {p : p mod l = l - 1, 0 <= p < n}

over the example's ``n`` real (compacted) positions, ``l = SRformerConfig.resolved_stride()`` (by default
``segment_size``: the last position of every segment). A strided position inside the scheduled segment
is attended once (the union, as Child et al.'s merged head ``A = A^(1) ∪ A^(2)``).

The schedule, compaction and both paths are those of
:class:`~srformer.attention.segmented.SegmentedCrossAttention`: the strided keys are its
:meth:`~StridedCrossAttention.global_tokens`, gathered once per sequence into the state
(:class:`StridedState`), and the scheduled block leaves out its strided positions
(:meth:`~StridedCrossAttention.context_blocks`), which the tokens already hold. There is no lean layout.
Cost per head: one step ``O((s + k/l)·d)``; building the state ``O(k/l · d)`` more than ``segmented``.
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import TYPE_CHECKING

import torch

from srformer.attention.segmented import SegmentedCrossAttention, SegmentState
from srformer.attention.state import CrossAttentionState, accumulation_dtype, autocast_off, extend
from srformer.core import MechanismSettings

if TYPE_CHECKING:
    from srformer.core import SRformerConfig


@dataclass(frozen=True)
class StridedSettings(MechanismSettings):
    """The settings of the ``strided`` variant (``SRformerConfig(variant='strided', ...)``;
    None: the default named below).

    Attributes:
        stride: ``l``, the stride of the ``strided`` variant (Child et al. 2019): besides segment ``i(t)`` a query
            attends every real position ``p`` with ``p mod l = l - 1``. At least 2. None (default): ``segment_size``
            (the last position of every segment).
    """

    stride: int | None = None

    def validate(self, config: SRformerConfig) -> None:
        """The stride in use (``stride`` or ``segment_size``) must be an integer >= 2."""
        stride = self.resolved_stride(config)
        if isinstance(stride, bool) or not isinstance(stride, int) or stride < 2:
            raise ValueError(
                f"`stride` (default: segment_size) must be an integer >= 2 (stride 1 would attend every "
                f"position, full attention), got {stride!r}; set stride=2 or more."
            )

    def resolved_stride(self, config: SRformerConfig) -> int:
        """``l``: ``stride``, or ``segment_size`` when it is None."""
        return self.stride if self.stride is not None else config.resolved_segment_size()


@dataclass(kw_only=True)
class StridedState(SegmentState):
    """The ``strided`` state: :class:`~srformer.attention.segmented.SegmentState` plus the strided keys/values.

    Shapes: G = ``floor(M*s / l)`` strided positions ``l - 1, 2l - 1, ...`` of the compacted sequence.

    Attributes:
        strided_keys: (B, H, G, d) keys at the strided compacted positions (zero beyond an example's length).
        strided_values: (B, H, G, d) values at those positions.
        strided_valid: (B, G) bool, the strided positions that are real (``< lengths``).
    """

    strided_keys: torch.Tensor
    strided_values: torch.Tensor
    strided_valid: torch.Tensor


def strided_positions(total: int, stride: int, device: torch.device | None = None) -> torch.Tensor:
    """(G,) long, the positions ``p < total`` with ``p mod stride = stride - 1``, ``G = floor(total / stride)``."""
    return torch.arange(stride - 1, total, stride, device=device)


class StridedCrossAttention(SegmentedCrossAttention):
    """The ``strided`` variant for one decoder layer; arguments as :class:`SegmentedCrossAttention`
    (``config.resolved_stride()`` is ``l``)."""

    @autocast_off
    def init_state(self, keys: torch.Tensor, values: torch.Tensor, key_valid: torch.Tensor | None) -> StridedState:
        """:meth:`SegmentedCrossAttention.init_state` plus the keys/values at the strided positions (one
        gather, O(k/l · d) per head); arguments, errors and empty documents as there (an empty document has
        no real strided position: it attends its zero segment only)."""
        state = super().init_state(keys, values, key_valid)
        batch, max_segments, heads, s, d = state.keys.shape
        stride = self.settings.resolved_stride()
        positions = strided_positions(max_segments * s, stride, state.keys.device)  # (G,)

        def gather(tensor: torch.Tensor) -> torch.Tensor:  # (B, M, H, s, d) -> (B, H, G, d)
            rows = tensor.transpose(1, 2).reshape(batch, heads, max_segments * s, d)
            return rows.index_select(2, positions)

        return extend(
            StridedState, state, strided_keys=gather(state.keys), strided_values=gather(state.values),
            strided_valid=positions[None, :] < state.lengths[:, None],
        )

    def context_blocks(
        self, segments: torch.Tensor, index: torch.Tensor, max_segments: int
    ) -> list[tuple[torch.Tensor, torch.Tensor | None, bool]]:
        """The scheduled segment without its strided positions (:meth:`global_tokens` holds them), as an
        (N, s) mask; arguments and result as :meth:`SegmentedCrossAttention.context_blocks`. Position 0 of
        segment 0 is never strided (``l >= 2``), so an empty document's zero segment keeps a key."""
        s, stride = self.settings.resolved_segment_size(), self.settings.resolved_stride()
        positions = segments[:, None] * s + torch.arange(s, device=segments.device)[None, :]  # (N, s)
        return [(index, positions % stride != stride - 1, False)]

    def global_tokens(self, state: CrossAttentionState) -> tuple[torch.Tensor, torch.Tensor, torch.Tensor] | None:
        """The strided keys, values and validity: (B, H, G, d) twice and (B, G) bool."""
        assert isinstance(state, StridedState), type(state)
        return state.strided_keys, state.strided_values, state.strided_valid

    def global_token_spread(self, state: CrossAttentionState) -> torch.Tensor:
        """(B, G, M*s): strided token ``g`` is compacted position ``g*l + l - 1`` itself (weight 1 when real)."""
        assert isinstance(state, StridedState), type(state)
        batch, max_segments, _, s, _ = state.keys.shape
        stride = self.settings.resolved_stride()
        positions = strided_positions(max_segments * s, stride, state.keys.device)
        one_hot = positions[:, None] == torch.arange(max_segments * s, device=positions.device)[None, :]  # (G, M*s)
        wide = accumulation_dtype(state.keys.dtype)
        return one_hot[None].to(wide) * state.strided_valid[:, :, None].to(wide)
