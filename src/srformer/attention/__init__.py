"""Attention kernels: the segment schedule, the RAF neuron, one module per cross-attention mechanism
(``segmented``, ``srformer``, the baselines ``xl``, ``longt5`` and ``linear``, and ``window``, ``strided``,
``star``, ``fastformer``, ``reformer``, ``routing``, ``bigbird``, ``compressive``, ``adaptive``, ``bp``,
``linformer``, ``performer``, ``compressed`` and ``inducing`` from the efficient-transformer literature, and
``block-topk``, ``knn``, ``quest`` and ``srformer-gated``), each with its typed per-sequence state, the registry
that maps variant names to them, and their float64 references."""

from srformer.attention.adaptive import AdaptiveSpanCrossAttention
from srformer.attention.base import CrossAttentionMechanism
from srformer.attention.bigbird import BigBirdCrossAttention, BigBirdState
from srformer.attention.block_topk import BlockTopkCrossAttention, BlockTopkState
from srformer.attention.bp import BPCrossAttention, BPState
from srformer.attention.compressed import CompressedCrossAttention, CompressedState
from srformer.attention.compressive import CompressiveCrossAttention, CompressiveState
from srformer.attention.content import ContentSparseCrossAttention, ContentState
from srformer.attention.fastformer import FastformerCrossAttention, FastformerState
from srformer.attention.inducing import InducingCrossAttention
from srformer.attention.knn import IndexedKNNState, KNNCrossAttention
from srformer.attention.linear import LinearCrossAttention, LinearState
from srformer.attention.linformer import LinformerCrossAttention
from srformer.attention.longt5 import LongT5CrossAttention, LongT5State
from srformer.attention.performer import PerformerCrossAttention, PerformerState
from srformer.attention.quest import QuestCrossAttention, QuestRowsState, QuestState
from srformer.attention.raf import RecurrentAccumulateAndFire
from srformer.attention.reformer import LSHState, ReformerCrossAttention
from srformer.attention.routing import RoutingCrossAttention, RoutingState
from srformer.attention.schedule import compaction_order, num_segments, segment_index
from srformer.attention.segmented import LeanSegmentState, SegmentedCrossAttention, SegmentState
from srformer.attention.settings import MechanismSettings
from srformer.attention.srformer import LeanSRformerState, SRformerCrossAttention, SRformerState
from srformer.attention.srformer_gated import GatedCrossAttention, GatedState
from srformer.attention.star import StarCrossAttention, StarState
from srformer.attention.state import CrossAttentionState, SRformerCacheLayer
from srformer.attention.strided import StridedCrossAttention, StridedState
from srformer.attention.summary import SummaryCrossAttention, SummaryState
from srformer.attention.variants import build_cross_attention
from srformer.attention.window import WindowCrossAttention
from srformer.attention.xl import XLCrossAttention

__all__ = [
    "AdaptiveSpanCrossAttention",
    "BPCrossAttention",
    "BPState",
    "BigBirdCrossAttention",
    "BigBirdState",
    "BlockTopkCrossAttention",
    "BlockTopkState",
    "CompressedCrossAttention",
    "CompressedState",
    "CompressiveCrossAttention",
    "CompressiveState",
    "ContentSparseCrossAttention",
    "ContentState",
    "CrossAttentionMechanism",
    "CrossAttentionState",
    "FastformerCrossAttention",
    "FastformerState",
    "GatedCrossAttention",
    "GatedState",
    "IndexedKNNState",
    "InducingCrossAttention",
    "KNNCrossAttention",
    "LSHState",
    "LeanSRformerState",
    "LeanSegmentState",
    "LinearCrossAttention",
    "LinearState",
    "LinformerCrossAttention",
    "LongT5CrossAttention",
    "LongT5State",
    "MechanismSettings",
    "PerformerCrossAttention",
    "PerformerState",
    "QuestCrossAttention",
    "QuestRowsState",
    "QuestState",
    "RecurrentAccumulateAndFire",
    "ReformerCrossAttention",
    "RoutingCrossAttention",
    "RoutingState",
    "SRformerCacheLayer",
    "SRformerCrossAttention",
    "SRformerState",
    "SegmentState",
    "SegmentedCrossAttention",
    "StarCrossAttention",
    "StarState",
    "StridedCrossAttention",
    "StridedState",
    "SummaryCrossAttention",
    "SummaryState",
    "WindowCrossAttention",
    "XLCrossAttention",
    "build_cross_attention",
    "compaction_order",
    "num_segments",
    "segment_index",
]
