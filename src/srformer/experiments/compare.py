"""``srformer compare``: the paper's comparisons (Table 2, Figure 4, Table 3) on one dataset and budget.

Protocol (the paper converts a pretrained full-attention model and fine-tunes it, Sec. 4.1):

1. Base model. With ``base_steps > 0`` a model with full cross attention is trained on the training
   pairs, with the extra settings given to ``full`` (``--setting encoder_window=512`` for a source longer than the
   encoder's positions; the folder is then ``base@encoder_window=512``). A named config such as ``t5-tiny`` starts
   from random weights with a Unigram tokenizer trained on the same pairs (no pretrained weights can be downloaded
   on an offline machine). With
   ``base_steps = 0`` the given checkpoint or hub model (e.g. ``t5-small``) is the base: the
   paper's exact protocol.
2. Cells. Every named setting (a variant, an ablation or the Eq. 10 mix, see
   :data:`srformer.config.NAMED_SETTINGS`) is converted from the same base and fine-tuned for
   ``finetune_steps`` steps, once per segment size and seed (``full`` and ``linear`` do not depend on
   the segment size and run once per seed). With ``finetune_steps = 0`` ("convert+0") each converted model is
   saved and scored straight after conversion, with no optimizer step
   (:func:`~srformer.experiments.stages.convert_stage`). The seed sets the fine-tuning data order, dropout and
   the initialisation of new parameters (RAF); the base model is shared by all seeds, as the
   paper's pretrained checkpoint is.
3. Every cell generates summaries for the test pairs, which are scored with ROUGE (rouge-score).
   Ablations run at one segment size (the paper: 64) next to ``srformer`` at that size.
4. A lead-3 baseline row: the first three sentences of each test document as its summary, scored and
   compared (paired, per document) with ``srformer`` like any cell. It needs no model.

Outputs in ``output_dir``: ``results.json`` (settings, every cell with its per-document scores,
the seed spread per setting, paired comparisons against ``srformer``), ``results.md`` (tables in
the shape of Table 2, Figure 4 and Table 3), ``figure4.png`` and ``table3.png``. Every cell lives in
``cells/<name>-s<segment_size>-seed<seed>`` and is skipped when finished; an interrupted cell
resumes from its last checkpoint. A named setting run with extra settings (``variant_settings``,
``--setting``) lives in ``cells/<key>@<name>=<value>+...`` instead, so changing a setting re-runs exactly the
cells of that named setting and never reuses a model trained with other settings; every cell records its
settings (``settings`` in ``cell.json``; empty when none, as in records written before the option existed).
"""

from __future__ import annotations

import json
from collections.abc import Sequence
from dataclasses import asdict, dataclass, field
from pathlib import Path

import numpy as np
from tqdm.auto import tqdm

from srformer.core import named_config, settings_suffix
from srformer.data.pairs import SummaryPair
from srformer.evaluation.baselines import BASELINE_NAMES, baseline_scores, lead_sentences, word_count
from srformer.evaluation.positions import pool_source_positions
from srformer.evaluation.reading import reading_check
from srformer.evaluation.report import write_metrics_json
from srformer.evaluation.rouge import ROUGE_KEYS, RougeResult, score_summaries
from srformer.evaluation.statistics import paired_difference, seed_spread
from srformer.experiments.compare_report import write_report
from srformer.experiments.compare_settings import REFERENCE, Cell, CompareSettings, grid_cells
from srformer.experiments.stages import convert_stage, evaluate_stage, same_decoding, stage_training, train_stage
from srformer.training.distributed import process_state
from srformer.training.pipeline import RunSpec
from srformer.training.settings import TrainingSettings


