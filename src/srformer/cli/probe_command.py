"""``srformer probe``: synthetic long-range diagnostics of every cross-attention variant."""

from __future__ import annotations

from pathlib import Path

from srformer.cli.arguments import parse_variant_settings
from srformer.probe.runner import ProbeSettings, run_probe

#: The ``--quick`` grid (CI): every task, both protocols, three variants, tiny budget, in this process (starting
#: worker processes would cost more than the cells).
QUICK: dict = {
    "recall_sizes": (1, 2), "size": 2, "lengths": (32, 48), "segment_sizes": (16,),
    "variants": ("full", "segmented", "srformer"), "steps": 4, "finetune_steps": 2, "batch_size": 4,
    "curriculum_start": 32, "eval_examples": 4, "workers": 1,
}


_TUPLES = ("tasks", "recall_sizes", "lengths", "segment_sizes", "variants", "protocols", "seeds")
_SCALARS = ("size", "steps", "finetune_steps", "batch_size", "eval_examples", "curriculum_start", "learning_rate",
            "finetune_learning_rate", "curriculum_hold", "curriculum_ramp", "diagnostics_every", "workers", "device",
            "min_curriculum_segments")


def settings_from_args(args) -> ProbeSettings:
    """The grid: ``--quick`` or the defaults, with every given option on top, and the ``--setting`` items of every
    variant checked against its configs (before any training).

    Raises:
        ValueError: a bad grid or ``--setting`` (:func:`srformer.cli.arguments.parse_variant_settings`,
            :class:`ProbeSettings`).
    """
    values: dict = dict(QUICK) if args.quick else {}
    for name in _TUPLES:
        if getattr(args, name) is not None:
            values[name] = tuple(getattr(args, name))
    for name in _SCALARS:
        if getattr(args, name) is not None:
            values[name] = getattr(args, name)
    variants = values.get("variants", ProbeSettings.__dataclass_fields__["variants"].default)
    return ProbeSettings(**values, progress=not args.no_progress,
                         variant_settings=parse_variant_settings(args.setting, variants))


def run(args) -> int:
    """Run the probe grid into ``--output`` and print its table; returns 0."""
    payload = run_probe(args.output, settings_from_args(args))
    print((Path(args.output) / "results.md").read_text())
    print(f"{len(payload['records'])} cells; results in {args.output}")
    return 0
