"""``srformer aclsum``: the main job (full vs segmented vs SRformer on ACLSum)."""

from __future__ import annotations

from dataclasses import fields

from srformer.attention.registry import TABLE1_VARIANTS
from srformer.experiments.aclsum import ComparisonSettings, run_aclsum_comparison


def add_parser(subparsers) -> None:
    defaults = ComparisonSettings()
    parser = subparsers.add_parser(
        "aclsum", help="train full/segmented/SRformer models on ACLSum and compare ROUGE and decode time"
    )
    parser.add_argument("--output", default="runs/aclsum", help="results directory (resumable)")
    for field in fields(ComparisonSettings):
        if field.name in ("variants", "progress"):
            continue
        value = getattr(defaults, field.name)
        kind = type(value) if value is not None else int
        parser.add_argument(f"--{field.name.replace('_', '-')}", type=kind, default=value)
    parser.add_argument(
        "--variants", nargs="+", default=list(defaults.variants), choices=list(TABLE1_VARIANTS)
    )
    parser.add_argument("--no-progress", action="store_true")
    parser.set_defaults(run=run)


def run(args) -> int:
    values = {
        f.name: getattr(args, f.name) for f in fields(ComparisonSettings) if f.name not in ("variants", "progress")
    }
    settings = ComparisonSettings(**values, variants=tuple(args.variants), progress=not args.no_progress)
    run_aclsum_comparison(args.output, settings)
    return 0
