"""The main job: full vs segmented vs SRformer cross attention on ACLSum, end to end on a CPU.

Protocol (mirrors the paper, which converts a pretrained full-attention model and fine-tunes it):

1. Train a base model with full cross attention on the ACLSum training split (a named config
   built from scratch with a Unigram tokenizer trained on the same split, since no pretrained
   weights can be downloaded; pass a hub id or local checkpoint as ``model`` to start from one).
2. Convert a copy of the base model to each variant and fine-tune each for the same number of
   steps with the same data order and seed (``full`` is fine-tuned too, so every variant gets the
   same budget). With ``finetune_steps = 0`` ("convert+0") each converted model is scored as it is, with no
   optimizer step.
3. Generate summaries for the ACLSum test split and score them with ROUGE; time the decoding.

Every stage is resumable: a finished stage is skipped, an interrupted one resumes from its
last checkpoint.
"""

from __future__ import annotations

from dataclasses import asdict
from pathlib import Path

from srformer.core import SRformerConfig
from srformer.data.pairs import load_aclsum
from srformer.evaluation.report import format_table, write_metrics_json
from srformer.experiments.aclsum_settings import ComparisonSettings
from srformer.experiments.plots import plot_variant_comparison
from srformer.experiments.stages import convert_stage, evaluate_stage, stage_training, train_stage
from srformer.training.distributed import process_state
from srformer.training.pipeline import RunSpec
from srformer.training.settings import TrainingSettings

TABLE_COLUMNS = (
    "variant", "segment_size", "rouge1", "rouge1_ci", "rouge2", "rougeL", "rougeLsum",
    "finetune_seconds", "decode_seconds", "tokens_per_second",
)


def run_aclsum_comparison(output_dir: str | Path, settings: ComparisonSettings | None = None) -> list[dict]:
    """Run the whole comparison and write ``results.json``, ``results.md`` and ``results.png``.

    Returns:
        One row per variant with ROUGE (F1 x 100), intervals, fine-tuning and decoding seconds.

    Raises:
        ValueError: for an unknown variant or segment settings that cannot fit the source length.
    """
    settings = settings or ComparisonSettings()
    output = Path(output_dir)
    output.mkdir(parents=True, exist_ok=True)
    train_pairs = load_aclsum("train")
    test_pairs = load_aclsum("test")[: settings.max_test_examples]

    def training(steps: int, learning_rate: float) -> TrainingSettings:
        return stage_training(steps, learning_rate, batch_size=settings.batch_size, seed=settings.seed,
                              progress=settings.progress, min_save_every=50)

    def spec(model: str, variant: str) -> RunSpec:
        return RunSpec(
            model=model,
            srformer=SRformerConfig(
                variant=variant, segment_size=settings.segment_size, target_length=settings.target_length
            ),
            max_source_length=settings.max_source_length, max_target_length=settings.max_target_length,
            vocab_size=settings.vocab_size, data="aclsum:train",
        )

    main = process_state().is_main_process  # under several processes only the main one writes and reports
    base_dir = output / "base"
    if main:
        print(f"[1/{1 + len(settings.variants)}] base model with full attention -> {base_dir}")
    base_training = training(settings.base_steps, settings.base_learning_rate)
    train_stage(spec(settings.model, "full"), train_pairs, base_dir, base_training)

    rows = []
    for number, variant in enumerate(settings.variants, start=2):
        run_dir = output / variant
        if main:
            print(f"[{number}/{1 + len(settings.variants)}] {variant}: convert the base model, fine-tune -> {run_dir}")
        if settings.finetune_steps == 0:  # convert+0: the converted model is scored as it is
            summary = convert_stage(spec(str(base_dir), variant), train_pairs, run_dir, seed=settings.seed)
        else:
            summary = train_stage(
                spec(str(base_dir), variant), train_pairs, run_dir,
                training(settings.finetune_steps, settings.finetune_learning_rate),
            )
        metrics, _ = evaluate_stage(
            run_dir, test_pairs, max_source_length=settings.max_source_length,
            max_new_tokens=settings.max_new_tokens, num_beams=settings.num_beams,
            batch_size=settings.eval_batch_size, progress=settings.progress,
        )
        rows.append(
            {
                "variant": variant,
                "segment_size": metrics["segment_size"] or "-",
                **{key: metrics[key] for key in ("rouge1", "rouge2", "rougeL", "rougeLsum")},
                "rouge1_ci": "{:.2f}-{:.2f}".format(*metrics["rouge_ci"]["rouge1"]),
                "finetune_steps": summary.get("steps"),
                "finetune_seconds": summary.get("seconds"),
                "decode_seconds": metrics["seconds"],
                "tokens_per_second": metrics["tokens_per_second"],
                "num_examples": metrics["num_examples"],
            }
        )

    table = format_table(rows, TABLE_COLUMNS)
    if main:
        write_metrics_json(output / "results.json", {"settings": asdict(settings), "rows": rows})
        (output / "results.md").write_text(
            f"# ACLSum test ({rows[0]['num_examples']} documents), {settings.model}, source "
            f"{settings.max_source_length} tokens, segment size {settings.segment_size}, target length "
            f"{settings.target_length}\n\n{table}\n"
        )
        plot_variant_comparison(rows, output / "results.png", title=f"ACLSum test, {settings.model}")
        print(table)
    process_state().wait_for_everyone()
    return rows
