"""``srformer long-probe``: recall at inputs far longer than training, from a finished ``srformer probe`` run."""

from __future__ import annotations

import sys

from srformer.probe.long_input import LongProbeSettings, run_long_probe, write_long_probe


def run(args) -> int:
    """Score, write the outputs; returns 0."""
    options = {name: getattr(args, name)
               for name in ("encoder_window", "examples", "batch_size", "knn_index", "index_probes", "index_rank",
                            "index_candidates", "index_page", "index_pages", "index_key_rank", "top_keys")
               if getattr(args, name) is not None}
    for name in ("lengths", "seeds"):
        if getattr(args, name):
            options[name] = tuple(getattr(args, name))
    settings = LongProbeSettings(runs=tuple(args.runs), variants=tuple(args.variants), **options)
    run_long_probe(settings, args.output, log=lambda line: print(line, file=sys.stderr, flush=True))
    written = write_long_probe(args.output)
    print("wrote " + ", ".join(str(p) for p in written.values()))
    return 0
