"""Longformer/LED-style sliding window (Beltagy et al. 2020, Longformer: The Long-Document Transformer,
Sec. 3.1 "Sliding Window"), as decoder cross attention centred on the scheduled segment: the ``window``
variant.

A decoder query has no position in the encoder sequence, so the window is centred by the segment
schedule: decoder position ``t`` attends with one softmax to the ``w`` encoder positions (``w`` =
``SRformerConfig.window_size``, by default ``3 * s``) around the centre of its scheduled segment
``i(t)`` (:mod:`srformer.attention.schedule`)::

    start(t) = i(t) * s + floor(s / 2) - floor(w / 2)
    window(t) = {p : start(t) <= p < start(t) + w, 0 <= p < n}

over the example's ``n`` real (compacted) positions. With ``w >= s`` (checked by the config) the
window holds the whole scheduled segment, ``floor(w / 2) - floor(s / 2)`` positions before it and the
other ``w - s - (floor(w / 2) - floor(s / 2))`` after it; at ``w = s`` it is ``segmented``. At the ends
of the input the window is cut, not shifted (as Longformer's window at the first and last tokens).

The schedule, the state (:class:`~srformer.attention.segmented.SegmentState`) and both paths are those
of :class:`~srformer.attention.segmented.SegmentedCrossAttention`: since ``start(t) - i(t) * s`` does not
depend on ``t``, the window always covers the same segment offsets ``lo .. hi`` around ``i(t)``, each
with the same per-position mask, and :meth:`WindowCrossAttention.context_blocks` returns those blocks.
There is no lean layout (a step reads ``hi - lo + 1`` segments' keys). Cost of one step per head:
``O((w + 2s) * d)`` (whole blocks are read, the masks keep ``w``).
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import TYPE_CHECKING

import torch

from srformer.attention.segmented import SegmentedCrossAttention
from srformer.core import MechanismSettings

if TYPE_CHECKING:
    from srformer.core import SRformerConfig


@dataclass(frozen=True)
class WindowSettings(MechanismSettings):
    """The settings of the ``window`` variant (``SRformerConfig(variant='window', ...)``;
    None: the default named below).

    Attributes:
        window_size: ``w``, the number of encoder positions of the ``window`` variant's sliding window (Beltagy et al.
            2020), centred on the centre of the scheduled segment: decoder position ``t`` attends the real positions
            ``i(t)*s + floor(s/2) - floor(w/2) .. + w - 1`` (``docs/design.md``, "Sliding window"). At least
            ``segment_size`` (the window then holds the whole scheduled segment). None (default): ``3 * segment_size``
            (the scheduled segment and one neighbour on each side).
    """

    window_size: int | None = None

    def validate(self, config: SRformerConfig) -> None:
        """``window_size``: None or an integer ``>= segment_size`` (the window holds the scheduled segment)."""
        size, segment_size = self.window_size, config.resolved_segment_size()
        if size is not None and (isinstance(size, bool) or not isinstance(size, int) or size < segment_size):
            raise ValueError(
                f"`window_size` must be an integer number of encoder tokens >= segment_size "
                f"({config.resolved_segment_size()}) so that the window holds the scheduled segment, got {size!r}."
            )

    def resolved_window_size(self, config: SRformerConfig) -> int:
        """``w``: ``window_size``, or ``3 * segment_size`` when it is None."""
        return self.window_size if self.window_size is not None else 3 * config.resolved_segment_size()


def window_blocks(segment_size: int, window_size: int) -> list[tuple[int, list[bool]]]:
    """The segment offsets a window covers and, for each, which of its ``s`` positions are inside.

    Args:
        segment_size: ``s``.
        window_size: ``w`` (>= 1).

    Returns:
        ``[(offset, inside), ...]`` in increasing offset: block ``i(t) + offset`` holds positions
        ``(i(t) + offset) * s + u`` for ``u < s``, inside the window iff ``inside[u]``.
    """
    first = segment_size // 2 - window_size // 2  # start(t) - i(t) * s
    low, high = first // segment_size, (first + window_size - 1) // segment_size
    return [
        (offset, [0 <= offset * segment_size + u - first < window_size for u in range(segment_size)])
        for offset in range(low, high + 1)
    ]


class WindowCrossAttention(SegmentedCrossAttention):
    """The ``window`` variant for one decoder layer; arguments as :class:`SegmentedCrossAttention`
    (``config.resolved_window_size()`` is ``w``)."""

    def context_blocks(
        self, segments: torch.Tensor, index: torch.Tensor, max_segments: int
    ) -> list[tuple[torch.Tensor, torch.Tensor | None, bool]]:
        """The blocks ``i(t) + lo .. i(t) + hi`` of :func:`window_blocks`, scheduled block first, each with its
        (N, s) mask of the positions inside the window; blocks outside ``0 .. M - 1`` are masked out (their
        index is clamped to the example's own blocks). Arguments and result as
        :meth:`SegmentedCrossAttention.context_blocks`."""
        s, w = self.settings.resolved_segment_size(), self.settings.resolved_window_size()
        blocks = sorted(window_blocks(s, w), key=lambda block: block[0] != 0)
        first = s // 2 - w // 2  # start(t) - i(t) * s
        result: list[tuple[torch.Tensor, torch.Tensor | None, bool]] = []
        for offset, inside in blocks:
            target = segments + offset
            exists = (target >= 0) & (target < max_segments)
            flat = index - segments + target.clamp(0, max_segments - 1)
            if offset == 0 and all(inside):
                result.append((flat, None, False))
                continue
            # inside[u] on the device (no host-to-device copy per step): 0 <= offset*s + u - first < w
            relative = torch.arange(s, device=segments.device) + (offset * s - first)
            positions = (relative >= 0) & (relative < w)
            result.append((flat, exists[:, None] & positions[None, :], False))
        return result