@dataclass
class CellResult:
    """What one finished cell contributes: ROUGE (F1 x 100), intervals, timings, per-document scores,
    ``distinct_outputs``, the number of different summaries over the test documents (a model that
    ignores its input writes one summary for every document, whatever its ROUGE), and ``reading``, the reading
    check (:func:`srformer.evaluation.reading.reading_check`: distinct fraction, copy rate, lead-3 ROUGE), or None
    for a record written before the check existed whose predictions are gone; ``finetune_steps``, the optimizer
    steps the cell's model was fine-tuned for (0 for a converted model scored as it is; None in a record written
    before the entry existed); ``baselines``, the length baselines of the cell's own outputs
    (:func:`length_baselines`: per-document output words and the per-document ROUGE of the length-matched lead and
    the length-capped oracle), or None for a record whose predictions are gone."""

    cell: Cell
    metrics: dict
    finetune_seconds: float
    per_document: dict[str, list[float]] = field(repr=False)
    distinct_outputs: int = 0
    settings: dict = field(default_factory=dict)
    reading: dict | None = None
    finetune_steps: int | None = None
    baselines: dict | None = None

    def to_dict(self) -> dict:
        return {
            **asdict(self.cell),
            "key": self.cell.key,
            "metrics": self.metrics,
            "finetune_seconds": self.finetune_seconds,
            "per_document": self.per_document,
            "distinct_outputs": self.distinct_outputs,
            "settings": self.settings,
            "reading": self.reading,
            "finetune_steps": self.finetune_steps,
            "baselines": self.baselines,
        }


def run_compare(
    output_dir: str | Path,
    train_pairs: Sequence[SummaryPair],
    test_pairs: Sequence[SummaryPair],
    settings: CompareSettings | None = None,
) -> dict:
    """Run (or finish) the grid and write the results, tables and plots.

    Args:
        output_dir: results directory; finished cells found there are not re-run.
        train_pairs: training pairs (base model and fine-tuning).
        test_pairs: evaluation pairs (every cell scores the same documents).
        settings: the grid and budget.

    Returns:
        The content of ``results.json``.

    Raises:
        ValueError: empty data, unknown names, or shapes that cannot work (e.g. a segment size whose
            number of segments exceeds ``target_length``, from the training pipeline).
    """
    settings = settings or CompareSettings()
    if not train_pairs or not test_pairs:
        raise ValueError(f"compare needs training and test pairs; got {len(train_pairs)} and {len(test_pairs)}.")
    output = Path(output_dir)
    output.mkdir(parents=True, exist_ok=True)
    cells = grid_cells(settings)
    main = process_state().is_main_process  # under several processes only the main one writes and reports

    if settings.base_steps > 0:
        # the base trains with the settings given to `full` (e.g. an encoder_window for inputs longer than the
        # encoder's positions); its folder is named after them, as a cell's is
        base_extra = settings.variant_settings.get("full", {})
        base = output / ("base" + settings_suffix(base_extra))
        if main:
            tqdm.write(f"base model ({settings.model}, full attention, {settings.base_steps} steps) -> {base}")
        train_stage(
            _spec(settings, settings.model, "full", None, base_extra), train_pairs, base,
            _training(settings, settings.base_steps, settings.base_learning_rate, settings.base_seed),
        )
        base_model = str(base)
    else:
        base_model = settings.model

    results = []
    overall = tqdm(total=len(cells), desc="compare grid", unit="cell", disable=not (settings.progress and main),
                   position=0)
    for cell in cells:
        overall.set_postfix_str(cell.key)
        extra = settings.variant_settings.get(cell.name, {})
        results.append(_run_cell(cell, settings, base_model, train_pairs, test_pairs,
                                 output / "cells" / cell_directory(cell, extra)))
        overall.update(1)
    overall.close()

    lead_length = float(np.mean([word_count(lead_sentences(pair.document)) for pair in test_pairs]))
    payload = summarize(results, settings, lead=lead_baseline(test_pairs), lead_words=lead_length)
    if main:
        write_metrics_json(output / "results.json", payload)
        write_report(payload, output)
    process_state().wait_for_everyone()  # the files are there when any process returns
    return payload


def cell_directory(cell: Cell, settings: dict) -> str:
    """The folder name of ``cell`` run with extra ``settings``: its key, followed by ``@NAME=VALUE+...`` (sorted)
    when there are settings, so that a cell of other settings never reuses this one's model."""
    return cell.key + settings_suffix(settings)


def _spec(settings: CompareSettings, model: str, name: str, segment_size: int | None, extra: dict) -> RunSpec:
    config = named_config(
        name, segment_size=segment_size or min(settings.segment_sizes), target_length=settings.target_length, **extra
    )
    return RunSpec(
        model=model, srformer=config, max_source_length=settings.max_source_length,
        max_target_length=settings.max_target_length, source_prefix=settings.source_prefix,
        vocab_size=settings.vocab_size, data=settings.data,
    )


