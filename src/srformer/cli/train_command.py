"""``srformer train``: convert a model to a cross-attention variant and fine-tune it (on ``Seq2SeqTrainer``)."""

from __future__ import annotations

import os

from srformer.cli.arguments import MODEL_HELP, add_data_arguments, add_variant_arguments, parse_settings
from srformer.cli.data_source import load_data
from srformer.config import named_config
from srformer.training.distributed import process_state
from srformer.training.pipeline import RunSpec, train_summarizer
from srformer.training.settings import MIXED_PRECISION_MODES, TrainingSettings


def add_parser(subparsers) -> None:
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


def run(args) -> int:
    pairs = load_data(args, default_split="train")
    spec = RunSpec(
        model=args.model,
        srformer=named_config(args.variant, segment_size=args.segment_size, target_length=args.target_length,
                              **parse_settings(args.setting)),
        max_source_length=args.max_source_length, max_target_length=args.max_target_length,
        source_prefix=args.source_prefix, vocab_size=args.vocab_size, data=str(args.data),
    )
    settings = TrainingSettings(
        max_steps=args.max_steps, time_budget_seconds=args.time_budget, learning_rate=args.learning_rate,
        warmup_steps=args.warmup_steps, batch_size=args.batch_size,
        gradient_accumulation_steps=args.gradient_accumulation_steps, save_every=args.save_every,
        seed=args.seed, progress=not args.no_progress, mixed_precision=mixed_precision(args),
        gradient_checkpointing=args.gradient_checkpointing, deepspeed=args.deepspeed, fsdp=args.fsdp,
        fsdp_config=args.fsdp_config, report_to=tuple(args.report_to),
    )
    result = train_summarizer(spec, pairs, args.output, settings, resume=args.resume)
    if not process_state().is_main_process:  # one report per run, not per process
        return 0
    print(
        f"trained {args.variant} for {result.steps} steps in {result.seconds:.1f} s "
        f"(final loss {result.final_loss if result.final_loss is None else round(result.final_loss, 4)}, "
        f"stopped by {result.stopped_by}); saved to {args.output}"
    )
    return 0


def mixed_precision(args) -> str:
    """``--mixed-precision``, else the mode ``accelerate launch --mixed_precision`` exported
    (``ACCELERATE_MIXED_PRECISION``), else ``"no"``."""
    if args.mixed_precision is not None:
        return args.mixed_precision
    return os.environ.get("ACCELERATE_MIXED_PRECISION", "no").lower()
