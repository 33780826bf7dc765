"""``srformer probe``: synthetic long-range diagnostics of every cross-attention variant."""

from __future__ import annotations

from pathlib import Path

from srformer.cli.arguments import add_variant_settings_argument, parse_variant_settings
from srformer.config import NAMED_SETTINGS
from srformer.probe.runner import DEFAULT_VARIANTS, PROTOCOLS, ProbeSettings, run_probe
from srformer.probe.tasks import TASKS

#: The ``--quick`` grid (CI): every task, both protocols, three variants, tiny budget, in this process (starting
#: worker processes would cost more than the cells).
QUICK: dict = {
    "recall_sizes": (1, 2), "size": 2, "lengths": (32, 48), "segment_sizes": (16,),
    "variants": ("full", "segmented", "srformer"), "steps": 4, "finetune_steps": 2, "batch_size": 4,
    "curriculum_start": 32, "eval_examples": 4, "workers": 1,
}


def add_parser(subparsers) -> None:
    defaults = ProbeSettings()
    parser = subparsers.add_parser(
        "probe",
        help="train every variant on seeded synthetic long-range tasks (copy, reverse, recall, aggregate)",
        description=(
            "Train small T5 models with each cross-attention variant on synthetic tasks whose targets need known "
            "encoder positions, and score token accuracy / exact match on target positions whose needed tokens lie "
            "on or off the segment that segmented attention reads. Writes results.json, results.md, "
            "recall_vs_n.png, recall_vs_length.png and, for cells with an srformer layer, recurrent-term diagnostics "
            "(recurrent_term.png); finished cells are skipped on a re-run."
        ),
    )
    parser.add_argument("--output", required=True, help="results directory (resumable)")
    parser.add_argument("--quick", action="store_true", help="a tiny grid for CI (seconds, not meaningful accuracy)")
    parser.add_argument("--tasks", nargs="+", choices=list(TASKS), default=None)
    parser.add_argument("--recall-sizes", nargs="+", type=int, default=None,
                        help="queried facts n of recall (default 4 16)")
    parser.add_argument("--size", type=int, default=None, help="n of copy, reverse and aggregate")
    parser.add_argument("--lengths", nargs="+", type=int, default=None,
                        help="document lengths k in tokens (default 128)")
    parser.add_argument("--segment-sizes", nargs="+", type=int, default=None,
                        help="segment sizes s in tokens (default 8)")
    parser.add_argument("--variants", nargs="+", choices=list(NAMED_SETTINGS), default=None,
                        help=f"named settings (default: {' '.join(DEFAULT_VARIANTS)}; "
                             f"any of {', '.join(NAMED_SETTINGS)})")
    parser.add_argument("--protocols", nargs="+", choices=list(PROTOCOLS), default=None)
    parser.add_argument("--seeds", nargs="+", type=int, default=None)
    for name in ("steps", "finetune_steps", "batch_size", "eval_examples", "curriculum_start", "diagnostics_every"):
        parser.add_argument(f"--{name.replace('_', '-')}", type=int, default=None,
                            help=f"default {getattr(defaults, name)}")
    parser.add_argument("--min-curriculum-segments", type=int, default=None,
                        help=f"scratch training documents hold at least this many segments (default "
                             f"{defaults.min_curriculum_segments}; 1 = no floor, the behaviour of records made "
                             "before this option)")
    for name in ("learning_rate", "finetune_learning_rate", "curriculum_hold", "curriculum_ramp"):
        parser.add_argument(f"--{name.replace('_', '-')}", type=float, default=None,
                            help=f"default {getattr(defaults, name)}")
    parser.add_argument("--workers", type=int, default=None,
                        help="cells trained at once, each in its own process (default 0: one per CPU core; 1 on CUDA)")
    parser.add_argument("--device", default=None, help="auto (default: CUDA when available), cpu, cuda or cuda:N")
    add_variant_settings_argument(parser)
    parser.add_argument("--no-progress", action="store_true")
    parser.set_defaults(run=run)


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
    payload = run_probe(args.output, settings_from_args(args))
    print((Path(args.output) / "results.md").read_text())
    print(f"{len(payload['records'])} cells; results in {args.output}")
    return 0