def _training(settings: CompareSettings, steps: int, learning_rate: float, seed: int) -> TrainingSettings:
    return stage_training(steps, learning_rate, batch_size=settings.batch_size, seed=seed,
                          progress=settings.progress, min_save_every=25)


def _run_cell(
    cell: Cell, settings: CompareSettings, base_model: str, train_pairs, test_pairs, run_dir: Path
) -> CellResult:
    result_file = run_dir / "cell.json"
    extra = settings.variant_settings.get(cell.name, {})
    if result_file.is_file():
        saved = json.loads(result_file.read_text())
        metrics = saved.get("metrics", {})
        if (
            metrics.get("num_examples") == len(test_pairs)
            and "distinct_outputs" in saved
            and same_settings(saved, extra)
            and saved.get("finetune_steps", settings.finetune_steps) == settings.finetune_steps
            and same_decoding(metrics, num_beams=settings.num_beams, max_new_tokens=settings.max_new_tokens,
                              no_repeat_ngram_size=settings.no_repeat_ngram_size)
        ):
            reading, baselines = saved.get("reading"), saved.get("baselines")
            # a record written before the reading check (or its control against another document's reference) or
            # the length baselines existed: add them from the saved predictions (read only then)
            stale = reading is None or (len(test_pairs) > 1 and "mismatched_rouge1" not in reading)
            predictions = saved_predictions(run_dir, test_pairs) if stale or baselines is None else None
            if predictions:
                if stale:
                    reading = _reading(predictions, test_pairs)
                baselines = baselines or length_baselines(test_pairs, predictions)
            result = CellResult(cell, metrics, saved["finetune_seconds"], saved["per_document"],
                                saved["distinct_outputs"], extra, reading, saved.get("finetune_steps"), baselines)
            stale_record = (reading, baselines) != (saved.get("reading"), saved.get("baselines"))
            if stale_record and process_state().is_main_process:  # add what an old record lacked
                write_metrics_json(result_file, result.to_dict())
            return result
    # Otherwise training and decoding are each skipped when already done (with these settings).
    spec = _spec(settings, base_model, cell.name, cell.segment_size, extra)
    if settings.finetune_steps == 0:  # convert+0: the converted model is scored as it is
        summary = convert_stage(spec, train_pairs, run_dir, seed=cell.seed)
    else:
        summary = train_stage(spec, train_pairs, run_dir,
                              _training(settings, settings.finetune_steps, settings.finetune_learning_rate, cell.seed))
    metrics, predictions = evaluate_stage(
        run_dir, test_pairs, max_source_length=settings.max_source_length, max_new_tokens=settings.max_new_tokens,
        num_beams=settings.num_beams, batch_size=settings.eval_batch_size, source_prefix=settings.source_prefix,
        progress=False, no_repeat_ngram_size=settings.no_repeat_ngram_size,
    )
    per_document = score_summaries(predictions, [p.summary for p in test_pairs]).per_document
    reading = metrics.get("reading") or _reading(predictions, test_pairs)
    result = CellResult(cell, metrics, float(summary.get("seconds", 0.0)), per_document, len(set(predictions)),
                        extra, reading, int(summary.get("steps", settings.finetune_steps)),
                        length_baselines(test_pairs, predictions))
    if process_state().is_main_process:
        write_metrics_json(result_file, result.to_dict())
    return result


def _reading(predictions: Sequence[str], test_pairs: Sequence[SummaryPair]) -> dict:
    """The reading check of a cell's outputs, with the control against another document's reference."""
    return reading_check(predictions, [p.document for p in test_pairs], [p.summary for p in test_pairs])


def saved_predictions(run_dir: Path, test_pairs: Sequence[SummaryPair]) -> list[str] | None:
    """A finished cell's saved ``test_predictions.jsonl`` (None when that file is missing or holds another number of
    predictions than ``test_pairs``)."""
    predictions_file = run_dir / "test_predictions.jsonl"
    if not predictions_file.is_file():
        return None
    predictions = [json.loads(line)["prediction"] for line in predictions_file.read_text().splitlines() if line]
    return predictions if len(predictions) == len(test_pairs) else None


