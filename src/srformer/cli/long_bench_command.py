"""``srformer long-bench``: memory and time of generating from inputs of 4k to 256k tokens, per cross attention."""

from __future__ import annotations

import sys

from srformer.benchmarks.long_input import LongInputSettings, run_long_input, write_long_input


def run(args) -> int:
    """Run the benchmark and write its outputs; returns 0.

    Raises:
        ValueError: for bad settings (e.g. an LED shape's length beyond its positions without ``--encoder-window``).
        RuntimeError: if a length's child process fails.
    """
    overrides = dict(
        shape=getattr(args, "shape", None), lengths=tuple(args.lengths) if args.lengths else None,
        variants=tuple(args.variants) if args.variants else None,
        end_to_end=tuple(args.end_to_end) if args.end_to_end is not None else None,
        new_tokens=args.new_tokens, segment_size=args.segment_size, target_length=args.target_length,
        encoder_window=args.encoder_window, window_overlap=args.window_overlap,
        window_batch_size=args.window_batch_size, memory_budget=args.memory_budget, device=args.device,
        dtype=args.dtype, batch_size=args.batch_size, compiled=args.compiled or None, max_batch=args.max_batch or None,
        operators=getattr(args, "operators", False) or None,
    )
    given = {name: value for name, value in overrides.items() if value is not None}
    # one construction with every setting given: a shape's checks (LED's positions) see the lengths asked for
    settings = LongInputSettings.quick(**given) if args.quick else LongInputSettings(**given)
    run_long_input(settings, args.output, log=lambda line: print(line, file=sys.stderr, flush=True))
    written = write_long_input(args.output)
    print("wrote " + ", ".join(str(p) for p in written.values()))
    return 0
