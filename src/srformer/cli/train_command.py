"""``srformer train``: convert a model to a cross-attention variant and fine-tune it (on ``Seq2SeqTrainer``)."""

from __future__ import annotations

import os

from srformer.cli.arguments import parse_settings
from srformer.cli.data_source import load_data
from srformer.core import named_config
from srformer.training.distributed import process_state
from srformer.training.pipeline import RunSpec, train_summarizer
from srformer.training.settings import TrainingSettings


def run(args) -> int:
    """Load the data, convert and fine-tune the model into ``--output`` and print a summary; returns 0."""
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
