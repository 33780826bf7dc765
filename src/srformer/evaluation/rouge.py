"""ROUGE scoring of generated summaries, built on Google's ``rouge_score`` package.

This module does not implement ROUGE itself: every number comes from
:class:`rouge_score.rouge_scorer.RougeScorer` (Porter stemming on) and confidence intervals
come from :class:`rouge_score.scoring.BootstrapAggregator`. What it adds is

* :func:`split_sentences`, which puts one sentence per line as ``rougeLsum`` expects, and
* :class:`RougeResult`, which keeps per-document F1 scores (scaled to 0-100) and aggregates them.

Sentence splitting
------------------
``rougeLsum`` (summary-level LCS) treats each line of a text as one sentence. The usual recipe
(Hugging Face examples) splits sentences with nltk's punkt model, which has to be downloaded at run
time; this project must work offline, so :func:`split_sentences` is pysbd's rule-based segmenter
(:mod:`srformer.data.sentences`): a line break always ends a sentence, and abbreviations, decimals and
closing quotes do not. The same split serves every system being compared and the lead and oracle
baselines (:mod:`srformer.evaluation.baselines`).
"""

from __future__ import annotations

import collections
import math
from collections.abc import Sequence
from dataclasses import dataclass

import numpy as np
from rouge_score import rouge_scorer, scoring

from srformer.data.sentences import split_sentences

__all__ = ["ROUGE_KEYS", "RougeResult", "score_summaries", "split_sentences"]

ROUGE_KEYS: tuple[str, ...] = ("rouge1", "rouge2", "rougeL", "rougeLsum")
"""The ROUGE variants computed by :func:`score_summaries`, in reporting order."""

# Bootstrap samples hold only F1, so the aggregator is fed a one-field record.
_F1 = collections.namedtuple("_F1", ["fmeasure"])


@dataclass
class RougeResult:
    """Per-document ROUGE F1 scores of a set of summaries.

    Attributes:
        per_document: Maps each ROUGE key (see :data:`ROUGE_KEYS`) to a list with one F1 score
            per document, scaled to 0-100 (``100 * fmeasure``), in the order of the inputs to
            :func:`score_summaries`. All lists have the same, non-zero length.

    Raises:
        ValueError: On construction, if ``per_document`` is empty, a list is empty, or the lists
            have different lengths.
    """

    per_document: dict[str, list[float]]

    def __post_init__(self) -> None:
        if not self.per_document:
            raise ValueError("per_document must hold at least one ROUGE key")
        lengths = {key: len(values) for key, values in self.per_document.items()}
        if len(set(lengths.values())) != 1:
            raise ValueError(f"per_document lists have different lengths: {lengths}")
        if next(iter(lengths.values())) == 0:
            raise ValueError("per_document lists must not be empty")

    @property
    def num_documents(self) -> int:
        """Number of scored documents (``int``)."""
        return len(next(iter(self.per_document.values())))

    def mean(self) -> dict[str, float]:
        """Average F1 over documents.

        Returns:
            Maps each ROUGE key to the mean per-document F1, scaled to 0-100.
        """
        return {key: float(np.mean(values)) for key, values in self.per_document.items()}

    def bootstrap(
        self, confidence: float = 0.95, n_samples: int = 1000, seed: int = 0
    ) -> dict[str, tuple[float, float, float]]:
        """Bootstrap confidence interval of the mean F1, via ``rouge_score``'s aggregator.

        Documents are resampled with replacement ``n_samples`` times by
        :class:`rouge_score.scoring.BootstrapAggregator`; ``low`` and ``high`` are the
        ``(1 - confidence) / 2`` and ``(1 + confidence) / 2`` percentiles of the resampled means
        and ``mid`` is their median (close to, but not exactly, :meth:`mean`). The aggregator
        draws from numpy's global random generator; it is seeded with ``seed`` for
        reproducibility and its previous state is restored afterwards.

        Args:
            confidence: Width of the interval, in ``[0, 1]``.
            n_samples: Number of bootstrap resamples, ``>= 1``.
            seed: Seed for numpy's global random generator during resampling.

        Returns:
            Maps each ROUGE key to ``(low, mid, high)`` F1 scores scaled to 0-100, with
            ``low <= mid <= high``.

        Raises:
            ValueError: If ``confidence`` is outside ``[0, 1]`` or ``n_samples < 1`` (raised by
                ``rouge_score``), or if either is NaN.
        """
        if isinstance(confidence, float) and math.isnan(confidence):
            raise ValueError("confidence must not be NaN")
        aggregator = scoring.BootstrapAggregator(
            confidence_interval=confidence, n_samples=n_samples
        )
        keys = list(self.per_document)
        for i in range(self.num_documents):
            aggregator.add_scores({key: _F1(self.per_document[key][i]) for key in keys})
        state = np.random.get_state()
        try:
            np.random.seed(seed)
            aggregated = aggregator.aggregate()
        finally:
            np.random.set_state(state)
        return {
            key: (
                float(aggregated[key].low.fmeasure),
                float(aggregated[key].mid.fmeasure),
                float(aggregated[key].high.fmeasure),
            )
            for key in keys
        }


def score_summaries(predictions: Sequence[str], references: Sequence[str]) -> RougeResult:
    """Score generated summaries against references with ROUGE-1/2/L/Lsum.

    Uses ``rouge_scorer.RougeScorer(list(ROUGE_KEYS), use_stemmer=True)`` with one reference per
    prediction. Both texts are first rewritten with one sentence per line (via
    :func:`split_sentences`), as ``rougeLsum`` requires; ``rouge_score``'s tokenizer treats
    newlines like any other non-alphanumeric character, so ``rouge1``, ``rouge2`` and ``rougeL``
    are unchanged by this rewriting and a single ``score`` call per pair suffices.

    Args:
        predictions: Generated summaries, one per document.
        references: Reference summaries, aligned with ``predictions``.

    Returns:
        A :class:`RougeResult` with one F1 (x100) per document and ROUGE key.

    Raises:
        ValueError: If the sequences are empty or have different lengths.
        TypeError: If an element is not a ``str``.
    """
    if len(predictions) != len(references):
        raise ValueError(
            f"predictions and references differ in length: {len(predictions)} != {len(references)}"
        )
    if len(predictions) == 0:
        raise ValueError("predictions and references must not be empty")
    scorer = rouge_scorer.RougeScorer(list(ROUGE_KEYS), use_stemmer=True)
    per_document: dict[str, list[float]] = {key: [] for key in ROUGE_KEYS}
    for prediction, reference in zip(predictions, references, strict=True):
        scores = scorer.score(
            "\n".join(split_sentences(reference)), "\n".join(split_sentences(prediction))
        )
        for key in ROUGE_KEYS:
            per_document[key].append(100.0 * scores[key].fmeasure)
    return RougeResult(per_document=per_document)
