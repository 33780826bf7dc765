"""``srformer aclsum``: the main job (full vs segmented vs SRformer on ACLSum)."""

from __future__ import annotations

from dataclasses import fields

from srformer.cli.parsers.settings_fields import ACLSUM_OWN_OPTIONS
from srformer.experiments.aclsum import ComparisonSettings, run_aclsum_comparison


def run(args) -> int:
    """Run the ACLSum comparison with the parsed options into ``--output``; returns 0."""
    values = {
        f.name: getattr(args, f.name) for f in fields(ComparisonSettings) if f.name not in ACLSUM_OWN_OPTIONS
    }
    settings = ComparisonSettings(**values, variants=tuple(args.variants), progress=not args.no_progress)
    run_aclsum_comparison(args.output, settings)
    return 0
