"""``srformer evaluate``: ROUGE of a checkpoint on a dataset, as JSON and a printed table."""

from __future__ import annotations

from srformer.cli.arguments import loading_settings
from srformer.cli.data_source import load_data
from srformer.cli.output_files import check_output_file, partial_path
from srformer.evaluation.corpus import discard_partial
from srformer.evaluation.evaluate import evaluate_summarizer, load_summarizer
from srformer.evaluation.report import format_table, write_metrics_json, write_predictions
from srformer.evaluation.rouge import ROUGE_KEYS
from srformer.training.distributed import process_state
from srformer.training.pipeline import read_run


def reading_line(reading: dict) -> str:
    """One line of the reading check (:func:`srformer.evaluation.reading.reading_check`) for the terminal."""
    copy = "-" if reading["copy_rate"] is None else f"{100 * reading['copy_rate']:.1f}%"
    return (f"reading check: {reading['distinct_outputs']} distinct outputs for {reading['num_documents']} documents "
            f"({100 * reading['distinct_fraction']:.0f}%), {copy} of output 3-grams copied from the source, "
            f"ROUGE-1/2/L against the source's lead-3: {reading['lead3_rouge1']:.2f} / {reading['lead3_rouge2']:.2f} / "
            f"{reading['lead3_rougeL']:.2f}"
            + (f"; ROUGE-1/2 against another document's reference: {reading['mismatched_rouge1']:.2f} / "
               f"{reading['mismatched_rouge2']:.2f}" if "mismatched_rouge1" in reading else "")
            + _positions_text(reading.get("source_positions")))


def _positions_text(positions: dict | None) -> str:
    """The source-position part of :func:`reading_line` (empty without positions)."""
    if not positions:
        return ""
    text = f"; {positions['copied']} of {positions['output_sentences']} output sentences copied from the source"
    if positions["copied"]:
        text += (f", {100 * positions['beyond_first_window']:.0f}% of them from beyond its first "
                 f"{positions['window']} tokens")
    return text


def baselines_line(baselines: dict) -> str:
    """One line of the extractive baselines (:func:`srformer.evaluation.evaluate.baseline_summary`)."""
    gap = baselines["minus_lead_matched"]["rouge1"]
    mark = " (the 95% interval excludes 0)" if gap["significant"] else ""
    return (f"baselines, ROUGE-1: lead-3 {baselines['lead-3']['rouge1']:.2f} ({baselines['lead3_words']:.0f} words); "
            f"at the outputs' length ({baselines['words']:.0f} words on average) the lead "
            f"{baselines['lead (length-matched)']['rouge1']:.2f} and the extractive oracle "
            f"{baselines['oracle (length-capped)']['rouge1']:.2f}; outputs − matched lead {gap['mean']:+.2f} "
            f"(95% CI {gap['low']:+.2f} to {gap['high']:+.2f}){mark}")


def run(args) -> int:
    """Check where the outputs go, load the checkpoint and the data, generate (across the launch's processes,
    resumably), score once, and write the metrics (and the predictions); returns 0.

    Finished batches are kept in ``<--output>.partial`` until the metrics are written, so the same command
    started again after a kill resumes there (:func:`srformer.evaluation.corpus.generate_corpus`).

    Raises:
        ValueError / FileNotFoundError: an output path that cannot be written, a checkpoint that is not there
            (:func:`srformer.models.factory.load_pretrained`), bad data, or a partial file of another run's inputs
            (the CLI prints it and exits 2).
    """
    output = check_output_file(args.output, "--output")
    predictions_file = check_output_file(args.predictions, "--predictions") if args.predictions else None
    state = process_state()
    model, tokenizer = load_summarizer(args.checkpoint, *loading_settings(args))
    model = model.to(state.device)
    run_info = read_run(args.checkpoint) or {}
    pairs = load_data(args, default_split="test")
    if args.max_examples is not None:
        pairs = pairs[: args.max_examples]
    partial = partial_path(output)
    metrics, predictions = evaluate_summarizer(
        model, tokenizer, pairs,
        max_source_length=args.max_source_length or run_info.get("max_source_length", 512),
        max_new_tokens=args.max_new_tokens, num_beams=args.num_beams, batch_size=args.batch_size,
        source_prefix=run_info.get("source_prefix", ""), progress=not args.no_progress, partial_file=partial,
        no_repeat_ngram_size=args.no_repeat_ngram_size,
    )
    if state.is_main_process:
        if predictions_file is not None:
            write_predictions(predictions_file, pairs, predictions)
        write_metrics_json(output, metrics)
        row = {"variant": metrics["variant"], "segment_size": metrics["segment_size"] or "-",
               **{k: metrics[k] for k in ROUGE_KEYS}, "examples": metrics["num_examples"],
               "seconds": metrics["seconds"]}
        print(format_table([row], list(row)))
        print(reading_line(metrics["reading"]))
        print(baselines_line(metrics["baselines"]))
        print(f"metrics written to {args.output}")
    discard_partial(partial)
    return 0
