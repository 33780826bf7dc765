"""The nearest-neighbour index of the ``knn`` variant on long inputs (Unlimiformer, Bertsch et al. 2023, Sec. 2.3):
one index over the encoder's output, shared by every decoder layer and head.

Unlimiformer keeps one index of the encoder's last hidden states ``h_j`` (``D = d_model`` numbers per token) and
rewrites a head's score ``Q_t . K_j = Q_t . (W_k h_j + b_k)`` as ``(W_k^T Q_t) . h_j + Q_t . b_k``: the second term is
the same for every ``j``, so the top keys of ``Q_t`` are the top inner products of the hidden-space query
``W_k^T Q_t`` with the ``h_j``. One index then serves every layer and head, and no layer keeps its projected keys
or values: a step projects only the ``K`` rows it retrieves (:class:`HeadProjection`). The alternative, one index
of projected keys per layer and head, was measured against it (``docs/long-inputs.md``, "Indexed knn") and costs
``layers x heads`` index builds and a copy of every layer's keys.

Two kinds of index, from faiss (``pip install 'srformer[index]'``, faiss-cpu):

* ``"flat"``: exhaustive inner-product search (``IndexFlatIP``): the exact top ``K`` up to float32 rounding of
  the scores; its cost per query is ``O(n·D)``.
* ``"ivf"``: an inverted file (``IndexIVFFlat``): k-means cells, a query scans the ``probes`` cells nearest to it.
  Approximate. Inner-product search is turned into nearest-neighbour search in ``D + 1`` dimensions (Bachrach
  et al. 2014, Speeding up the Xbox recommender system using a Euclidean transformation for inner-product
  spaces): ``h_j -> (h_j, sqrt(M^2 - |h_j|^2))``, ``q -> (q, 0)`` with ``M = max_j |h_j|``, so that
  ``|q' - h_j'|^2 = |q|^2 + M^2 - 2 q.h_j`` orders the keys exactly as ``q.h_j`` does; k-means in that space gives
  cells of even size, where k-means on the raw vectors with inner-product assignment lets a few large-norm
  centroids take most keys.

One index per distinct example of a batch: rows that repeat the previous example (``generate()``'s beams) share
it. Only real positions are added; the index returns encoder positions.
"""

from __future__ import annotations

import importlib
import importlib.util
import math
from dataclasses import dataclass
from typing import Any

import numpy as np
import torch

__all__ = ["INDEX_KINDS", "EncoderIndex", "build_encoder_index", "faiss_available", "require_faiss"]

#: The index kinds of ``knn_index``.
INDEX_KINDS = ("flat", "ivf")

_INSTALL = "pip install 'srformer[index]' (or pip install faiss-cpu)"


def faiss_available() -> bool:
    """Whether the faiss package can be imported (without importing it)."""
    try:
        return importlib.util.find_spec("faiss") is not None
    except (ImportError, ValueError):
        return False


def require_faiss() -> Any:
    """The ``faiss`` module.

    Raises:
        ImportError: naming the extra to install, when faiss is not installed.
    """
    try:
        return importlib.import_module("faiss")
    except ImportError as error:
        raise ImportError(
            f"knn_index='flat' or 'ivf' searches with faiss, which is not installed: {_INSTALL}, or set "
            "knn_index=None for the exact search in torch."
        ) from error


def default_lists(real: int) -> int:
    """IVF cells for ``real`` indexed keys when ``index_lists`` is None: ``round(sqrt(n))``, at least 1 (about
    ``sqrt(n)`` keys per cell, so that scanning the centroids and the probed cells cost alike)."""
    return max(1, round(math.sqrt(real)))


@dataclass(frozen=True)
class _ExampleIndex:
    """One example's index and the encoder position of each indexed row."""

    index: Any
    positions: np.ndarray  # (n,) int64
    augment: bool  # the IVF's extra dimension (queries get a 0 there)
    quantizer: Any = None  # kept referenced: faiss does not own a quantizer handed to it from Python


