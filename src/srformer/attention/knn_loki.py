"""``knn`` searching low-rank keys first (``knn_index="loki"``): Unlimiformer's top-``K`` attention (Bertsch et al.
2023, Sec. 2) found by a two-stage search: approximate scores in each head's principal basis (Loki: Low-rank Keys for
Efficient Sparse Attention, Singhania et al. 2024, Sec. 3-4), over the few channels the query weighs most (SparQ
Attention, Ribar et al. 2024, Sec. 3), then exact scores of a few candidates.

The encoder output does not change while the decoder runs, so each layer's keys are known once. At the build, per
head: the eigenvectors ``v_i`` and eigenvalues ``λ_i`` of the real keys' centred covariance, the ``m = min(d, 2r)``
of largest variance kept (``r = index_rank``), and every key in that basis, ``c_ji = v_i . K_j`` (kept in bfloat16:
float64 for a float64 encoder output). A decoder step then, per head:

1. rotates the query, ``x_i = v_i . Q_t``, and keeps the ``r`` channels of largest ``|x_i| sqrt(λ_i)`` (the
   largest expected contributions ``|x_i c_ji|``, SparQ's choice in Loki's basis); scores every key on those
   channels, ``sum_i x_i c_ji``: ``Q_t . K_j`` up to the other channels' terms and a term the same for every ``j``
   (the keys' mean); takes the ``C = index_candidates`` best as candidates (padding last);
2. scores the candidates exactly through the encoder output's rows (``(W_k^T Q_t) . h_j``, as ``knn_index="rows"``,
   :mod:`srformer.attention.knn_rows`), and takes the top ``K = top_keys`` of them (ties to the earlier position);
3. takes the softmax over those ``K`` rows' keys and values in the absorbed form (Unlimiformer Sec. 2.3: the
   softmax of the exact scores mixes the rows ``h_j``, then ``W_v`` projects the mix), the logits being the exact
   scores the second stage ranked (:func:`~srformer.attention.selection.ranked_scores`) and the rows those it read.

* **Layout**: the channels are kept twice, ``c_ji / s_i`` and ``-c_ji / s_i`` (``s_i = sqrt(λ_i)``, floored at
  ``10^-3`` of the largest), and the query map twice, ``v_i s_i`` and ``-v_i s_i``: the ``r`` largest of the
  ``2m`` mapped query components are the ``r`` channels of largest ``|x_i| s_i``, each with the sign that makes its
  value positive, so one ``topk`` gives the channels, their query values, and the rows of keys to read, whose
  products are ``x_i c_ji``. The same map holds each head's ``W_k`` (``d x D``) times the attention scale, so one
  batched product gives the mapped query and ``scale · W_k^T Q_t``. A padded position's channels are ``-2^64``: it
  scores last.
* **Exactness**: with ``C >= k`` every position is a candidate and the step is the exact search's (``knn``); with
  ``r >= m = d`` the first stage scores every key exactly up to rounding. Otherwise the keys read are the exact top
  ``K`` whenever those are among the candidates (what the recall measurements check). The float64 reference is
  :func:`srformer.attention.naive.content.knn_attention` with ``knn_index="loki"``; the parallel path (training,
  teacher forcing) runs the same two stages (:func:`loki_positions`).
* **Reads per step and layer**: ``H·r·k`` bfloat16 numbers (2 bytes each) and ``H·C`` encoder rows of ``D`` (off
  the CPU also the ``H·K`` chosen rows again, for the mix), against full attention's ``2·H·k·d`` keys and values.
* **State**: per layer the ``2m`` channels ((B·H·2m, k), bfloat16), the query map ((B·H, d, 2m + D)), each
  example's ``W_v`` ((B·H, D, d)), and ``knn_index="rows"``'s order keys and mask (12 bytes per position); the
  encoder output is held, not copied.
* **Build**: one projection of the keys per layer (``k·D·D`` multiply-adds, half of full attention's cache fill),
  their covariance, one ``eigh`` of ``d x d`` per head (on CUDA ``torch.linalg.eigh`` synchronises with the host
  once per layer), the channels.
* **Step**: a fixed sequence of operator calls whatever ``k`` (21 per layer off the CPU, views included; 24 with
  pages, 26 with pages and ``index_key_rank`` other than ``r``: the two slices of the bounds' channels), no host
  sync, one graph under ``torch.compile``. Off the CPU the candidates' rows are scored and the chosen
  ones mixed where they lie, by fused operators (:mod:`srformer.attention.gathered`, a Triton kernel each on CUDA):
  the encoder output's rows picked are read, never copied. On the CPU the candidates' rows are copied once by an
  ``index_select`` of the flattened rows (about 6x faster there than advanced indexing) and scored and mixed from
  that copy.
"""

from __future__ import annotations

from collections.abc import Callable
from dataclasses import dataclass, replace
from typing import ClassVar, NamedTuple, Self

import torch
from torch.nn import functional as F

