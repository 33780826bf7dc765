"""Teacher-forced fidelity of a converted cross attention to full attention: a measure that does not depend on how
well the base model summarises.

Each mechanism is converted from the same base with no fine-tuning and fed each document with its reference summary
(teacher forcing: every decoder position sees the reference's prefix, whatever the model would have generated). Per
document and mechanism: the summed negative log-likelihood of the reference's tokens (nats) and their count, and at
how many positions the next-token argmax equals the reference mechanism's (``full``'s). Then, per mechanism
(:func:`fidelity_summary`):

- **perplexity**, ``exp(total NLL / total tokens)`` over the corpus, and its ratio to the reference's;
- **agreement**: the share of target positions whose argmax equals the reference's;
- paired bootstrap intervals over documents (:func:`~srformer.evaluation.statistics.paired_difference`) of each
  document's mean NLL per token minus the reference's, and of each document's agreement (against 1, the
  reference's own).

The parallel (teacher-forced) path of every mechanism reads what its generation step reads (``knn``'s index
layouts run their two-stage search there too), so these figures speak for generation's per-step choices.
"""

from __future__ import annotations

import math
from collections.abc import Iterable, Mapping, Sequence
from dataclasses import asdict, dataclass
from typing import Any

import torch
from torch.nn import functional as F

from srformer.evaluation.statistics import paired_difference

__all__ = ["DocumentFidelity", "fidelity_summary", "teacher_forced"]


@dataclass(frozen=True)
class DocumentFidelity:
    """One document under one mechanism, teacher-forced on its reference summary.

    Attributes:
        nll: summed negative log-likelihood of the reference's tokens, in nats.
        tokens: the reference's scored tokens (padding excluded).
        argmax: the next-token argmax at each scored position (token ids), in order.
    """

    nll: float
    tokens: int
    argmax: tuple[int, ...]

    def to_dict(self) -> dict[str, Any]:
        return {"nll": self.nll, "tokens": self.tokens, "argmax": list(self.argmax)}

    @classmethod
    def from_dict(cls, record: Mapping[str, Any]) -> DocumentFidelity:
        return cls(nll=float(record["nll"]), tokens=int(record["tokens"]), argmax=tuple(record["argmax"]))


@torch.no_grad()
def teacher_forced(model: Any, batches: Iterable[Mapping[str, torch.Tensor]]) -> list[DocumentFidelity]:
    """Score every document of ``batches`` under ``model``, teacher-forced.

    Args:
        model: a seq2seq model (converted or not) in eval mode.
        batches: dicts with ``input_ids`` and ``attention_mask`` (B, n) and ``labels`` (B, T), ``-100`` at padded
            target positions, on the model's device.

    Returns:
        One :class:`DocumentFidelity` per document, in order.

    Raises:
        ValueError: for a batch without ``labels``.
    """
    scored: list[DocumentFidelity] = []
    for batch in batches:
        if "labels" not in batch:
            raise ValueError("Each batch needs `labels` (the reference summaries' token ids, -100 at padding).")
        labels = batch["labels"]
        logits = model(**batch).logits.float()  # (B, T, V)
        nll = F.cross_entropy(logits.transpose(1, 2), labels.clamp_min(0), reduction="none")  # (B, T)
        kept = labels != -100
        argmax = logits.argmax(dim=-1)
        for row in range(labels.shape[0]):
            mask = kept[row]
            scored.append(DocumentFidelity(nll=float(nll[row][mask].sum()), tokens=int(mask.sum()),
                                           argmax=tuple(argmax[row][mask].tolist())))
    return scored


def _matches(document: DocumentFidelity, reference: DocumentFidelity) -> int:
    """Positions whose argmax equals the reference's."""
    if document.tokens != reference.tokens:
        raise ValueError(f"A document has {document.tokens} scored tokens under one mechanism and "
                         f"{reference.tokens} under the reference: score both on the same features.")
    return sum(a == b for a, b in zip(document.argmax, reference.argmax, strict=True))


def _perplexity(documents: Sequence[DocumentFidelity]) -> float:
    return math.exp(sum(document.nll for document in documents) / sum(document.tokens for document in documents))


def _nll_per_token(documents: Sequence[DocumentFidelity]) -> list[float]:
    return [document.nll / max(document.tokens, 1) for document in documents]


def fidelity_summary(
    scores: Mapping[str, Sequence[DocumentFidelity]], reference: str = "full", *, seed: int = 0,
    n_samples: int = 2000,
) -> dict[str, dict[str, Any]]:
    """Per mechanism: perplexity, its ratio to the reference's, agreement with the reference's argmax, and paired
    intervals over documents (module docstring).

    Args:
        scores: mechanism name -> one :class:`DocumentFidelity` per document, the same documents in the same order
            for every mechanism.
        reference: the mechanism the others are compared with (its row compares it with itself).
        seed, n_samples: of the paired bootstrap.

    Returns:
        name -> ``perplexity``, ``perplexity_ratio`` (to the reference's), ``agreement`` (share of positions),
        ``nll_per_token_minus_reference`` and ``agreement_minus_reference`` (each a paired difference's dict: mean,
        low, high, ...), ``documents``, ``tokens``.

    Raises:
        ValueError: without the reference, for mechanisms scored on different numbers of documents or tokens, or
            for documents without a scored token.
    """
    if reference not in scores:
        raise ValueError(f"The reference {reference!r} was not scored; scored: {sorted(scores)}.")
    base = scores[reference]
    if not base or not sum(document.tokens for document in base):
        raise ValueError("No scored target token: give documents with non-empty reference summaries.")
    base_perplexity, base_per_token = _perplexity(base), _nll_per_token(base)
    summary: dict[str, dict[str, Any]] = {}
    for name, documents in scores.items():
        if len(documents) != len(base):
            raise ValueError(f"{name!r} has {len(documents)} documents, the reference {len(base)}.")
        matches = [_matches(document, other) for document, other in zip(documents, base, strict=True)]
        agreements = [m / d.tokens if d.tokens else 1.0 for m, d in zip(matches, documents, strict=True)]
        tokens = sum(document.tokens for document in documents)
        perplexity = _perplexity(documents)
        summary[name] = {
            "perplexity": perplexity,
            "perplexity_ratio": perplexity / base_perplexity,
            "agreement": sum(matches) / tokens,
            "nll_per_token_minus_reference": asdict(paired_difference(_nll_per_token(documents), base_per_token,
                                                                      seed=seed, n_samples=n_samples)),
            "agreement_minus_reference": asdict(paired_difference(agreements, [1.0] * len(agreements), seed=seed,
                                                                  n_samples=n_samples)),
            "documents": len(documents),
            "tokens": tokens,
        }
    return summary
