"""``srformer pretrain``: its options; the command is :mod:`srformer.cli.pretrain_command`."""

from __future__ import annotations

import argparse

from srformer.models.named_configs import NAMED_CONFIGS
from srformer.training.curriculum import CURRICULUM_GROWTHS
from srformer.training.pretrain_data import PretrainRecipe


def add_parser(subparsers) -> None:
    """Register ``srformer pretrain`` and its options on ``subparsers``."""
    defaults = PretrainRecipe()
    parser = subparsers.add_parser(
        "pretrain", help="pretrain a small T5/BART from documents (span corruption, copy, cued copy, gap "
                         "sentences, reordering, marked copy; length curriculum)",
        description=(
            "Train a Unigram tokenizer and a randomly initialised named config on the documents of --data with T5 "
            "span corruption, copying (of the window, or of a passage at a random offset) and the sentence objectives "
            "(cued copy, PEGASUS gap sentences, sentence reordering, marked copy), the source growing from "
            "--curriculum-start tokens to "
            "--max-source-length. The --output folder is a checkpoint that `srformer train --model`, "
            "`srformer compare --model` and AutoModelForSeq2SeqLM.from_pretrained load."
        ),
    )
    parser.add_argument("--data", required=True, help="JSONL/JSON/CSV file of documents (no summaries needed)")
    parser.add_argument("--document-field", default="document")
    parser.add_argument("--split-by-id", default=None, metavar="SPEC",
                        help="split --data by a stable hash of each id as `srformer split` does, e.g. "
                             "'train=0.8,validation=0.1,test=0.1', and pretrain on the part --split only")
    parser.add_argument("--split", default="train", help="the part of --split-by-id to pretrain on (default: train)")
    parser.add_argument("--model", default=defaults.model, choices=list(NAMED_CONFIGS),
                        help="named config to build (default: %(default)s)")
    parser.add_argument("--output", required=True, help="run directory (model, tokenizer, checkpoint, log)")
    parser.add_argument("--max-source-length", type=int, default=defaults.max_source_length,
                        help="input length in tokens, reached by the curriculum (default: %(default)s)")
    parser.add_argument("--max-target-length", type=int, default=None,
                        help="longest copy target in tokens (default: --max-source-length)")
    parser.add_argument("--vocab-size", type=int, default=defaults.vocab_size,
                        help="tokenizer pieces, before the sentinel tokens (default: %(default)s)")
    parser.add_argument("--objective-mix", default="span=0.5,copy=0.5",
                        help="relative weights of span (T5 span corruption), copy, passage (copy a 16-48-token "
                             "passage at a random offset: needs content, not position), cued (cued copy), gap (PEGASUS "
                             "gap sentences), reorder (sentence reordering) and marked (marked copy) "
                             "(default: %(default)s)")
    parser.add_argument("--noise-density", type=float, default=defaults.noise_density,
                        help="span corruption: fraction of tokens dropped (default: %(default)s)")
    parser.add_argument("--mean-span-length", type=float, default=defaults.mean_span_length,
                        help="span corruption: mean dropped span in tokens (default: %(default)s)")
    parser.add_argument("--curriculum-start", type=int, default=defaults.curriculum_start,
                        help="source tokens of the first steps (default: %(default)s)")
    parser.add_argument("--curriculum-hold", type=float, default=defaults.curriculum_hold,
                        help="fraction of the steps at --curriculum-start (default: %(default)s)")
    parser.add_argument("--curriculum-end", type=float, default=defaults.curriculum_end,
                        help="fraction of the steps by which --max-source-length is reached (default: %(default)s)")
    parser.add_argument("--curriculum-growth", choices=CURRICULUM_GROWTHS, default=defaults.curriculum_growth)
    parser.add_argument("--eval-documents", type=int, default=defaults.eval_documents,
                        help="training documents held out to log copy accuracy (0: none; default: %(default)s)")
    parser.add_argument("--eval-every", type=int, default=defaults.eval_every,
                        help="steps between copy-accuracy measurements (default: %(default)s)")
    parser.add_argument("--init-from", default=None, metavar="DIR",
                        help="continue the base in DIR (an earlier --output: its tokenizer and weights) with this "
                             "run's objectives and curriculum, a second stage; --model and --vocab-size are then "
                             "unused")
    parser.add_argument("--max-steps", type=int, default=3000, help="optimizer steps")
    parser.add_argument("--time-budget", type=float, default=None, help="stop cleanly after this many seconds")
    parser.add_argument("--learning-rate", type=float, default=1e-3)
    parser.add_argument("--warmup-steps", type=int, default=100)
    parser.add_argument("--batch-size", type=int, default=16)
    parser.add_argument("--save-every", type=int, default=200, help="steps between checkpoints")
    parser.add_argument("--seed", type=int, default=0)
    parser.add_argument("--resume", action="store_true", help="continue the checkpoint in --output")
    parser.add_argument("--no-progress", action="store_true")
    parser.set_defaults(run=run)


def run(args: argparse.Namespace) -> int:
    """Run ``srformer pretrain`` (:func:`srformer.cli.pretrain_command.run`)."""
    from srformer.cli import pretrain_command

    return pretrain_command.run(args)