def length_baselines(test_pairs: Sequence[SummaryPair], predictions: Sequence[str]) -> dict:
    """The baselines of the length of a cell's own outputs (:mod:`srformer.evaluation.baselines`):
    ``{"words": per-document output words, LEAD_MATCHED: per-document ROUGE, ORACLE_CAPPED: per-document ROUGE}``,
    the lead cut to each output's word count and the greedy oracle capped at it."""
    rows = baseline_scores([p.document for p in test_pairs], [p.summary for p in test_pairs], predictions)
    return {"words": [word_count(text) for text in predictions],
            LEAD_MATCHED: rows[LEAD_MATCHED], ORACLE_CAPPED: rows[ORACLE_CAPPED]}


def same_settings(record: dict, settings: dict) -> bool:
    """Whether a saved cell record was made with these extra ``settings`` (a record without a ``settings`` entry,
    written before ``--setting`` existed, was made with none)."""
    return record.get("settings", {}) == json.loads(json.dumps(settings))


def _mean_reading(members: Sequence[CellResult]) -> dict | None:
    """The reading check averaged over a group's seeds (None unless every member has one; a copy rate of None,
    from outputs shorter than three words, is left out of its mean; the source positions are pooled)."""
    if not members or any(r.reading is None for r in members):
        return None
    readings = [r.reading for r in members if r.reading is not None]
    mean: dict = {}
    for key in readings[0]:
        values = [reading[key] for reading in readings if reading.get(key) is not None]
        if key == "source_positions":  # counts: pooled over the seeds, not averaged
            mean[key] = pool_source_positions(values) if len(values) == len(readings) else None
        else:
            mean[key] = float(np.mean(values)) if values else None
    return mean


LEAD = "lead-3"
"""Name of the baseline row whose summary of a document is its first three sentences."""

LEAD_MATCHED, ORACLE_CAPPED = BASELINE_NAMES[1], BASELINE_NAMES[2]
"""Names of the length baselines of a cell's outputs: the lead cut to its length, the oracle capped at it."""


def lead_baseline(test_pairs: Sequence[SummaryPair]) -> dict[str, list[float]]:
    """Per-document ROUGE F1 (x 100, keys :data:`~srformer.evaluation.rouge.ROUGE_KEYS`) of the lead-3 baseline:
    each document's first three sentences (:func:`~srformer.evaluation.baselines.lead_sentences`, from the whole
    document, not the model's truncated source) scored against its reference summary, in ``test_pairs`` order.

    Raises:
        ValueError: if ``test_pairs`` is empty.
    """
    if not test_pairs:
        raise ValueError("lead_baseline needs at least one test pair.")
    return baseline_scores([pair.document for pair in test_pairs], [pair.summary for pair in test_pairs])[LEAD]


def lead3_row(lead: dict[str, list[float]], lead_words: float | None = None) -> dict:
    """The ``lead3`` entry of :func:`summarize`'s payload from the lead-3 baseline's per-document scores
    (:func:`lead_baseline`): mean ROUGE (F1 x 100), the bootstrap 95% interval per key, the number of documents
    and, when given, the lead-3 texts' mean length in words."""
    interval = RougeResult(lead).bootstrap()
    return {
        "name": LEAD,
        **{key: float(np.mean(lead[key])) for key in ROUGE_KEYS},
        "rouge_ci": {key: [interval[key][0], interval[key][2]] for key in ROUGE_KEYS},
        "num_documents": len(lead["rouge1"]),
        **({"words": lead_words} if lead_words is not None else {}),
    }


def _group_baselines(members: Sequence[CellResult], documents: dict[str, list[float]]) -> dict | None:
    """A group's length baselines over its seeds: mean output words, each baseline's mean ROUGE (its per-document
    scores averaged over seeds first), and the paired difference of the group's pooled per-document ROUGE-1/2/L
    to the length-matched lead (``minus_lead_matched``). None unless every member has them."""
    if not members or any(r.baselines is None for r in members):
        return None
    found = [r.baselines for r in members if r.baselines is not None]
    out: dict = {"words": float(np.mean([np.mean(b["words"]) for b in found]))}
    for name in (LEAD_MATCHED, ORACLE_CAPPED):
        pooled = {key: np.mean([b[name][key] for b in found], axis=0) for key in ROUGE_KEYS}
        out[name] = {key: float(np.mean(values)) for key, values in pooled.items()}
        if name == LEAD_MATCHED:
            out["minus_lead_matched"] = {key: paired_difference(documents[key], pooled[key].tolist()).to_dict()
                                         for key in ("rouge1", "rouge2", "rougeL")}
    return out


