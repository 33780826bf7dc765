"""Resumable stages shared by the experiments: fine-tune a run (or, for zero fine-tuning steps, convert it), evaluate
a run."""

from __future__ import annotations

import json
from collections.abc import Sequence
from pathlib import Path

from srformer.data.pairs import SummaryPair
from srformer.evaluation.corpus import discard_partial
from srformer.evaluation.evaluate import evaluate_summarizer, load_summarizer
from srformer.evaluation.report import write_metrics_json, write_predictions
from srformer.training.checkpoint import find_checkpoint
from srformer.training.distributed import process_state
from srformer.training.pipeline import RunSpec, convert_summarizer, differing_run_settings, read_run, train_summarizer
from srformer.training.settings import TrainingSettings


def stage_training(
    steps: int, learning_rate: float, *, batch_size: int, seed: int, progress: bool, min_save_every: int
) -> TrainingSettings:
    """The experiments' training settings for one stage: ``steps`` optimizer steps, linear warm-up over
    a tenth of them (at most 50), and a checkpoint every quarter of the run (at least every
    ``min_save_every`` steps apart)."""
    return TrainingSettings(
        max_steps=steps, learning_rate=learning_rate, batch_size=batch_size, warmup_steps=min(50, steps // 10),
        save_every=max(min_save_every, steps // 4), seed=seed, progress=progress,
    )


def train_stage(spec: RunSpec, pairs: Sequence[SummaryPair], output: Path, settings: TrainingSettings) -> dict:
    """Fine-tune ``spec`` into ``output`` unless a finished run is there; resume an interrupted one.

    Returns:
        The run's ``training_summary.json`` (``steps``, ``seconds``, losses).
    """
    summary_file = output / "training_summary.json"
    if summary_file.is_file() and find_checkpoint(output) is not None:
        summary = json.loads(summary_file.read_text())
        if summary.get("steps", 0) >= settings.max_steps:
            return summary
    train_summarizer(spec, pairs, output, settings, resume=find_checkpoint(output) is not None)
    return json.loads(summary_file.read_text())


def convert_stage(spec: RunSpec, pairs: Sequence[SummaryPair], output: Path, *, seed: int) -> dict:
    """The zero-step stage ("convert+0"): convert ``spec`` into ``output`` and save it with no fine-tuning
    (:func:`~srformer.training.pipeline.convert_summarizer`), unless ``output`` already holds this conversion (a
    ``training_summary.json`` of 0 steps, the saved model and a run file of the same settings).

    Returns:
        The run's ``training_summary.json`` (``"steps": 0``, ``"seconds": 0.0``, ``"final_loss": None``).

    Raises:
        ValueError: ``output`` holds a run fine-tuned for one or more steps, a training checkpoint, or a conversion
            of other settings (model, variant, lengths): it is never overwritten (choose another output directory).
    """
    # every process looks before the main one writes: under several processes they all take the same branch
    process_state().wait_for_everyone()
    summary_file = output / "training_summary.json"
    if summary_file.is_file():
        summary = json.loads(summary_file.read_text())
        if summary.get("steps", 0) != 0:
            raise ValueError(
                f"{output} holds a run fine-tuned for {summary['steps']} steps; a zero-step conversion "
                "(finetune_steps=0) is not written over it: choose another output directory."
            )
        previous = read_run(output)
        if (output / "config.json").is_file() and previous is not None:
            differing = differing_run_settings(previous, spec)
            if differing:
                raise ValueError(f"{output} holds a zero-step conversion with other {', '.join(differing)}: choose "
                                 "another output directory.")
            return summary
    convert_summarizer(spec, pairs, output, seed=seed)
    return json.loads(summary_file.read_text())


def same_decoding(metrics: dict, *, num_beams: int, max_new_tokens: int, no_repeat_ngram_size: int) -> bool:
    """True when saved ``metrics`` were produced with these decoding settings (a missing
    ``no_repeat_ngram_size``, from before the option existed, counts as 0)."""
    wanted = {"num_beams": num_beams, "max_new_tokens": max_new_tokens, "no_repeat_ngram_size": no_repeat_ngram_size}
    return all(metrics.get(key, 0) == value for key, value in wanted.items())


def evaluate_stage(
    run_dir: Path,
    test_pairs: Sequence[SummaryPair],
    *,
    max_source_length: int,
    max_new_tokens: int,
    num_beams: int,
    batch_size: int,
    source_prefix: str = "",
    progress: bool = True,
    no_repeat_ngram_size: int = 0,
) -> tuple[dict, list[str]]:
    """Generate and score the test set with the model saved in ``run_dir``, unless already done
    with the same decoding settings (a change of decoding re-generates; it never re-trains).

    Writes ``test_metrics.json`` and ``test_predictions.jsonl`` (id, prediction, reference), from the main process.
    A collective call under several processes: the documents are decoded by all of them
    (:func:`srformer.evaluation.corpus.generate_corpus`); finished batches are kept in
    ``test_predictions.jsonl.partial`` until both files are written, so a killed run resumes there.

    Returns:
        ``(metrics, predictions)`` as from :func:`srformer.evaluation.evaluate_summarizer`.
    """
    metrics_file = run_dir / "test_metrics.json"
    predictions_file = run_dir / "test_predictions.jsonl"
    if metrics_file.is_file() and predictions_file.is_file():
        predictions = [json.loads(line)["prediction"] for line in predictions_file.read_text().splitlines()]
        metrics = json.loads(metrics_file.read_text())
        if len(predictions) == len(test_pairs) and same_decoding(
            metrics, num_beams=num_beams, max_new_tokens=max_new_tokens, no_repeat_ngram_size=no_repeat_ngram_size
        ):
            return metrics, predictions
    state = process_state()
    model, tokenizer = load_summarizer(run_dir)
    partial = predictions_file.with_name(predictions_file.name + ".partial")
    metrics, predictions = evaluate_summarizer(
        model.to(state.device), tokenizer, test_pairs, max_source_length=max_source_length,
        max_new_tokens=max_new_tokens, num_beams=num_beams, batch_size=batch_size, source_prefix=source_prefix,
        progress=progress, no_repeat_ngram_size=no_repeat_ngram_size, partial_file=partial,
    )
    if state.is_main_process:
        write_predictions(predictions_file, test_pairs, predictions)
        write_metrics_json(metrics_file, metrics)
    discard_partial(partial)
    return metrics, predictions
