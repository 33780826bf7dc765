"""The registry of cross-attention mechanisms, as the attention layer has always named it: a re-export of
:mod:`srformer.core.registry` (the registry and the names derived from it) and :mod:`srformer.core.schema` (what an
entry says). The entries of the shipped mechanisms are :data:`srformer.core.mechanisms.MECHANISMS`."""

from srformer.core.registry import (
    ABLATIONS,
    LEAN_VARIANTS,
    NAMED_SETTINGS,
    NEURONS,
    REGISTRY,
    SEGMENT_FREE_VARIANTS,
    SEGMENT_SOFTMAX_VARIANTS,
    TABLE1_VARIANTS,
    VARIANTS,
    ablation_owner,
    keeps_own_attention,
    mechanism,
    register,
    registered,
    unregister,
    with_capability,
)
from srformer.core.schema import Capabilities, Mechanism, Reference

__all__ = [
    "ABLATIONS", "LEAN_VARIANTS", "NAMED_SETTINGS", "NEURONS", "REGISTRY", "SEGMENT_FREE_VARIANTS",
    "SEGMENT_SOFTMAX_VARIANTS", "TABLE1_VARIANTS", "VARIANTS", "Capabilities", "Mechanism", "Reference",
    "ablation_owner", "keeps_own_attention", "mechanism", "register", "registered", "unregister", "with_capability",
]
