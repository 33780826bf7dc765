"""``srformer train``: its options; the command is :mod:`srformer.cli.train_command`."""

from __future__ import annotations

import argparse

from srformer.cli.arguments import MODEL_HELP, add_data_arguments, add_variant_arguments
from srformer.training.settings import MIXED_PRECISION_MODES


def add_parser(subparsers) -> None:
    """Register ``srformer train`` and its options on ``subparsers``."""
    parser = subparsers.add_parser("train", help="fine-tune a summarizer with a cross-attention variant")
    parser.add_argument("--model", required=True, help=MODEL_HELP)
    add_data_arguments(parser)
    add_variant_arguments(parser)
    parser.add_argument("--output", required=True, help="run directory (model, tokenizer, checkpoints)")
    parser.add_argument("--max-steps", type=int, default=1000, help="optimizer steps")
    parser.add_argument("--time-budget", type=float, default=None, help="stop cleanly after this many seconds")
    parser.add_argument("--learning-rate", type=float, default=5e-4)
    parser.add_argument("--warmup-steps", type=int, default=0)
    parser.add_argument("--batch-size", type=int, default=8)
    parser.add_argument("--gradient-accumulation-steps", type=int, default=1)
    parser.add_argument("--max-source-length", type=int, default=512, help="encoder tokens (longer is truncated)")
    parser.add_argument("--max-target-length", type=int, default=128, help="summary tokens")
    parser.add_argument("--source-prefix", default="", help='e.g. "summarize: " for pretrained T5')
    parser.add_argument("--vocab-size", type=int, default=8000, help="tokenizer size for named configs")
    parser.add_argument("--save-every", type=int, default=200, help="steps between checkpoints")
    parser.add_argument("--seed", type=int, default=0)
    parser.add_argument("--resume", action="store_true", help="continue the checkpoint in --output")
    parser.add_argument(
        "--mixed-precision", choices=MIXED_PRECISION_MODES, default=None,
        help="autocast dtype of the forward pass (default: accelerate launch's --mixed_precision, else no); "
        "fp16 needs a CUDA GPU, bf16 also works on CPUs",
    )
    parser.add_argument(
        "--gradient-checkpointing", action="store_true",
        help="recompute activations in the backward pass (less memory, same gradients, slower)",
    )
    scale = parser.add_argument_group(
        "scaling past one machine (passed unchanged to transformers' Seq2SeqTrainingArguments; launch with "
        "accelerate launch / torchrun / deepspeed)")
    scale.add_argument("--deepspeed", metavar="CONFIG.json", default=None,
                       help="DeepSpeed config file (TrainingArguments.deepspeed; needs the deepspeed package)")
    scale.add_argument("--fsdp", action="store_true", help="train with PyTorch FSDP (TrainingArguments.fsdp)")
    scale.add_argument("--fsdp-config", metavar="CONFIG.json", default=None,
                       help="FSDP config file (TrainingArguments.fsdp_config); implies --fsdp")
    parser.add_argument("--report-to", nargs="+", default=[], metavar="NAME",
                        help="logging integrations of the Trainer, e.g. tensorboard wandb (default: none)")
    parser.add_argument("--no-progress", action="store_true")
    parser.set_defaults(run=run)


def run(args: argparse.Namespace) -> int:
    """Run ``srformer train`` (:func:`srformer.cli.train_command.run`)."""
    from srformer.cli import train_command

    return train_command.run(args)
