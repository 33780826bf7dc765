"""Attention kernels: segment schedule, RAF neuron, segmented recurrent attention and its state."""

from srformer.attention.raf import RecurrentAccumulateAndFire
from srformer.attention.schedule import compaction_order, num_segments, segment_index
from srformer.attention.segmented_recurrent import SegmentedRecurrentAttention
from srformer.attention.state import CrossAttentionState, SRformerCacheLayer

__all__ = [
    "CrossAttentionState",
    "RecurrentAccumulateAndFire",
    "SRformerCacheLayer",
    "SegmentedRecurrentAttention",
    "compaction_order",
    "num_segments",
    "segment_index",
]