def summarize(
    results: Sequence[CellResult], settings: CompareSettings, lead: dict[str, list[float]] | None = None,
    lead_words: float | None = None,
) -> dict:
    """Aggregate finished cells: seed spread per (name, segment size), a pooled bootstrap interval
    over documents (per-document F1 averaged over seeds, rouge-score's BootstrapAggregator), and
    paired per-document comparisons of ``srformer`` with every other setting at the same segment
    size (segment-free settings are compared at every segment size).

    Args:
        results: the finished cells.
        settings: the grid.
        lead: per-document scores of the lead-3 baseline (:func:`lead_baseline`) on the same test documents, or
            None for no baseline row. With it, ``lead3`` holds its means and interval, and ``paired`` compares
            ``srformer`` with it at every segment size (``"other": "lead-3"``).
        lead_words: the lead-3 texts' mean length in words, recorded in ``lead3`` (``"words"``) when given.

    Returns:
        ``{"settings", "cells", "groups", "paired", "lead3"}`` (JSON-ready; ``lead3`` is None without ``lead``).

    Raises:
        ValueError: if ``lead`` scores another number of documents than the cells.
    """
    by_group: dict[tuple[str, int | None], list[CellResult]] = {}
    for result in results:
        by_group.setdefault(result.cell.group, []).append(result)

    def pooled(group: list[CellResult]) -> dict[str, list[float]]:
        return {key: np.mean([r.per_document[key] for r in group], axis=0).tolist() for key in ROUGE_KEYS}

    groups = []
    for (name, size), members in by_group.items():
        documents = pooled(members)
        interval = RougeResult(documents).bootstrap()
        groups.append({
            "name": name,
            "settings": settings.variant_settings.get(name, {}),
            "segment_size": size,
            "seeds": [r.cell.seed for r in members],
            **{key: seed_spread([r.metrics[key] for r in members]).to_dict() for key in ROUGE_KEYS},
            "rouge_ci": {key: [interval[key][0], interval[key][2]] for key in ROUGE_KEYS},
            "finetune_seconds": float(np.mean([r.finetune_seconds for r in members])),
            "decode_seconds": float(np.mean([r.metrics["seconds"] for r in members])),
            "distinct_outputs": float(np.mean([r.distinct_outputs for r in members])),
            "reading": _mean_reading(members),
            "baselines": _group_baselines(members, documents),
            "num_documents": len(documents["rouge1"]),
        })

    lead3 = None
    if lead is not None:
        counts = {len(r.per_document["rouge1"]) for r in results}
        if counts and counts != {len(lead["rouge1"])}:
            raise ValueError(f"`lead` scores {len(lead['rouge1'])} documents but the cells score {sorted(counts)}: "
                             "give the lead-3 scores of the same test pairs.")
        lead3 = lead3_row(lead, lead_words)

    paired = []
    # a grid of segment-free settings only (the long-input mechanisms beside `full`) is paired once, at no size
    sizes: list[int | None] = [*sorted({size for _, size in by_group if size is not None})] or [None]
    references = list(dict.fromkeys((settings.reference, *((REFERENCE,) if settings.ablations else ()))))
    for reference_name in references:
        for size in sizes:
            reference = by_group.get((reference_name, size)) or by_group.get((reference_name, None))
            if reference is None:
                continue
            reference_docs = pooled(reference)
            others: list[tuple[str, dict[str, list[float]]]] = [(LEAD, lead)] if lead is not None else []
            others += [(name, pooled(members)) for (name, other_size), members in by_group.items()
                       if name != reference_name and other_size in (size, None)]
            paired += [{"reference": reference_name, "other": name, "segment_size": size,
                        **{key: paired_difference(reference_docs[key], docs[key]).to_dict()
                           for key in ("rouge1", "rouge2", "rougeL")}} for name, docs in others]
    return {
        "settings": asdict(settings),
        "cells": [r.to_dict() for r in results],
        "groups": groups,
        "paired": paired,
        "lead3": lead3,
    }
