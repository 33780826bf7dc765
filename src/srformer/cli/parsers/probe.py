"""``srformer probe``: its options; the command is :mod:`srformer.cli.probe_command`."""

from __future__ import annotations

import argparse

from srformer.cli.arguments import add_variant_settings_argument
from srformer.core import NAMED_SETTINGS
from srformer.probe.grid import DEFAULT_VARIANTS, PROTOCOLS, ProbeSettings
from srformer.probe.tasks import TASKS


def add_parser(subparsers) -> None:
    """Register ``srformer probe`` and its options on ``subparsers``."""
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


def run(args: argparse.Namespace) -> int:
    """Run ``srformer probe`` (:func:`srformer.cli.probe_command.run`)."""
    from srformer.cli import probe_command

    return probe_command.run(args)
