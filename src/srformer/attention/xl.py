"""Transformer-XL-style memory (Dai et al. 2019), the ``xl`` baseline of the paper (Sec. 4.2, Figure 4).

Decoder position ``t`` attends with one softmax to the keys of segment ``i(t)`` and of segment ``i(t) - 1``,
whose keys/values are a stop-gradient memory in training (2s keys; at ``i(t) = 0`` only the current segment).
The schedule, the state (:class:`~srformer.attention.segmented.SegmentState`) and both paths are those of
:class:`~srformer.attention.segmented.SegmentedCrossAttention`; this module adds the memory block
(``docs/design.md``, "Baselines and ablations"). There is no lean layout: a step reads two segments' keys.
"""

from __future__ import annotations

import torch

from srformer.attention.segmented import SegmentedCrossAttention


class XLCrossAttention(SegmentedCrossAttention):
    """The ``xl`` variant for one decoder layer; arguments as :class:`SegmentedCrossAttention`."""

    def context_blocks(
        self, segments: torch.Tensor, index: torch.Tensor, max_segments: int
    ) -> list[tuple[torch.Tensor, torch.Tensor | None, bool]]:
        """Segment ``i(t)``, then segment ``i(t) - 1`` as a stop-gradient memory, masked out at ``i(t) = 0``
        (where its index is the current block's, which the mask then hides); arguments and result as
        :meth:`SegmentedCrossAttention.context_blocks`."""
        has_previous = segments > 0
        return [(index, None, False), (index - has_previous.to(index.dtype), has_previous, True)]
