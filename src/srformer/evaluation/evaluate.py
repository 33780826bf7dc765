"""Evaluate a saved summarizer: generate summaries for a dataset and score them with ROUGE."""

from __future__ import annotations

import os
from collections.abc import Mapping, Sequence
from typing import Any

import numpy as np
from transformers import AutoTokenizer

from srformer.core import SRformerConfig
from srformer.core.registry import keeps_own_attention
from srformer.data.pairs import SummaryPair
from srformer.evaluation.baselines import BASELINE_NAMES, baseline_scores, lead_sentences, word_count
from srformer.evaluation.corpus import generate_corpus
from srformer.evaluation.generation import GenerationResult
from srformer.evaluation.positions import source_position_summary
from srformer.evaluation.reading import reading_check
from srformer.evaluation.rouge import ROUGE_KEYS, score_summaries
from srformer.evaluation.statistics import paired_difference
from srformer.models.convert import srformer_config_of
from srformer.models.factory import load_model, load_pretrained
from srformer.training.distributed import from_main_process, process_state

#: Tokens per window of the source-position histogram of a model without an encoder window.
DEFAULT_POSITION_WINDOW = 512


def load_summarizer(
    checkpoint: str | os.PathLike, conversion: SRformerConfig | None = None, runtime: Mapping[str, Any] | None = None
):
    """Model (converted if it is an SRformer checkpoint, or to ``conversion``) and tokenizer saved in ``checkpoint``,
    with the ``runtime`` options (:func:`srformer.models.factory.load_model`), in eval mode.

    ``checkpoint`` is a local directory or a hub model id, by the rule of
    :func:`srformer.models.factory.load_pretrained`.

    Raises:
        FileNotFoundError: naming ``checkpoint`` and the fix, if it is a missing local path, or neither a local
            checkpoint nor a reachable hub model id.
        ValueError: a ``conversion`` or runtime option that cannot apply (:func:`~srformer.models.factory.load_model`).
    """
    tokenizer = load_pretrained(AutoTokenizer.from_pretrained, str(checkpoint))
    model = load_model(str(checkpoint), conversion=conversion, runtime=runtime)
    model.eval()
    return model, tokenizer


def evaluate_summarizer(
    model,
    tokenizer,
    pairs: Sequence[SummaryPair],
    *,
    max_source_length: int = 512,
    max_new_tokens: int = 128,
    num_beams: int = 1,
    batch_size: int = 8,
    source_prefix: str = "",
    progress: bool = True,
    no_repeat_ngram_size: int = 0,
    partial_file: str | os.PathLike | None = None,
) -> tuple[dict[str, Any], list[str]]:
    """Generate a summary per document and score it against the reference with ROUGE.

    A collective call under ``torchrun`` / ``accelerate launch``: the documents are decoded by every process
    (:func:`srformer.evaluation.corpus.generate_corpus`, resumable through ``partial_file``); the main process scores
    the gathered predictions once and every process returns its metrics.

    Returns:
        ``(metrics, predictions)``. ``metrics`` holds ``rouge1``, ``rouge2``, ``rougeL``,
        ``rougeLsum`` (F1 x 100, rouge-score with stemming, Lsum over newline-separated sentences),
        their bootstrap 95% intervals under ``rouge_ci`` (low, high), ``num_examples``, ``seconds``
        (wall-clock time spent in ``generate``), ``new_tokens``, ``tokens_per_second``, ``num_beams``,
        ``max_new_tokens``, ``no_repeat_ngram_size`` (0 = off; n > 0 forbids repeating any n-gram
        in a summary, ``transformers``' standard option), ``max_source_length``, the SRformer settings (``variant``,
        ``segment_size``, ``target_length``), and ``reading``: the reading check of the summaries against their
        documents (:func:`srformer.evaluation.reading.reading_check`: distinct outputs, copy rate, lead-3 ROUGE;
        with a fast tokenizer also ``source_positions``, where the copied output sentences start in the input, per
        encoder window: :func:`srformer.evaluation.positions.source_position_summary`),
        and ``baselines``: lead-3, the lead matched to each output's length and the oracle capped at it, with the
        paired difference to the matched lead (:func:`baseline_summary`). ``seconds`` sums the processes' time
        in ``generate`` (with the batches of an interrupted run); ``num_processes`` is the launch's.

    Raises:
        ValueError: for an empty ``pairs``, and the errors of :func:`~srformer.evaluation.corpus.generate_corpus`
            (bad settings; a ``partial_file`` of another run's inputs, naming what changed).
    """
    if not pairs:
        raise ValueError("No examples to evaluate.")
    extra: dict[str, Any] = {"no_repeat_ngram_size": no_repeat_ngram_size} if no_repeat_ngram_size else {}
    generated = generate_corpus(
        model, tokenizer, [p.document for p in pairs], ids=[p.id for p in pairs], partial_file=partial_file,
        max_source_length=max_source_length, max_new_tokens=max_new_tokens, batch_size=batch_size,
        num_beams=num_beams, source_prefix=source_prefix, progress=progress, **extra,
    )
    state = process_state()
    metrics = _score(model, tokenizer, pairs, generated, max_source_length=max_source_length,
                     max_new_tokens=max_new_tokens, num_beams=num_beams, no_repeat_ngram_size=no_repeat_ngram_size,
                     num_processes=state.num_processes, source_prefix=source_prefix) if state.is_main_process else None
    return from_main_process(metrics), generated.summaries