from srformer.attention.gathered import gathered_mix, gathered_scores
from srformer.attention.key_clusters import cluster_keys, cluster_sums, heads_side_by_side
from srformer.attention.knn_rows import RowsKNNState, rows_state
from srformer.attention.loki_pages import (
    keys_in_best_pages,
    page_order,
    page_tables,
    paged_candidates,
    paged_pool,
    read_page_candidates,
)
from srformer.attention.projection import HeadProjection
from srformer.attention.schedule import tracing
from srformer.attention.segmented import cast
from srformer.attention.selection import grouped_topk, ranked_scores, top_positions
from srformer.attention.state import accumulation_dtype, extend
from srformer.attention.step_choice import step_kind

__all__ = [
    "LOKI_INDEX", "LokiKNNState", "LokiStepIndices", "loki_basis", "loki_indices", "loki_positions", "loki_state",
    "loki_step", "step_pool", "stored_channels",
]

#: The ``knn_index`` value of this layout.
LOKI_INDEX = "loki"
#: The channels' dtype for an encoder output of any dtype but float64 (float64 keeps float64).
LOW_RANK_DTYPE = torch.bfloat16
#: A padded position's value in every channel, ``-2^64``: below every real score (bfloat16 has float32's range).
_PADDING_VALUE = -(2.0**64)
#: The floor of a channel's scale ``sqrt(λ_i)``, relative to the largest: keeps ``c_ji / s_i`` finite.
_SCALE_FLOOR = 1e-3


def stored_channels(rank: int, head_dim: int) -> int:
    """``m = min(d, 2r)``: the principal channels kept per head, of which a step reads ``r``."""
    return min(head_dim, 2 * rank)


