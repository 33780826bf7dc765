"""Attention kernels: the segment schedule, the RAF neuron, and one module per cross-attention mechanism of the
registry (:data:`srformer.core.REGISTRY`, which lists them with their papers and costs), each with its typed
per-sequence state; their float64 references are :mod:`srformer.attention.naive`.

The package exports every class the registry names (each entry's ``module``, ``state`` and ``lean_state``) under
its class name: those imported below, and those of any entry of :data:`srformer.core.mechanisms.MECHANISMS` not
imported here, which the loop at the end adds to the package and to ``__all__`` (so a new mechanism needs no line
here; ``tests/attention/test_registry.py`` checks that ``__all__`` holds every class the registry names).
"""

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
from srformer.attention.srformer import LeanSRformerState, SRformerCrossAttention, SRformerState
from srformer.attention.srformer_gated import GatedCrossAttention, GatedState
from srformer.attention.star import StarCrossAttention, StarState
from srformer.attention.state import CrossAttentionState, SRformerCacheLayer
from srformer.attention.strided import StridedCrossAttention, StridedState
from srformer.attention.summary import SummaryCrossAttention, SummaryState
from srformer.attention.variants import build_cross_attention
from srformer.attention.window import WindowCrossAttention
from srformer.attention.xl import XLCrossAttention
from srformer.core import MechanismSettings
from srformer.core.mechanisms import MECHANISMS as _MECHANISMS
from srformer.core.schema import import_path as _import_path


def _registry_classes() -> dict[str, type]:
    """Every class the shipped mechanisms' entries name, by class name."""
    classes: dict[str, type] = {}
    for entry in _MECHANISMS:
        for path in (entry.module, entry.state, entry.lean_state):
            if path is not None:
                cls = _import_path(path)
                assert classes.setdefault(cls.__name__, cls) is cls, f"two registered classes are named {cls.__name__}"
    return classes


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

# a class an entry names that is not imported above (a mechanism added since): exported all the same
_added = {name: cls for name, cls in _registry_classes().items() if name not in __all__}
globals().update(_added)
__all__ += sorted(_added)
del _added
