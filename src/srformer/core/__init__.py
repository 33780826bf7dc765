"""The ground floor of ``srformer``: what a cross-attention variant is, before any of them is computed.

* :mod:`~srformer.core.settings`: :class:`MechanismSettings`, the base of every mechanism's own settings;
* :mod:`~srformer.core.schema`: :class:`Mechanism` and :class:`Capabilities`, what one registry entry says;
* :mod:`~srformer.core.mechanisms`: the entries of the mechanisms the package ships (data);
* :mod:`~srformer.core.registry`: the registry built from them (:data:`REGISTRY`, :func:`register`) and the names
  derived from it;
* :mod:`~srformer.core.config`: :class:`SRformerConfig`, the settings of a converted model (also public as
  :mod:`srformer.config`).

Each module imports only those listed before it, and none imports a mechanism (the entries name modules, states,
settings classes and references by import path; :mod:`srformer.attention` holds them).
"""

from srformer.core.config import (
    AUTO,
    RUNTIME_OPTIONS,
    SEGMENT_FREE,
    SRformerConfig,
    check_variant_settings,
    check_window_settings,
    named_config,
    setting_label,
    setting_types,
    settings_suffix,
)
from srformer.core.mechanisms import MECHANISMS
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
    LiveMapping,
    LiveNames,
    ablation_owner,
    generation,
    keeps_own_attention,
    mechanism,
    register,
    registered,
    unregister,
    with_capability,
)
from srformer.core.schema import (
    ATTENTION_WEIGHTS,
    WEIGHTS_OF_OUTPUT,
    WEIGHTS_OF_SEGMENT,
    WEIGHTS_POOLED,
    Capabilities,
    Mechanism,
    Reference,
    import_path,
)
from srformer.core.settings import MechanismSettings, integer_setting, require_integer, require_setting

__all__ = [
    "ABLATIONS", "ATTENTION_WEIGHTS", "AUTO", "LEAN_VARIANTS", "MECHANISMS", "NAMED_SETTINGS", "NEURONS", "REGISTRY",
    "RUNTIME_OPTIONS", "SEGMENT_FREE", "SEGMENT_FREE_VARIANTS", "SEGMENT_SOFTMAX_VARIANTS", "TABLE1_VARIANTS",
    "VARIANTS", "WEIGHTS_OF_OUTPUT", "WEIGHTS_OF_SEGMENT", "WEIGHTS_POOLED", "Capabilities", "LiveMapping",
    "LiveNames", "Mechanism", "MechanismSettings", "Reference", "SRformerConfig", "ablation_owner",
    "check_variant_settings", "check_window_settings", "generation", "import_path", "integer_setting",
    "keeps_own_attention", "mechanism", "named_config", "register", "registered", "require_integer",
    "require_setting", "setting_label", "setting_types", "settings_suffix", "unregister", "with_capability",
]