@dataclass(kw_only=True)
class LokiKNNState(RowsKNNState):
    """:class:`~srformer.attention.knn_rows.RowsKNNState` plus the channels and the query map (module docstring).
    B = batch (times beams), H = heads, k = padded encoder length, d = head_dim, D = d_model, m = stored channels.

    :attr:`channels` and :attr:`query_map` hold examples and heads on their first axis, the layout of the step's
    batched calls (no reshape per step); :meth:`map_batch` maps them per example, as every other field.

    Attributes:
        channels: (B·H·2m, k) in :data:`LOW_RANK_DTYPE` (float64 for a float64 encoder output): per example and
            head, ``c_ji / s_i`` then ``-c_ji / s_i``; ``-2^64`` at padded positions.
        query_map: (B·H, d, 2m + D) float32 (float64 for a float64 encoder output): ``v_i s_i``, ``-v_i s_i``, then
            the head's ``W_k`` (d x D) times the model's attention scale (so that the exact scores come out scaled).
        flat_order: (B, k) float64, :attr:`rank_order` without its middle axis (a view), indexed by the step.
        value_weight: (B·H, D, d) each example's ``W_v`` times its ``has_keys`` factor, transposed (the right
            operand of the step's batched product), and ``value_bias`` (B, H, 1, d) or None (no value bias) the same
            of ``b_v`` (:meth:`~srformer.attention.projection.HeadProjection.example_values`): an example without
            real keys outputs 0 with no call of its own.
        paged, slot_position: None without pages (``index_page`` None). With pages of ``b`` keys
            (:mod:`srformer.attention.loki_pages`), :attr:`channels` holds each page's largest values instead,
            (B·H, 2m, n, 1) for ``n = ceil(k / b)`` pages, and these hold (B·H, n, 2m, b) the channels in page order,
            each page's channels one block (page-major), and (B·H, n, b) long each slot's encoder position
            (:func:`~srformer.attention.loki_pages.page_tables`).
        cluster_of, cluster_row_sums, cluster_counts: None without ``tail_clusters``. With ``C`` clusters shared by
            the layer's heads (:mod:`srformer.attention.key_clusters`): (B, k) long each position's cluster (0 at
            padding), (B, C, D) each cluster's sum of encoder rows (float32 or wider; 0 for an empty cluster) and
            (B, H, C) its number of keys (the same in every head), in that dtype.
        scale: the attention scale the query map holds (a step with another scale refuses the state).
    """

    channels: torch.Tensor
    query_map: torch.Tensor
    flat_order: torch.Tensor
    value_weight: torch.Tensor
    value_bias: torch.Tensor | None
    paged: torch.Tensor | None = None
    slot_position: torch.Tensor | None = None
    cluster_of: torch.Tensor | None = None
    cluster_row_sums: torch.Tensor | None = None
    cluster_counts: torch.Tensor | None = None
    scale: float = 1.0

    #: The fields whose first axis holds examples and heads (B·H, or B·H·2m for :attr:`channels` without pages).
    _per_head: ClassVar[tuple[str, ...]] = ("channels", "query_map", "value_weight", "paged", "slot_position")

    is_lean: ClassVar[bool] = True
    reads_encoder_rows: ClassVar[bool] = True

    @property
    def signed_channels(self) -> int:
        """``2m``: the channels kept per head, each with both signs (the query map's columns before ``W_k``'s)."""
        return self.query_map.shape[-1] - self.rows.shape[-1]

    @property
    def pages(self) -> int:
        """``n``, the pages per head (0 without pages)."""
        return 0 if self.paged is None else self.paged.shape[1]

    def channels_read(self, rank: int) -> int:
        """The channels a step reads for ``index_rank = rank``: ``r``, at most the ``m`` kept."""
        return min(rank, self.signed_channels // 2)

    def nbytes(self) -> int:
        """Bytes of the state's own tensors: every field but the encoder output and :attr:`flat_order` (a view of
        :attr:`rank_order`)."""
        return super().nbytes() - self.flat_order.numel() * self.flat_order.element_size()

    def map_batch(self, fn: Callable[[torch.Tensor], torch.Tensor]) -> Self:
        """``fn`` applied per example: the two (B·H)-first fields seen as (B, H, ...) for it, :attr:`flat_order`
        made again as a view of the mapped :attr:`rank_order`."""
        batch = self.lengths.shape[0]
        unflat = {name: getattr(self, name).unflatten(0, (batch, -1)) for name in self._per_head
                  if getattr(self, name) is not None}
        mapped = super(LokiKNNState, replace(self, flat_order=self.lengths, **unflat)).map_batch(fn)
        flat = {name: getattr(mapped, name).flatten(0, 1) for name in unflat}
        return replace(mapped, flat_order=mapped.rank_order.flatten(1), **flat)


def loki_basis(
    keys: torch.Tensor, key_valid: torch.Tensor | None, channels: int
) -> tuple[torch.Tensor, torch.Tensor]:
    """Each head's principal directions of its real keys and their scales: eigenvectors of the keys' centred
    covariance, the ``channels`` of largest eigenvalue.

    Args:
        keys: (B, H, k, d) float32 or float64; values at padded positions are ignored.
        key_valid: (B, k) bool, True at real positions, or None (all real).
        channels: ``m``, ``1 <= m <= d``.

    Returns:
        ``(vectors, scales)``: (B, H, d, m) orthonormal columns, the largest variance last, each with its largest
        component positive, and (B, H, m) the
        square roots of their eigenvalues (the spread of the keys along each), floored at ``10^-3`` of the largest
        (and above 0), in ``keys``' dtype. An example without real keys gets the eigenvectors of a zero matrix.
    """
    batch, _, length, d = keys.shape
    if key_valid is None:
        weights = torch.ones(batch, 1, length, 1, dtype=keys.dtype, device=keys.device)  # not keys.new_ones:
        # the same call, which a byte count would take for a read of the keys
    else:
        weights = key_valid.to(device=keys.device, dtype=keys.dtype).view(batch, 1, length, 1)
    real = keys * weights
    count = weights.sum(dim=2, keepdim=True).clamp_min(1.0)  # (B, 1, 1, 1)
    mean = real.sum(dim=2, keepdim=True) / count  # (B, H, 1, d)
    covariance = real.mT @ real - count * (mean.mT @ mean)  # (B, H, d, d), the centred sum of squares
    values, vectors = torch.linalg.eigh(covariance)  # ascending eigenvalues
    spread = values[..., d - channels:].clamp_min(0.0).sqrt()
    floor = (spread[..., -1:] * _SCALE_FLOOR).clamp_min(torch.finfo(keys.dtype).tiny)
    kept = vectors[..., d - channels:]
    # an eigenvector's sign is free: make its largest component positive, so that the page order (which reads the
    # channels' signs) is the same whatever sign the solver returns
    sign = kept.gather(-2, kept.abs().argmax(dim=-2, keepdim=True)).sign()
    return kept * sign, torch.maximum(spread, floor)


def loki_state(
    encoder_states: torch.Tensor, key_valid: torch.Tensor | None, projection: HeadProjection, rank: int,
    page: int | None = None, clusters: int | None = None, *, scale: float,
) -> LokiKNNState:
    """The state of one layer (module docstring). The keys are projected once, in float32 or wider, and dropped.

    Args:
        encoder_states: (B, k, D) the encoder output.
        key_valid: (B, k) bool, True at real positions, or None when nothing is padded.
        projection: the layer's key/value projections per head.
        rank: ``r = index_rank``, the channels a step reads.
        page: ``b = index_page``, keys per page (:mod:`srformer.attention.loki_pages`: one sort of the keys per
            head more), or None: no pages, the first stage scores every key.
        clusters: ``tail_clusters`` (:mod:`srformer.attention.key_clusters`), or None.
        scale: the model's attention scale, kept in the query map (:attr:`LokiKNNState.query_map`).

    Raises:
        ValueError: for more than ``2^25`` encoder positions (what the order keys keep apart).
    """
    base = rows_state(encoder_states, key_valid, projection)
    wide = accumulation_dtype(encoder_states.dtype)
    low = torch.float64 if wide == torch.float64 else LOW_RANK_DTYPE
    with torch.no_grad(), torch.autocast(device_type=encoder_states.device.type, enabled=False):
        keys = cast(projection.keys(encoder_states), wide)  # (B, H, k, d)
        batch, heads, length, d = keys.shape
        vectors, scales = loki_basis(keys, key_valid, stored_channels(rank, d))  # (B, H, d, m), (B, H, m)
        projected = keys @ vectors  # (B, H, k, m): the keys on the kept directions (the clusters' points too)
        optional: dict[str, torch.Tensor | None] = {}  # the clusters' and pages' fields
        if clusters is not None:
            optional.update(_cluster_fields(encoder_states, projected, key_valid, clusters, wide))
        rotated = projected / scales[:, :, None, :]
        del projected  # not held through the rest of the build
        padded = None if key_valid is None else ~key_valid.to(device=keys.device, dtype=torch.bool)[:, None, :]
        if page is not None:  # the keys in page order: padded positions last
            order = page_order(rotated.mT, key_valid)  # (B, H, k)
            example = torch.arange(batch, device=keys.device).view(batch, 1, 1)
            head = torch.arange(heads, device=keys.device).view(1, heads, 1)
            rotated = rotated[example, head, order]
            padded = None if padded is None else padded.expand(-1, heads, -1).gather(-1, order)  # (B, H, k)
        mapped = vectors * scales[:, :, None, :]
        key_weight = cast(projection.key_weight, wide).expand(batch, -1, -1, -1) * scale  # (B, H, d, D)
        query_map = torch.cat([mapped, -mapped, key_weight], dim=-1)
        value_weight, value_bias = base.projection.example_values(base.has_keys)
        value_weight = value_weight.flatten(0, 1).mT.contiguous()  # (B·H, D, d)
        if page is not None:
            paged, channels, slot_position = page_tables(rotated, padded, order, page, low, _PADDING_VALUE)
            optional.update({"paged": paged, "slot_position": slot_position})
        else:
            channels = cast(torch.cat([rotated.mT, -rotated.mT], dim=2), low)  # (B, H, 2m, k)
            if padded is not None:
                channels.masked_fill_(padded[:, :, None, :], _PADDING_VALUE)
            channels = channels.flatten(0, -2)
    return extend(LokiKNNState, base, channels=channels,
                  query_map=query_map.flatten(0, 1), flat_order=base.rank_order.view(batch, length),
                  value_weight=value_weight, value_bias=value_bias, scale=scale, **optional)


def _cluster_fields(encoder_states: torch.Tensor, projected: torch.Tensor, key_valid: torch.Tensor | None,
                    clusters: int, wide: torch.dtype) -> dict[str, torch.Tensor]:
    """:class:`LokiKNNState`'s cluster fields, per example (the heads share them): each position's cluster (0 at
    padding), each cluster's sum of encoder rows and its count. projected: (B, H, k, m) the keys on the kept
    principal directions."""
    assigned = cluster_keys(heads_side_by_side(projected), key_valid, clusters)  # (B, 1, k), C at padding
    sums, counts = cluster_sums(cast(encoder_states, wide), assigned, clusters)  # (B, 1, C, D), (B, 1, C)
    heads = projected.shape[1]  # the counts once per head: a step takes each head's reads from its own copy
    position_cluster = assigned.squeeze(1)
    return {"cluster_of": position_cluster.masked_fill(position_cluster == clusters, 0),
            "cluster_row_sums": sums.squeeze(1), "cluster_counts": counts.expand(-1, heads, -1).contiguous()}


class LokiStepIndices(NamedTuple):
    """The constant index tensors of :func:`loki_step`, made once per shape and device by the caller
    (:func:`loki_indices`). B·H = examples times heads, 2m = signed channels, r = channels read.

    Attributes:
        flat: (B·H, 1) long, ``2m · arange(B·H)``: the first channel row of each example and head.
        example: (B·H, 1) long, each example and head's example.
        heads: (B·H, 1) long, ``arange(B·H)``.
        bags: (B·H,) long, ``r · arange(B·H)``: where each example and head's channels start.
        page_bags: (B·H·min(P, n),) long, ``r' · arange(B·H·min(P, n))`` for the ``r'`` channels the keys of the
            pages read are scored on (empty without pages).
        page_flat: (B·H, 1) long, ``2m · n · arange(B·H)``: the first row of each example and head's pages in the
            page-major channels flattened to (B·H·n·2m, b) (0 without pages).
    """

    flat: torch.Tensor
    example: torch.Tensor
    heads: torch.Tensor
    bags: torch.Tensor
    page_bags: torch.Tensor
    page_flat: torch.Tensor


def step_pool(state: LokiKNNState, candidates: int, pages: int | None) -> int:
    """``C'``, the candidates a step scores exactly: ``min(C, k)``, or with pages
    :func:`~srformer.attention.loki_pages.paged_pool`.

    Raises:
        ValueError: for a state with pages and no ``pages``.
    """
    length = state.rows.shape[1]
    if state.paged is None:
        return min(candidates, length)
    if pages is None or state.slot_position is None:
        raise ValueError("A knn state with pages needs `pages` (and its slots' positions).")
    return paged_pool(candidates, pages, state.paged.shape[-1], length)


def loki_indices(batch: int, heads: int, doubled: int, rank: int, read: int, device: torch.device,
                 key_rank: int | None = None, pages: int = 0) -> LokiStepIndices:
    """:class:`LokiStepIndices` for ``batch`` examples of ``heads`` heads, ``2m = doubled`` signed channels,
    ``r = rank`` read, ``read = min(P, n)`` pages read (0 without pages), ``r' = key_rank`` channels the keys of
    the pages read are scored on (None: ``r``) and ``n = pages`` pages per head (0 without pages)."""
    count = batch * heads
    every = torch.arange(count, device=device).view(count, 1)
    key_rank = rank if key_rank is None else key_rank
    return LokiStepIndices(
        flat=every * doubled, example=every.div(heads, rounding_mode="floor"), heads=every,
        bags=every.view(count) * rank, page_bags=torch.arange(count * read, device=device) * key_rank,
        page_flat=every * (doubled * pages),
    )


def loki_step(
    queries: torch.Tensor, state: LokiKNNState, top_keys: int, rank: int, candidates: int, scale: float,
    indices: LokiStepIndices, pages: int | None = None, key_rank: int | None = None,
) -> torch.Tensor:
    """One decoder position (module docstring): the ``r`` channels the query weighs most, the ``min(C, k)``
    candidates of best score on them per head, the ``min(K, C, k)`` of those of best exact score (ties to the earlier
    position, padding last), the softmax over their keys and values. No host sync.

    - The first stage: without pages, one ``embedding_bag`` (the ``r`` channels' rows weighted by the query's
      values and summed, without a copy of the rows) in the channels' dtype. With pages, on the CPU two
      ``embedding_bag`` calls (:func:`~srformer.attention.loki_pages.paged_candidates`), elsewhere two fused
      channel sums (:func:`~srformer.attention.loki_pages.read_page_candidates`).
    - The second stage, in float32 or wider: the candidates' rows scored exactly (the query map holds
      ``scale · W_k``), ranked by order key (:func:`~srformer.attention.selection.ranked_scores`, whose keys give the
      chosen scores back as logits, ``-inf`` at padding), the softmax of those logits mixing the chosen rows (no
      padding mask read), and ``W_v`` (one batched product). Off the CPU the rows are scored and mixed by the fused
      operators of :mod:`srformer.attention.gathered`, which read the rows they pick and copy nothing: 24 operator
      calls per layer with pages (26 with a ``key_rank`` other than ``r``), 21 without (views included; one more
      with a value bias). On the CPU the
      candidates' rows are copied once (``index_select``) and scored and mixed from the copy. The tail
      (``tail_clusters``) adds its own calls.

    Args:
        queries: (B, H, 1, d) projected decoder query.
        state: from :func:`loki_state`, built with the same ``scale``.
        top_keys: ``K``.
        rank: ``r`` (at most the ``m`` channels kept).
        candidates: ``C``.
        scale: the model's attention scale, the state's (its query map holds it).
        indices: from :func:`loki_indices` (kept by the caller).
        pages: ``P = index_pages``, for a state with pages (:mod:`srformer.attention.loki_pages`): the first
            stage reads the channels of the ``P`` pages of best bound only.
        key_rank: ``r' = index_key_rank``, with pages: the channels (the query's largest, at most the ``m`` kept)
            the keys of the pages read are scored on; the bounds take the ``r`` largest of them. None: ``r``.
            ``indices`` must be made with the same ``r'``.

    Returns:
        (B, H, 1, d) in the queries' dtype.

    Raises:
        ValueError: for a state with pages and no ``pages``; for a state built with another ``scale``.
    """
    if scale != state.scale:
        raise ValueError(f"This knn state holds the attention scale {state.scale} in its query map, but the step was "
                         f"given `scale`={scale}: build the state with `loki_state(..., scale={scale})`.")
    on_cpu = step_kind(queries.device) == "cpu" and not tracing() and state.rows.is_contiguous()
    count = queries.shape[0] * queries.shape[1]
    doubled, rank = state.signed_channels, state.channels_read(rank)
    key_rank = rank if key_rank is None or state.paged is None else state.channels_read(key_rank)
    pool = step_pool(state, candidates, pages)
    width = min(top_keys, pool)  # pool <= k either way
    wide = state.query_map.dtype
    with torch.no_grad(), torch.autocast(device_type=queries.device.type, enabled=False):
        # one product: the mapped query (2m) and scale · W_k^T Q_t (D), per example and head
        mapped = torch.bmm(cast(queries, wide).view(count, 1, -1), state.query_map).view(count, -1)
        signed, hidden_queries = mapped.split([doubled, mapped.shape[-1] - doubled], dim=-1)  # (B·H, ·)
        # the r channels (r' for the keys of the pages read, the r largest first), each signed positive: (B·H, ·)
        top = torch.topk(signed, max(rank, key_rank), dim=-1, sorted=key_rank != rank)
        weights = cast(top.values, state.channels.dtype)
        channels = _Channels(top.indices, weights, rank, key_rank)
        if on_cpu:
            pooled, flat, hidden, scores = _cpu_candidates(state, channels, hidden_queries, indices, pages, pool)
            order = torch.take(state.flat_order, flat).view(count, pool)  # (B·H, C)
        else:
            pooled = _fused_candidates(state, channels, indices, pages, pool)
            hidden, scores = None, gathered_scores(state.rows, pooled, hidden_queries)  # (B·H, C)
            order = state.flat_order[indices.example, pooled]  # (B·H, C)
        logits, chosen = ranked_scores(scores, order, width)  # (B·H, S): the chosen scores, -inf at padding
    # where taken: the chosen positions (B·H, S) and rows (B·H, S, D); on the CPU their places in the copy (B·H, S)
    positions = read = copied = None
    if torch.is_grad_enabled():  # the selection carries no gradient; the softmax over the chosen rows does
        positions, read, logits, hidden_queries = _read_with_gradient(queries, state, pooled, chosen, indices)
    elif hidden is not None:  # the CPU: the chosen rows' places in the candidates' copy, (B·H, S)
        copied = torch.add(chosen, indices.heads, alpha=pool)

    def mix(weighting: torch.Tensor) -> torch.Tensor:  # (B·H, S) -> (B·H, 1, D), the chosen rows weighted
        if read is not None:
            return torch.bmm(weighting[:, None, :], read)
        if hidden is not None and copied is not None:  # weighted and summed from the copy by one embedding_bag
            return F.embedding_bag(copied, hidden.view(-1, hidden.shape[-1]), per_sample_weights=weighting,
                                   mode="sum").view(count, 1, -1)
        return gathered_mix(state.rows, pooled, chosen, weighting)  # read where they are

    with torch.autocast(device_type=queries.device.type, enabled=False):
        if _has_tail(state):
            positions = pooled.gather(-1, chosen) if positions is None else positions
            mixed = _tail_mix(hidden_queries, logits, positions, indices.example, state, mix)
        else:
            mixed = mix(torch.softmax(logits, dim=-1))  # (B·H, 1, D)
        batch, heads = queries.shape[:2]
        output = torch.bmm(mixed, state.value_weight).view(batch, heads, 1, -1)  # (B, H, 1, d)
    output = output if state.value_bias is None else output + state.value_bias
    return cast(output, queries.dtype)


class _Channels(NamedTuple):
    """The query's signed channels a step reads: (B·H, max(r, r')) long ``indices`` and their ``weights``, the
    largest first where ``r != r'``. The bounds (every key without pages) read the first ``rank = r``, the keys of
    the pages read the first ``key_rank = r'`` (:meth:`first`)."""

    indices: torch.Tensor
    weights: torch.Tensor
    rank: int
    key_rank: int

    @staticmethod
    def first(tensor: torch.Tensor, width: int) -> torch.Tensor:
        """``tensor``'s first ``width`` columns: the tensor itself where it has no more (no slice call)."""
        return tensor if tensor.shape[1] == width else tensor[:, :width]


def _cpu_candidates(
    state: LokiKNNState, channels: _Channels, hidden_queries: torch.Tensor, indices: LokiStepIndices,
    pages: int | None, pool: int,
) -> tuple[torch.Tensor, torch.Tensor, torch.Tensor, torch.Tensor]:
    """The CPU's candidates: ``(positions (B·H, C), their places in the flattened (B·k) encoder output (B·H·C,),
    their rows copied (B·H, C, D), their exact scores (B·H, C))``. The first stage by ``embedding_bag``; the rows by
    ``index_select`` of the flattened encoder output, which copies them about 6x faster there than advanced indexing
    (0.19 against 1.2-1.7 ms for 2,048 rows of 512 at 16k-65k positions, one thread); the scores by one batched
    product with the query as its one row: with the query as its one column (``n = 1``) a CPU's ``bmm`` took 1.6-1.7
    against 0.16-0.2 ms for these 2,048 rows (one thread)."""
    rows = state.rows
    count, length = channels.indices.shape[0], rows.shape[1]
    if state.paged is not None and pages is not None and state.slot_position is not None:
        first = channels.first
        slots = paged_candidates(first(channels.indices, channels.rank) + indices.flat,
                                 first(channels.weights, channels.rank), state.paged, state.channels, pages, pool,
                                 indices.bags, indices.page_bags, first(channels.indices, channels.key_rank)
                                 + indices.page_flat, first(channels.weights, channels.key_rank))  # (B·H, C)
        pooled = state.slot_position.view(count, -1).gather(1, slots)
    else:
        pooled = _rough_candidates(channels.indices, channels.weights, state.channels, indices, pool, grouped=True)
    flat = (pooled + indices.example * length).view(-1)
    hidden = cast(rows.view(-1, rows.shape[-1]).index_select(0, flat).view(count, pool, -1),
                  state.query_map.dtype)  # (B·H, C, D)
    return pooled, flat, hidden, torch.bmm(hidden_queries[:, None, :], hidden.mT).view(count, pool)


def _fused_candidates(state: LokiKNNState, channels: _Channels, indices: LokiStepIndices, pages: int | None,
                      pool: int) -> torch.Tensor:
    """The candidates off the CPU: (B·H, C) positions, through pages by fused channel sums."""
    if state.paged is not None and pages is not None and state.slot_position is not None:
        first = channels.first
        return read_page_candidates(first(channels.indices, channels.rank), first(channels.weights, channels.rank),
                                    state.paged, state.channels, state.slot_position, pages, pool, indices.heads,
                                    first(channels.indices, channels.key_rank),
                                    first(channels.weights, channels.key_rank))
    return _rough_candidates(channels.indices, channels.weights, state.channels, indices, pool)


def _rough_candidates(channels: torch.Tensor, weights: torch.Tensor, table: torch.Tensor, indices: LokiStepIndices,
                      pool: int, grouped: bool = False) -> torch.Tensor:
    """The first stage without pages: one ``embedding_bag`` (the ``r`` channels' rows of ``table`` weighted by the
    query's values and summed, without a copy of the rows), then the ``pool`` best: (B·H, C) long positions. On the
    CPU (``grouped``) the best through :func:`~srformer.attention.selection.grouped_topk`, whose groups a long input
    needs there; elsewhere one ``topk``."""
    rough = F.embedding_bag((channels + indices.flat).view(-1), table, indices.bags,
                            per_sample_weights=weights.view(-1), mode="sum")
    return grouped_topk(rough, pool) if grouped else torch.topk(rough, pool, dim=-1, sorted=False).indices


def _read_with_gradient(
    queries: torch.Tensor, state: LokiKNNState, pooled: torch.Tensor, chosen: torch.Tensor, indices: LokiStepIndices,
) -> tuple[torch.Tensor, torch.Tensor, torch.Tensor, torch.Tensor]:
    """A step that records gradients: the chosen rows read again, with gradient, and their logits (the lowest
    number at padding): ``(positions (B·H, S), rows (B·H, S, D), logits (B·H, S), scale · W_k^T Q_t (B·H, D))``."""
    count, width = chosen.shape
    wide = state.query_map.dtype
    positions = pooled.gather(-1, chosen)
    picked = cast(state.rows[indices.example, positions], wide)
    bias = cast(state.key_bias[indices.example, positions], wide).view(count, 1, width)
    hidden_queries = state.projection.step_hidden_queries(queries, wide).view(count, 1, -1) * state.scale
    logits = torch.baddbmm(bias, hidden_queries, picked.mT).view(count, width)
    return positions, picked, logits, hidden_queries.view(count, -1)


def _has_tail(state: LokiKNNState) -> bool:
    return state.cluster_row_sums is not None and state.cluster_of is not None and state.cluster_counts is not None


def _tail_mix(hidden_queries: torch.Tensor, logits: torch.Tensor, positions: torch.Tensor, example: torch.Tensor,
              state: LokiKNNState, mix: Callable[[torch.Tensor], torch.Tensor]) -> torch.Tensor:
    """:func:`loki_step`'s mixed row with ``tail_clusters``: the softmax over the rows read plus the clusters'
    estimate of the keys not read, in the absorbed form (the rows mixed; the caller applies ``W_v``): the arithmetic
    of :func:`~srformer.attention.key_clusters.tail_weights` and :func:`~srformer.attention.key_clusters.tail_mix`
    in fewer calls (batched products; an unread key scored at the mean of its cluster's unread keys). The clusters'
    sums of rows are read once for all heads: one product per example gives every head's cluster scores, one more
    every head's clusters' share of the mixed row.

    Args:
        hidden_queries: (B·H, D) ``scale · W_k^T Q_t``. logits: (B·H, S) the read rows' scores (scaled), ``-inf``
            at padding. positions: (B·H, S) their encoder positions. example: (B·H, 1) long, each example and
            head's example. mix: maps (B·H, S) coefficients to (B·H, 1, D), the read rows mixed by them.

    Returns:
        (B·H, 1, D).
    """
    assert state.cluster_row_sums is not None and state.cluster_of is not None and state.cluster_counts is not None
    count, width = logits.shape
    counts, row_sums = state.cluster_counts, state.cluster_row_sums  # (B, H, C), (B, C, D)
    batch, heads = counts.shape[:2]
    hidden = row_sums.shape[-1]
    lowest = torch.finfo(logits.dtype).min
    scores = logits.clamp_min(lowest).view(batch, heads, width)  # s_j, the lowest number where not real
    read_clusters = state.cluster_of[example, positions].view(batch, heads, width)
    taken = -(scores > lowest).to(scores.dtype)  # -1 at a real key read, 0 elsewhere
    unread = counts.scatter_add(-1, read_clusters, taken)  # u_c, (B, H, C)
    # n_c a_c less the read keys' scores in c: the clusters' sums of rows scored, the read scores taken out
    unread_sums = torch.bmm(hidden_queries.view(batch, heads, hidden), row_sums.mT)  # (B, H, C)
    unread_sums.scatter_add_(-1, read_clusters, scores * taken)
    # b_c: the score of the mean of the cluster's keys not read; an empty cluster, or one whose keys were all read,
    # weighs nothing and sets no maximum
    cluster_scores = (unread_sums / unread.clamp_min(1.0)).masked_fill(unread <= 0, lowest)
    top = torch.maximum(scores.amax(dim=-1, keepdim=True), cluster_scores.amax(dim=-1, keepdim=True))
    weight = torch.exp(cluster_scores - top)
    exact = torch.exp(scores - top)
    coefficient = torch.addcmul(exact, weight.gather(-1, read_clusters), taken)
    clustered = torch.bmm(weight, row_sums)  # (B, H, D)
    numerator = mix(coefficient.view(count, width)) + clustered.view(count, 1, hidden)
    denominator = exact.sum(dim=-1, keepdim=True) + (weight * unread).sum(dim=-1, keepdim=True)  # (B, H, 1)
    return numerator / denominator.view(count, 1, 1).clamp_min(torch.finfo(denominator.dtype).tiny)


def loki_positions(
    queries: torch.Tensor, keys: torch.Tensor, key_valid: torch.Tensor, rank: int, candidates: int, top_keys: int,
    page: int | None = None, pages: int = 1, key_rank: int | None = None,
) -> torch.Tensor:
    """The parallel path's selection (training, teacher forcing, a multi-token chunk): for every query, the same
    two stages as :func:`loki_step` over the projected keys themselves (the first stage's products rounded to the
    step's dtype), so that the same keys are read up to the rounding of the scores; with pages, the same pages
    (:mod:`srformer.attention.loki_pages`). Without gradient.

    Args:
        queries: (B, H, q, d) projected decoder queries.
        keys: (B, H, k, d) projected encoder keys, float32 or wider.
        key_valid: (B, k) bool, True at real positions.
        rank: ``r``. candidates: ``C``. top_keys: ``K``.
        page: ``b``, keys per page, or None (no pages). pages: ``P``, the pages read (with ``page``).
        key_rank: with ``page``: ``r'``, the channels the keys of the pages read are scored on (None: ``r``).

    Returns:
        (B, H, q, min(K, C', k)) long encoder positions, ascending (``C'``: the candidates, ``min(C, k)``, or
        :func:`~srformer.attention.loki_pages.paged_pool` with pages).
    """
    length, d = keys.shape[2], keys.shape[3]
    total = -(-length // page) if page is not None else 0
    pool = paged_pool(candidates, pages, page, length) if page is not None else min(candidates, length)
    width = min(top_keys, pool)
    wide = keys.dtype
    low = torch.float64 if wide == torch.float64 else LOW_RANK_DTYPE
    with torch.no_grad(), torch.autocast(device_type=queries.device.type, enabled=False):
        keys, queries = keys.detach(), cast(queries.detach(), wide)
        count = stored_channels(rank, d)
        vectors, scales = loki_basis(keys, key_valid, count)
        mapped = queries @ (vectors * scales[:, :, None, :])  # (B, H, q, m): x_i s_i
        read = min(rank, count)
        scored = read if key_rank is None or page is None else min(key_rank, count)
        chosen = torch.topk(mapped.abs(), max(read, scored), dim=-1).indices  # the largest first
        kept = torch.zeros_like(mapped).scatter_(-1, chosen[..., :read], 1.0)
        rotated = (keys @ vectors) / scales[:, :, None, :]  # (B, H, k, m): c_ji / s_i
        weights = cast(cast(mapped * kept, low), wide)
        stored = cast(cast(rotated, low), wide)
        key_weights = weights
        if scored != read:  # the keys of the pages read scored on r' channels
            key_kept = torch.zeros_like(mapped).scatter_(-1, chosen[..., :scored], 1.0)
            key_weights = cast(cast(mapped * key_kept, low), wide)
        rough = key_weights @ stored.mT  # (B, H, q, k)
        rough = rough.masked_fill(~key_valid[:, None, None, :], float("-inf"))
        allowed = key_valid[:, None, None, :].expand_as(rough)
        if page is not None and min(pages, total) < total:  # only the keys of the P pages of best bound
            in_pages = keys_in_best_pages(weights, stored, key_valid, rotated.mT, page, pages, _PADDING_VALUE)
            rough = rough.masked_fill(~in_pages, float("-inf"))
            allowed = allowed & in_pages
        pooled = torch.topk(rough, pool, dim=-1, sorted=False).indices  # (B, H, q, C)
        exact = queries @ keys.mT  # (B, H, q, k)
        scores = exact.gather(-1, pooled)
        allowed = allowed.gather(-1, pooled)
        # the tie rule compares positions: rank the pool in encoder order first
        ordered, order = pooled.sort(dim=-1)
        best = top_positions(scores.gather(-1, order), allowed.gather(-1, order), width)
        return ordered.gather(-1, best).sort(dim=-1).values

