"""``srformer`` command line: train, evaluate, summarize, the ACLSum main job, compare, fidelity, bench, probe,
long-bench, long-probe, pick, split, pretrain, oracle-targets, copy-reach and led-from-bart.

The parsers come from :mod:`srformer.cli.parsers`, which import no torch or transformers, so ``srformer --help`` and
``srformer COMMAND --help`` answer at once; a sub-command imports its implementation when it runs."""

from __future__ import annotations

import argparse
import sys

from srformer.cli.parsers import (
    aclsum,
    bench,
    compare,
    copy_reach,
    evaluate,
    fidelity,
    led_from_bart,
    long_bench,
    long_probe,
    oracle_targets,
    pick,
    pretrain,
    probe,
    split,
    summarize,
    train,
)

COMMANDS = (train, evaluate, summarize, aclsum, compare, fidelity, bench, probe, long_bench, long_probe, pick, split,
            pretrain, oracle_targets, copy_reach, led_from_bart)


def build_parser() -> argparse.ArgumentParser:
    """The argument parser with one sub-command per module in :data:`COMMANDS`."""
    parser = argparse.ArgumentParser(
        prog="srformer", description="Segmented Recurrent Transformer cross attention for seq2seq summarizers."
    )
    subparsers = parser.add_subparsers(dest="command", required=True)
    for command in COMMANDS:
        command.add_parser(subparsers)
    return parser


def close_process_group() -> None:
    """Destroy torch.distributed's process group when a launched command set one up (``torchrun``, ``accelerate
    launch``): a gloo group left to the interpreter's exit can abort the process (``terminate called without an
    active exception``) after its work is done, turning a finished run into a failed launch. Nothing happens in a
    single process, and torch is not imported by this check."""
    distributed = sys.modules.get("torch.distributed")
    if distributed is not None and distributed.is_available() and distributed.is_initialized():
        distributed.destroy_process_group()


def main(argv: list[str] | None = None) -> int:
    """Entry point. Returns the exit status: 0 on success, 2 on bad input (the message says why).

    After a command that finished (either status), a process group it joined is destroyed
    (:func:`close_process_group`); after an unexpected exception it is left alone, since destroying it while other
    processes wait in a collective call could hang them."""
    args = build_parser().parse_args(argv)
    try:
        status = args.run(args) or 0
    except (ValueError, FileNotFoundError) as error:
        print(f"srformer {args.command}: error: {error}", file=sys.stderr)
        status = 2
    close_process_group()
    return status


if __name__ == "__main__":
    sys.exit(main())
