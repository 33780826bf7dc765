"""Attention kernels: segment schedule, RAF neuron, segmented recurrent attention, the baselines
(Transformer-XL memory, LongT5 global tokens, linear attention) and the per-sequence state."""

from srformer.attention.linear import LinearCrossAttention
from srformer.attention.raf import RecurrentAccumulateAndFire
from srformer.attention.schedule import compaction_order, num_segments, segment_index
from srformer.attention.segmented_recurrent import SegmentedRecurrentAttention
from srformer.attention.state import CrossAttentionState, SRformerCacheLayer
from srformer.attention.variants import build_cross_attention

__all__ = [
    "CrossAttentionState",
    "LinearCrossAttention",
    "RecurrentAccumulateAndFire",
    "SRformerCacheLayer",
    "SegmentedRecurrentAttention",
    "build_cross_attention",
    "compaction_order",
    "num_segments",
    "segment_index",
]
