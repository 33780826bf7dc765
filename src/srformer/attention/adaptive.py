"""Adaptive attention span (Sukhbaatar, Grave, Bojanowski & Joulin 2019, Adaptive Attention Span in Transformers,
Sec. 3), as decoder cross attention: the ``adaptive`` variant.

Each head learns its span ``z``: the attention weights are multiplied by the soft mask
``m_z(x) = min(max((R + z - x) / R, 0), 1)`` of a key's distance ``x`` and renormalised (Sec. 3, "Adaptive
attention span"), ``R`` being the ramp. A decoder query has no position in the encoder sequence, so the
distance is measured from the query's scheduled segment ``i(t)`` (:mod:`srformer.attention.schedule`): for
compacted position ``p``,

    x(p) = max(i(t)*s - p,  p - (i(t)*s + s - 1),  0)

(0 inside the scheduled segment, which is therefore always attended with mask 1), and decoder position
``t`` attends with

    a_p = m_z(x(p)) exp(scale * Q_t K_p) / sum_{p'} m_z(x(p')) exp(scale * Q_t K_p')

over the real positions with ``x(p) <= S`` (``S = max_span``, default ``2s``; the paper also reads only
the last ``S`` positions). ``R = span_ramp`` (default ``s``). The span is ``z = S * clamp(f, 0, 1)``, one
learned ``f`` per head (``span_fraction``), initialised to ``span_init`` (default 0.5); as in the paper
``z`` is clamped to ``[0, S]``. Since ``x(p) - i(t)*s`` does not depend on ``t``, the mask is one
(heads, positions) tensor over the blocks ``i(t) - ceil(S/s) .. i(t) + ceil(S/s)``, added to the scores as
``log m`` (:meth:`~AdaptiveSpanCrossAttention.block_bias`): ``softmax(scores + log m)`` is exactly the
renormalised product, and gradients reach ``f`` through ``log m`` wherever ``0 < m < 1``. The paper's L1
penalty on the spans is a term of the training loss, not of attention: :meth:`~AdaptiveSpanCrossAttention.spans`
returns ``z`` to add it; the training pipeline does not.

The schedule, the state (:class:`~srformer.attention.segmented.SegmentState`) and both paths are those of
:class:`~srformer.attention.segmented.SegmentedCrossAttention`. There is no lean layout. Cost of one step per
head: ``O((s + 2S + 2s)·d)`` (whole blocks are read; the mask keeps ``s + 2S`` positions at most).
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import TYPE_CHECKING

import torch
from torch import nn

from srformer.attention.initialization import InitFunctions
from srformer.attention.segmented import SegmentedCrossAttention
from srformer.core import MechanismSettings, integer_setting

if TYPE_CHECKING:
    from srformer.core import SRformerConfig


@dataclass(frozen=True)
class AdaptiveSettings(MechanismSettings):
    """The settings of the ``adaptive`` variant (``SRformerConfig(variant='adaptive', ...)``;
    None: the default named below).

    Attributes:
        max_span: ``S``, the largest span of the ``adaptive`` variant (Sukhbaatar et al. 2019, Sec. 3): a query reads
            the positions at most ``S`` positions outside its scheduled segment. At least 0. None (default): ``2 *
            segment_size``.
        span_ramp: ``R``, the length of the soft mask's ramp ``m_z(x) = min(max((R + z - x) / R, 0), 1)``. At least 1.
            None (default): ``segment_size``.
        span_init: the initial span of every head as a fraction of ``S``, ``z = span_init * S``, in [0, 1]. None
            (default): 0.5 (inside the range, so the ramp's keys give ``z`` a gradient from the first step).
    """

    max_span: int | None = integer_setting(0, None, "the largest adaptive span, in positions")
    span_ramp: int | None = integer_setting(1, None, "the soft span mask's ramp, in positions")
    span_init: float | None = None

    def validate(self, config: SRformerConfig) -> None:
        """``max_span`` >= 0, ``span_ramp`` >= 1 (integers) and ``span_init`` in [0, 1], each where given."""
        super().validate(config)
        if self.span_init is not None:
            number = isinstance(self.span_init, int | float) and not isinstance(self.span_init, bool)
            if not number or not 0.0 <= self.span_init <= 1.0:
                raise ValueError(
                    f"`span_init` (the initial span / max_span) must lie in [0, 1], got {self.span_init!r}."
                )

    def resolved_max_span(self, config: SRformerConfig) -> int:
        """``S``: ``max_span``, or ``2 * segment_size`` when it is None."""
        return self.max_span if self.max_span is not None else 2 * config.resolved_segment_size()

    def resolved_span_ramp(self, config: SRformerConfig) -> int:
        """``R``: ``span_ramp``, or ``segment_size`` when it is None."""
        return self.span_ramp if self.span_ramp is not None else config.resolved_segment_size()

    def resolved_span_init(self, config: SRformerConfig) -> float:
        """The initial ``z / S``: ``span_init``, or 0.5 when it is None."""
        return float(self.span_init) if self.span_init is not None else 0.5


def span_offsets(segment_size: int, max_span: int) -> list[int]:
    """The block offsets a query reads, ``-ceil(S/s) .. ceil(S/s)``, the scheduled block (0) first."""
    reach = -(-max_span // segment_size)
    return [0, *[offset for offset in range(-reach, reach + 1) if offset != 0]]


def span_distances(segment_size: int, max_span: int, device: torch.device | None = None) -> torch.Tensor:
    """(n,) long ``x`` of each position of the blocks of :func:`span_offsets`, in their order: block offset ``o``,
    position ``u``: ``max(-(o*s + u), o*s + u - (s - 1), 0)``."""
    s = segment_size
    reach = -(-max_span // s)
    ordered = torch.arange(-reach, reach + 1, device=device)  # built on the device: no host-to-device copy per step
    offsets = torch.cat([ordered[reach : reach + 1], ordered[:reach], ordered[reach + 1 :]])  # span_offsets' order
    relative = (offsets[:, None] * s + torch.arange(s, device=device)[None, :]).reshape(-1)
    return torch.clamp(torch.maximum(-relative, relative - (s - 1)), min=0)


class AdaptiveSpanCrossAttention(SegmentedCrossAttention):
    """The ``adaptive`` variant for one decoder layer; arguments as :class:`SegmentedCrossAttention`, plus

    Args:
        num_heads: the layer's heads, one learned span each (the conversion passes the model's; 1 gives one
            span shared by every head).

    Attributes:
        span_fraction: (num_heads,) learned ``f``, the span ``z = S * clamp(f, 0, 1)``; initialised to
            ``config.resolved_span_init()``.
    """

    #: :func:`srformer.attention.variants.build_cross_attention` passes the layer's ``num_heads``.
    per_head_parameters = True

    def __init__(self, config: SRformerConfig, head_dim: int, scale: float = 1.0, *, num_heads: int = 1) -> None:
        super().__init__(config, head_dim, scale)
        if isinstance(num_heads, bool) or not isinstance(num_heads, int) or num_heads < 1:
            raise ValueError(f"`num_heads` must be a positive integer (one span per head), got {num_heads!r}.")
        self.num_heads = num_heads
        self.span_fraction = nn.Parameter(torch.full((num_heads,), config.resolved_span_init()))

    def initialize_parameters(self, init: InitFunctions) -> None:
        """The span fractions ``f = span_init`` (every head)."""
        init.constant_(self.span_fraction, self.settings.resolved_span_init())

    def spans(self) -> torch.Tensor:
        """(num_heads,) ``z = S * clamp(f, 0, 1)`` in positions: the paper's L1 penalty is ``sum(z)`` times its
        coefficient, to be added to the training loss by the caller."""
        return self.settings.resolved_max_span() * self.span_fraction.clamp(0.0, 1.0)

    def soft_mask(self) -> torch.Tensor:
        """(num_heads, n) ``m_z(x)`` of the positions of :func:`span_offsets`' blocks (0 beyond ``S``), in the
        parameter's dtype."""
        settings = self.settings
        ramp, max_span = settings.resolved_span_ramp(), settings.resolved_max_span()
        distance = span_distances(settings.resolved_segment_size(), max_span, self.span_fraction.device)
        x = distance.to(self.span_fraction.dtype)[None, :]
        mask = ((ramp + self.spans()[:, None] - x) / ramp).clamp(0.0, 1.0)
        return mask * (distance <= max_span)[None, :]

    def block_bias(self, dtype: torch.dtype) -> torch.Tensor | None:
        """(num_heads, n) ``log m_z(x)``, ``-inf`` where ``m = 0`` (``log`` of a clamped mask there, so no
        gradient is infinite); see :meth:`SegmentedCrossAttention.block_bias`."""
        mask = self.soft_mask()
        tiny = torch.finfo(mask.dtype).tiny
        return torch.where(mask > 0, torch.log(mask.clamp(min=tiny)), float("-inf")).to(dtype)

    def context_blocks(
        self, segments: torch.Tensor, index: torch.Tensor, max_segments: int
    ) -> list[tuple[torch.Tensor, torch.Tensor | None, bool]]:
        """The blocks of :func:`span_offsets`, scheduled block first; blocks outside ``0 .. M - 1`` are masked
        out (their index clamped to the example's own blocks). Arguments and result as
        :meth:`SegmentedCrossAttention.context_blocks`."""
        result: list[tuple[torch.Tensor, torch.Tensor | None, bool]] = []
        for offset in span_offsets(self.settings.resolved_segment_size(), self.settings.resolved_max_span()):
            if offset == 0:
                result.append((index, None, False))
                continue
            target = segments + offset
            exists = (target >= 0) & (target < max_segments)
            result.append((index - segments + target.clamp(0, max_segments - 1), exists, False))
        return result
