"""Statistics for comparing summarizers: spread over seeds and paired per-document differences."""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import asdict, dataclass

import numpy as np


@dataclass(frozen=True)
class SeedSpread:
    """Mean and sample standard deviation (ddof=1; 0 for one seed) of one score over seeds."""

    mean: float
    std: float
    num_seeds: int

    def to_dict(self) -> dict:
        return asdict(self)


def seed_spread(values: Sequence[float]) -> SeedSpread:
    """Spread of a score (e.g. ROUGE-1 x 100) over seeds.

    Raises:
        ValueError: for no values.
    """
    if not values:
        raise ValueError("No values to summarize: every cell of the grid failed or none was run.")
    array = np.asarray(values, dtype=np.float64)
    std = float(array.std(ddof=1)) if len(array) > 1 else 0.0
    return SeedSpread(float(array.mean()), std, len(array))


@dataclass(frozen=True)
class PairedDifference:
    """``a - b`` over the same documents: mean difference, its bootstrap interval and win rates.

    Attributes:
        mean: mean per-document difference (score units, e.g. ROUGE-1 F1 x 100).
        low: lower end of the percentile bootstrap interval of the mean difference.
        high: upper end of that interval.
        confidence: interval width (e.g. 0.95).
        a_wins: fraction of documents where ``a`` scores higher.
        b_wins: fraction of documents where ``b`` scores higher (ties are in neither).
        num_documents: number of paired documents.
    """

    mean: float
    low: float
    high: float
    confidence: float
    a_wins: float
    b_wins: float
    num_documents: int

    @property
    def significant(self) -> bool:
        """True when the interval excludes zero."""
        return self.low > 0 or self.high < 0

    def to_dict(self) -> dict:
        return {**asdict(self), "significant": self.significant}


def paired_difference(
    a: Sequence[float], b: Sequence[float], *, confidence: float = 0.95, n_samples: int = 2000, seed: int = 0
) -> PairedDifference:
    """Paired comparison of two systems scored on the same documents.

    The documents are resampled with replacement ``n_samples`` times (one index draw shared by
    both systems, so the pairing is kept) and the interval is the percentile interval of the
    resampled mean difference (Efron & Tibshirani 1993, Sec. 13.3; the paired bootstrap of
    Koehn 2004 for MT metrics).

    Args:
        a: per-document scores of system A, one per document.
        b: per-document scores of system B, aligned with ``a``.
        confidence: interval width in (0, 1).
        n_samples: number of bootstrap resamples (>= 1).
        seed: seed of the resampling generator (results are reproducible).

    Raises:
        ValueError: for lists of different or zero length, or a bad ``confidence``/``n_samples``.
    """
    if len(a) != len(b) or not len(a):
        raise ValueError(f"Paired scores need two equally long, non-empty lists; got {len(a)} and {len(b)} documents.")
    if not 0.0 < confidence < 1.0:
        raise ValueError(f"`confidence` must lie in (0, 1), got {confidence!r}.")
    if n_samples < 1:
        raise ValueError(f"`n_samples` must be >= 1, got {n_samples!r}.")
    differences = np.asarray(a, dtype=np.float64) - np.asarray(b, dtype=np.float64)
    rng = np.random.default_rng(seed)
    draws = rng.integers(0, len(differences), size=(n_samples, len(differences)))
    means = differences[draws].mean(axis=1)
    tail = (1.0 - confidence) / 2.0
    low, high = np.quantile(means, [tail, 1.0 - tail])
    return PairedDifference(
        mean=float(differences.mean()),
        low=float(low),
        high=float(high),
        confidence=confidence,
        a_wins=float((differences > 0).mean()),
        b_wins=float((differences < 0).mean()),
        num_documents=len(differences),
    )
