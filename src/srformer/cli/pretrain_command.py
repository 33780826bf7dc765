"""``srformer pretrain``: self-supervised pretraining (span corruption + copy, length curriculum) from documents."""

from __future__ import annotations

from srformer.data.documents import load_documents
from srformer.models.factory import NAMED_CONFIGS
from srformer.training.curriculum import CURRICULUM_GROWTHS
from srformer.training.pretrain import pretrain
from srformer.training.pretrain_data import PretrainRecipe, parse_objective_mix
from srformer.training.settings import TrainingSettings


def add_parser(subparsers) -> None:
    defaults = PretrainRecipe()
    parser = subparsers.add_parser(
        "pretrain", help="pretrain a small T5/BART from documents (span corruption + copy, length curriculum)",
        description=(
            "Train a Unigram tokenizer and a randomly initialised named config on the documents of --data with T5 "
            "span corruption and copying, the source growing from --curriculum-start tokens to "
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
                        help="relative weights of span corruption and copy (default: %(default)s)")
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


def recipe_from_args(args) -> PretrainRecipe:
    """The :class:`PretrainRecipe` of the command line (checked on construction)."""
    split = f", part {args.split} of --split-by-id {args.split_by_id}" if args.split_by_id else ""
    return PretrainRecipe(
        model=args.model, max_source_length=args.max_source_length, max_target_length=args.max_target_length,
        vocab_size=args.vocab_size, objective_mix=parse_objective_mix(args.objective_mix),
        noise_density=args.noise_density, mean_span_length=args.mean_span_length,
        curriculum_start=args.curriculum_start, curriculum_hold=args.curriculum_hold,
        curriculum_end=args.curriculum_end, curriculum_growth=args.curriculum_growth,
        eval_documents=args.eval_documents, eval_every=args.eval_every,
        data=f"{args.data} (field {args.document_field}{split})",
    )


def run(args) -> int:
    recipe = recipe_from_args(args)
    settings = TrainingSettings(
        max_steps=args.max_steps, time_budget_seconds=args.time_budget, learning_rate=args.learning_rate,
        warmup_steps=args.warmup_steps, batch_size=args.batch_size, save_every=args.save_every, seed=args.seed,
        progress=not args.no_progress,
    )
    recipe.check_steps(settings.max_steps)  # before the documents are read
    documents = load_documents(args.data, document_field=args.document_field, split_by_id=args.split_by_id,
                               part=args.split)
    result = pretrain([d.document for d in documents], recipe, args.output, settings, resume=args.resume)
    last = result.copy_history[-1] if result.copy_history else None
    copy = (f"; copy accuracy {100 * last['copy_accuracy']:.1f}% at {recipe.max_source_length} tokens on "
            f"{recipe.eval_documents} held-out documents" if last else "")
    print(f"pretrained {args.model} for {result.steps} steps in {result.seconds:.1f} s "
          f"({result.steps / max(result.seconds, 1e-9):.2f} steps/s; final loss "
          f"{result.final_loss if result.final_loss is None else round(result.final_loss, 4)}{copy}; stopped by "
          f"{result.stopped_by}); saved to {args.output}")
    return 0