@dataclass(frozen=True)
class EncoderIndex:
    """The indexes of a batch's encoder output (:func:`build_encoder_index`), shared by the decoder layers.

    Attributes:
        examples: one entry per distinct example (None for an example without real positions).
        slot: (B,) long on the encoder output's device: the entry of each batch row.
        kind: ``"flat"`` or ``"ivf"``.
        probes: IVF cells scanned per query.
        nbytes: bytes held by the indexes (the stored vectors and the centroids).
    """

    examples: tuple[_ExampleIndex | None, ...]
    slot: torch.Tensor
    kind: str
    probes: int
    nbytes: int

    def search(self, hidden_queries: torch.Tensor, slot: torch.Tensor, top: int) -> tuple[torch.Tensor, torch.Tensor]:
        """The ``top`` encoder positions of largest ``hidden_queries . h_j``, per query.

        Args:
            hidden_queries: (B, n, D) queries in the encoder's hidden space (any float dtype; searched in float32).
            slot: (B,) long, the index entry of each row (the state's copy of :attr:`slot`, reordered with beams).
            top: positions per query (>= 1).

        Returns:
            ``(positions, found)``: (B, n, top) long encoder positions (ascending within a query, as the exact
            search returns them) and (B, n, top) bool, False where the index found fewer than ``top`` (fewer real
            keys, or fewer in the probed cells); a position where ``found`` is False is 0. On the queries' device.
        """
        batch, count, _ = hidden_queries.shape
        wanted = np.zeros((batch, count, top), dtype=np.int64)
        found = np.zeros((batch, count, top), dtype=bool)
        rows = hidden_queries.detach().to("cpu", torch.float32).numpy()
        for b, entry_id in enumerate(slot.tolist()):
            entry = self.examples[entry_id]
            if entry is None:
                continue
            query = np.ascontiguousarray(rows[b])
            if entry.augment:
                query = np.concatenate([query, np.zeros((count, 1), dtype=np.float32)], axis=1)
            _, labels = entry.index.search(query, top)
            hit = labels >= 0
            chosen = np.where(hit, entry.positions[np.where(hit, labels, 0)], np.iinfo(np.int64).max)
            order = np.argsort(chosen, axis=1, kind="stable")  # ascending positions, misses last
            chosen, hit = np.take_along_axis(chosen, order, 1), np.take_along_axis(hit, order, 1)
            wanted[b] = np.where(hit, chosen, 0)
            found[b] = hit
        device = hidden_queries.device
        return torch.from_numpy(wanted).to(device), torch.from_numpy(found).to(device)


def build_encoder_index(
    encoder_states: torch.Tensor, key_valid: torch.Tensor | None, kind: str, lists: int | None, probes: int,
) -> EncoderIndex:
    """Index the real rows of ``encoder_states`` for inner-product search (module docstring).

    Args:
        encoder_states: (B, k, D) the encoder output.
        key_valid: (B, k) bool, True at real positions, or None (all real).
        kind: ``"flat"`` or ``"ivf"``.
        lists: IVF cells (clamped to the example's real keys), or None for :func:`default_lists`.
        probes: IVF cells scanned per query (clamped to the cells).

    Returns:
        The :class:`EncoderIndex`.

    Raises:
        ImportError: without faiss (:func:`require_faiss`).
        ValueError: for an unknown ``kind``.
    """
    if kind not in INDEX_KINDS:
        raise ValueError(f"`knn_index` must be one of {INDEX_KINDS} or None, got {kind!r}.")
    faiss = require_faiss()
    batch, length, dim = encoder_states.shape
    valid = (
        torch.ones(batch, length, dtype=torch.bool) if key_valid is None else key_valid.detach().to("cpu", torch.bool)
    )
    states = encoder_states.detach()
    examples: list[_ExampleIndex | None] = []
    slots: list[int] = []
    nbytes = 0
    previous: tuple[torch.Tensor, torch.Tensor] | None = None
    for b in range(batch):
        real = valid[b]
        rows = states[b] if bool(real.all()) else states[b][real.to(states.device)]  # no copy when nothing is padded
        if previous is not None and torch.equal(previous[0], real) and torch.equal(previous[1], rows):
            slots.append(slots[-1])  # a beam (or a repeat) of the previous example
            continue
        previous = (real, rows)
        slots.append(len(examples))
        if rows.shape[0] == 0:
            examples.append(None)
            continue
        vectors = np.ascontiguousarray(rows.to("cpu", torch.float32).numpy())
        positions = real.nonzero().flatten().numpy().astype(np.int64)
        if kind == "flat":
            index = faiss.IndexFlatIP(dim)
            index.add(vectors)
            examples.append(_ExampleIndex(index, positions, False))
            nbytes += vectors.nbytes
            continue
        squared = np.einsum("ij,ij->i", vectors, vectors, dtype=np.float64)  # float64 sums, no float64 copy
        ceiling = float(squared.max())
        extra = np.sqrt(np.maximum(ceiling - squared, 0.0)).astype(np.float32)[:, None]
        augmented = np.ascontiguousarray(np.concatenate([vectors, extra], axis=1))
        cells = min(lists if lists is not None else default_lists(len(vectors)), len(vectors))
        quantizer = faiss.IndexFlatL2(dim + 1)
        index = faiss.IndexIVFFlat(quantizer, dim + 1, cells, faiss.METRIC_L2)
        index.cp.min_points_per_centroid = 1  # a small input trains few cells without faiss's warning
        index.train(augmented)
        index.add(augmented)
        index.nprobe = min(probes, cells)
        examples.append(_ExampleIndex(index, positions, True, quantizer))
        nbytes += augmented.nbytes + cells * (dim + 1) * 4
    return EncoderIndex(
        tuple(examples), torch.tensor(slots, dtype=torch.long, device=encoder_states.device), kind, probes, nbytes
    )

