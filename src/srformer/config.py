"""SRformer settings, the public face of :mod:`srformer.core.config` (``from srformer.core import
SRformerConfig``): which cross-attention variant to use and its hyper-parameters, and the variant names derived
from the registry (:mod:`srformer.core.registry`).

This module only re-exports :mod:`srformer.core`; it sits on the ground floor with it.
"""

from srformer.core import (
    ABLATIONS,
    AUTO,
    LEAN_VARIANTS,
    NAMED_SETTINGS,
    NEURONS,
    RUNTIME_OPTIONS,
    SEGMENT_FREE,
    SEGMENT_FREE_VARIANTS,
    VARIANTS,
    SRformerConfig,
    check_variant_settings,
    check_window_settings,
    named_config,
    setting_label,
    setting_types,
    settings_suffix,
)

__all__ = [
    "ABLATIONS", "AUTO", "LEAN_VARIANTS", "NAMED_SETTINGS", "NEURONS", "RUNTIME_OPTIONS", "SEGMENT_FREE",
    "SEGMENT_FREE_VARIANTS", "VARIANTS", "SRformerConfig", "check_variant_settings", "check_window_settings",
    "named_config", "setting_label", "setting_types", "settings_suffix",
]