def _score(model, tokenizer, pairs: Sequence[SummaryPair], generated: GenerationResult, *, max_source_length: int,
           max_new_tokens: int, num_beams: int, no_repeat_ngram_size: int, num_processes: int,
           source_prefix: str) -> dict[str, Any]:
    """The metrics of :func:`evaluate_summarizer` for ``generated`` summaries of ``pairs``."""
    rouge = score_summaries(generated.summaries, [p.summary for p in pairs])
    means = rouge.mean()
    intervals = rouge.bootstrap()
    settings = srformer_config_of(model)
    metrics: dict[str, Any] = {key: means[key] for key in ROUGE_KEYS}
    metrics["rouge_ci"] = {key: [intervals[key][0], intervals[key][2]] for key in ROUGE_KEYS}
    metrics.update(
        num_examples=len(pairs),
        seconds=generated.seconds,
        new_tokens=generated.num_new_tokens,
        tokens_per_second=generated.tokens_per_second,
        num_beams=num_beams,
        max_new_tokens=max_new_tokens,
        no_repeat_ngram_size=no_repeat_ngram_size,
        max_source_length=max_source_length,
        num_processes=num_processes,
        variant=settings.variant if settings else "full",
        segment_size=settings.segment_size if settings and not keeps_own_attention(settings.variant) else None,
        target_length=settings.target_length if settings and not keeps_own_attention(settings.variant) else None,
        reading=reading_check(generated.summaries, [p.document for p in pairs], [p.summary for p in pairs]),
        baselines=baseline_summary(pairs, generated.summaries, rouge.per_document),
    )
    if getattr(tokenizer, "is_fast", False):  # where the copied sentences come from, per encoder window
        window = settings.encoder_window if settings and settings.encoder_window else DEFAULT_POSITION_WINDOW
        metrics["reading"]["source_positions"] = source_position_summary(
            generated.summaries, [p.document for p in pairs], tokenizer, window=window, source_prefix=source_prefix,
            max_source_length=max_source_length)
    return metrics


def baseline_summary(pairs: Sequence[SummaryPair], outputs: Sequence[str],
                     per_document: dict[str, list[float]]) -> dict[str, Any]:
    """The baselines of :mod:`srformer.evaluation.baselines` next to a model's outputs.

    Args:
        pairs: the scored documents with their references.
        outputs: the model's outputs, aligned (their word counts set the length baselines).
        per_document: the outputs' per-document ROUGE F1 x 100 (:class:`~srformer.evaluation.rouge.RougeResult`).

    Returns:
        ``{"words": mean output words, "lead3_words": mean lead-3 words, NAME: {rouge key: mean F1 x 100} for each
        baseline name, "minus_lead_matched": {"rouge1"/"rouge2"/"rougeL": the paired difference of the outputs to
        the length-matched lead (:func:`~srformer.evaluation.statistics.paired_difference`, as a dict)}}``.
    """
    documents = [pair.document for pair in pairs]
    rows = baseline_scores(documents, [pair.summary for pair in pairs], outputs)
    matched = rows[BASELINE_NAMES[1]]
    return {
        "words": float(np.mean([word_count(text) for text in outputs])),
        "lead3_words": float(np.mean([word_count(lead_sentences(document)) for document in documents])),
        **{name: {key: float(np.mean(values)) for key, values in row.items()} for name, row in rows.items()},
        "minus_lead_matched": {key: paired_difference(per_document[key], matched[key]).to_dict()
                               for key in ("rouge1", "rouge2", "rougeL")},
    }
