"""``srformer pretrain``: self-supervised pretraining (span corruption, copy, cued copy, gap sentences,
reordering; length curriculum) from documents."""

from __future__ import annotations

from srformer.data.documents import load_documents
from srformer.training.pretrain import pretrain
from srformer.training.pretrain_data import PretrainRecipe, parse_objective_mix
from srformer.training.settings import TrainingSettings


def recipe_from_args(args) -> PretrainRecipe:
    """The :class:`PretrainRecipe` of the command line (checked on construction)."""
    split = f", part {args.split} of --split-by-id {args.split_by_id}" if args.split_by_id else ""
    return PretrainRecipe(
        model=args.model, max_source_length=args.max_source_length, max_target_length=args.max_target_length,
        vocab_size=args.vocab_size, objective_mix=parse_objective_mix(args.objective_mix),
        noise_density=args.noise_density, mean_span_length=args.mean_span_length,
        curriculum_start=args.curriculum_start, curriculum_hold=args.curriculum_hold,
        curriculum_end=args.curriculum_end, curriculum_growth=args.curriculum_growth,
        eval_documents=args.eval_documents, eval_every=args.eval_every, init_from=args.init_from,
        data=f"{args.data} (field {args.document_field}{split})",
    )


def run(args) -> int:
    """Check the recipe, read the documents, pretrain into ``--output`` and print a summary; returns 0."""
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
