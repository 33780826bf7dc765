"""``srformer bench``: time, memory and FLOPs of full, segmented and SRformer cross attention, side by side."""

from __future__ import annotations

import sys
import time

from srformer.benchmarks.outputs import write_outputs
from srformer.benchmarks.suite import SuiteSettings, environment_summary, run_suite, with_overrides
from srformer.benchmarks.timing import resolve_device
from srformer.cli.arguments import parse_settings


def parse_bench_settings(values: list[str]) -> dict[str, dict]:
    """``--setting VARIANT:NAME=VALUE`` strings as ``{variant: {name: value}}`` (values typed by
    :func:`~srformer.cli.arguments.parse_settings`).

    Raises:
        ValueError: an item without a ``VARIANT:`` prefix (bench compares the unmodified model too, which has no
            settings), and everything :func:`~srformer.cli.arguments.parse_settings` raises.
    """
    by_variant: dict[str, list[str]] = {}
    for item in values:
        prefix, colon, rest = item.partition(":")
        if not colon or "=" in prefix:
            raise ValueError(f"--setting {item!r}: write VARIANT:NAME=VALUE, naming one converted variant of "
                             "--variants (e.g. knn-loki:index_rank=11).")
        by_variant.setdefault(prefix.strip(), []).append(rest)
    return {variant: parse_settings(items) for variant, items in by_variant.items()}


def run(args) -> int:
    """Run the suite with the parsed options, write the outputs into ``--output``; returns 0.

    Raises:
        ValueError: for an unavailable device or invalid settings (the CLI prints it and exits 2).
    """
    base = SuiteSettings.quick() if args.quick else SuiteSettings()
    for name in ("encoder_lengths", "segment_sizes", "batch_sizes", "variants", "sections"):
        parts = getattr(args, name)
        if parts is not None:  # nargs="+" of comma lists: flatten
            setattr(args, name, tuple(value for part in parts for value in part))
    variant_settings = parse_bench_settings(args.setting)
    settings = with_overrides(
        base,
        device=args.device,
        encoder_lengths=args.encoder_lengths,
        segment_sizes=args.segment_sizes,
        batch_sizes=args.batch_sizes,
        repeats=args.repeats,
        variants=args.variants,
        sections=args.sections,
        target_length=args.target_length,
        new_tokens=args.new_tokens,
        step_positions=args.step_positions,
        training_batch_size=args.training_batch_size,
        memory_one_process=args.memory_one_process,
        compiled=args.compiled,
        variant_settings=variant_settings or None,
    )
    device = resolve_device(settings.device)
    environment = environment_summary(device)
    print("srformer bench: " + ", ".join(f"{k} {v}" for k, v in environment.items()), file=sys.stderr)
    notes: list[str] = []

    def log(line: str) -> None:
        notes.append(line)
        print(line, file=sys.stderr, flush=True)

    started = time.perf_counter()
    details: dict[str, list[dict]] = {}
    records = run_suite(settings, progress=not args.no_progress, log=log, details=details)
    seconds = time.perf_counter() - started
    written = write_outputs(records, args.output, figure5_qs=settings.figure5_qs, environment=environment,
                            settings=settings.summary(), notes=notes, seconds=seconds, details=details)
    print(f"{len(records)} records in {seconds:.0f} s; wrote " + ", ".join(str(p) for p in written.values()))
    return 0
