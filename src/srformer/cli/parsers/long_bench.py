"""``srformer long-bench``: its options; the command is :mod:`srformer.cli.long_bench_command`."""

from __future__ import annotations

import argparse

from srformer.benchmarks.long_input_variants import DTYPES, LONG_INPUT_VARIANTS
from srformer.benchmarks.suite_settings import MODEL_SHAPES


def _segment_size(text: str) -> int | str:
    return text if text == "auto" else int(text)


def add_parser(subparsers) -> None:
    """Register ``srformer long-bench`` and its options on ``subparsers``."""
    parser = subparsers.add_parser(
        "long-bench", help="generate from very long inputs (chunked encoding): memory, time per token, state size",
        description=(
            "For each input length, encode one random input with a randomly initialised model (t5-small shape by "
            "default, in encoder windows; --shape led-base or longt5-base: LED's or LongT5's own encoder reads it "
            "whole) and generate from it with each cross attention, in a fresh process per length: encoding time "
            "and peak memory; decode-time peak memory, time to the first token, time per token and the cache's "
            "size. A variant whose estimated memory exceeds the budget is refused, not run. Writes "
            "OUTPUT/long_input.json (resumable), long_input.md and long_input.png. Synthetic: costs only."
        ),
    )
    parser.add_argument("--output", required=True, help="output folder (a finished measurement there is kept)")
    parser.add_argument("--quick", action="store_true",
                        help="seconds: t5-tiny shape (unless --shape), 1k and 4k tokens, 4 new tokens")
    parser.add_argument("--shape", choices=tuple(MODEL_SHAPES), default=None,
                        help="model shape: its family (T5, LED, LongT5) and sizes (default t5-small; led-base: "
                             "allenai/led-base-16384's, longt5-base: google/long-t5-tglobal-base's)")
    parser.add_argument("--lengths", type=int, nargs="+", default=None,
                        help="input lengths in tokens (default 4096 16384 65536 262144)")
    parser.add_argument("--variants", nargs="+", choices=tuple(LONG_INPUT_VARIANTS), default=None,
                        help="default: all (-lean: lean_cache=True)")
    parser.add_argument("--end-to-end", nargs="*", choices=tuple(LONG_INPUT_VARIANTS), default=None,
                        help="variants also run as generate(input_ids=...) (default: srformer-lean)")
    parser.add_argument("--new-tokens", type=int, default=None, help="tokens generated per input (default 64)")
    parser.add_argument("--segment-size", type=_segment_size, default=None, help="s in tokens, or auto (default 64)")
    parser.add_argument("--target-length", type=int, default=None, help="T of the schedule (default 128)")
    parser.add_argument("--encoder-window", type=int, default=None,
                        help="tokens per encoder window (default: 512 for a T5 shape; none for LED and LongT5 shapes, "
                             "whose own encoder reads the input whole: LED up to its positions, 16,384 for "
                             "led-base, a longer length is refused without a window)")
    parser.add_argument("--window-overlap", type=float, default=None, help="in [0, 1) (default 0.5)")
    parser.add_argument("--window-batch-size", type=int, default=None, help="windows per encoder call (default 8)")
    parser.add_argument("--memory-budget", type=int, default=None,
                        help="bytes a variant may need (default: the memory available at the start)")
    parser.add_argument("--device", default=None,
                        help="cpu (default), cuda, cuda:N or auto; on CUDA peak memory is the allocator's")
    parser.add_argument("--dtype", choices=DTYPES, default=None,
                        help="model and encoder output dtype (default float32)")
    parser.add_argument("--batch-size", type=int, default=None,
                        help="inputs decoded together: copies of one encoded input (default 1)")
    parser.add_argument("--compiled", action="store_true",
                        help="decode with a static cache and transformers' compiled step (torch.compile, fullgraph; "
                             "CUDA graphs on a GPU); an untimed call compiles first")
    parser.add_argument("--max-batch", action="store_true",
                        help="also find each variant's largest batch that fits (tried on CUDA, estimated on the CPU)")
    parser.add_argument("--operators", action="store_true",
                        help="also count each variant's aten operator calls, first step and per generated token")
    parser.set_defaults(run=run)


def run(args: argparse.Namespace) -> int:
    """Run ``srformer long-bench`` (:func:`srformer.cli.long_bench_command.run`)."""
    from srformer.cli import long_bench_command

    return long_bench_command.run(args)
