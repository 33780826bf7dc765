"""Which fields of a settings dataclass get options of their own, shared by the parsers that build one option per
field (``aclsum``, ``compare``) and the commands that read the options back into settings."""

from __future__ import annotations

#: ComparisonSettings fields (``srformer aclsum``) with options of their own (``--variants``, ``--no-progress``),
#: not the one-option-per-field loop.
ACLSUM_OWN_OPTIONS = ("variants", "progress")

#: CompareSettings fields (``srformer compare``) given as lists on the command line, with the type of one item.
COMPARE_TUPLES = {"variants": str, "segment_sizes": int, "ablations": str, "seeds": int}

#: CompareSettings fields without an option of their own (set from other options, or not from the command line).
COMPARE_SKIPPED = {"progress", "data", "ablation_segment_size", "variant_settings"}
