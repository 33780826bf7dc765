"""Float64 references of the content-based sparse attentions: Reformer's LSH attention with sorting and chunking
(Kitaev et al. 2020, Sec. 2), the Routing Transformer's balanced k-means routing (Roy et al. 2021, Sec. 4) and
Unlimiformer's top-k keys (``knn``; Bertsch et al. 2023, Sec. 2). Written per query from the rules in
``srformer.attention.reformer``, ``srformer.attention.routing`` and ``srformer.attention.knn``: a query attends a
fixed-size set of real keys chosen by content; an example without real keys has output 0."""

from __future__ import annotations

import math
from collections.abc import Callable, Mapping
from typing import TYPE_CHECKING

import torch

from srformer.attention.naive.common import check_call, per_query, softmax_attention

if TYPE_CHECKING:
    from srformer.core import SRformerConfig

#: The tensor ``reformer`` reads: its random rotations ``rotations`` (R, d, b/2), one ``R`` per hash round.
REFORMER_PARAMETERS: tuple[str, ...] = ("rotations",)

#: The tensor ``routing`` reads: its k-means centroids ``centroids`` (c, d).
ROUTING_PARAMETERS: tuple[str, ...] = ("centroids",)


def _given(parameters: Mapping[str, torch.Tensor] | None, name: str, variant: str) -> torch.Tensor:
    if parameters is None or name not in parameters:
        raise ValueError(
            f"The {variant!r} reference needs the module's {name!r} in `parameters` (e.g. dict(module.state_dict()))."
        )
    return parameters[name].detach().to(torch.float64)


def _unit(x: torch.Tensor) -> torch.Tensor:
    return x / x.norm() if x.norm() > 0 else x


def _first_argmax(numbers: list[float]) -> int:
    """The index of the largest number, the first one on ties."""
    best = 0
    for index, number in enumerate(numbers):
        if number > numbers[best]:
            best = index
    return best


def _scores_and_output(query: torch.Tensor, keys: list[torch.Tensor], values: list[torch.Tensor], scale: float):
    """``(L, o)``: the log-normaliser ``log sum_j exp(scale * q . k_j)`` and ``sum_j softmax_j v_j`` of one query."""
    scores = [scale * float(query @ key) for key in keys]
    top = max(scores)
    exps = [math.exp(score - top) for score in scores]
    total = sum(exps)
    output = sum((e / total * value for e, value in zip(exps, values, strict=True)), torch.zeros_like(values[0]))
    return top + math.log(total), output


def reformer_attention(
    queries: torch.Tensor,
    keys: torch.Tensor,
    values: torch.Tensor,
    key_valid: torch.Tensor | None,
    settings: SRformerConfig,
    *,
    scale: float = 1.0,
    parameters: Mapping[str, torch.Tensor] | None = None,
    start_position: int = 0,
) -> torch.Tensor:
    """``reformer`` (Kitaev et al. 2020, Sec. 2; ``srformer.attention.reformer``). In round ``r`` a vector ``x``
    falls in bucket ``h_r(x) = argmax([u R_r ; -u R_r])`` with ``u = x / ||x||`` and ``R_r`` = ``rotations[r]``
    (d, b/2) (the first index on ties). Per round, the ``n`` real keys sorted by (bucket, position) give places
    ``0 .. n-1``; with ``w = chunk_size``, query ``t`` of bucket ``h`` has ``start`` = the number of keys with a
    smaller bucket and reads the places ``c*w .. c*w + 2w - 1`` below ``n``, ``c = floor(min(start, n-1) / w)``,
    keeping those of bucket ``h`` if any key has bucket ``h``, all of them otherwise: the set ``P_r``. With
    ``O_r = softmax(scale * Q_t K_{P_r}^T) V_{P_r}`` and ``L_r = log sum_{j in P_r} exp(scale * Q_t . K_j)``, the
    output is ``sum_r exp(L_r - log sum_r' exp(L_r')) O_r`` (Sec. 2, multi-round LSH attention).
    ``parameters["rotations"]`` must be given."""
    check_call(settings, parameters, reformer_attention, REFORMER_PARAMETERS)
    rotations = _given(parameters, "rotations", "reformer")
    chunk = settings.resolved_chunk_size()

    def bucket(x: torch.Tensor, rotation: torch.Tensor) -> int:
        projected = [float(_unit(x) @ rotation[:, c]) for c in range(rotation.shape[1])]
        return _first_argmax(projected + [-p for p in projected])

    def one_query(query: torch.Tensor, k: torch.Tensor, v: torch.Tensor, t: int) -> torch.Tensor:
        n = len(k)
        rounds = []
        for rotation in rotations:
            key_buckets = [bucket(k[j], rotation) for j in range(n)]
            order = sorted(range(n), key=lambda j: (key_buckets[j], j))
            h = bucket(query, rotation)
            start = sum(1 for j in range(n) if key_buckets[j] < h)
            in_bucket = h in key_buckets
            first_chunk = min(start, n - 1) // chunk
            places = range(first_chunk * chunk, min(first_chunk * chunk + 2 * chunk, n))
            attended = [order[i] for i in places if not in_bucket or key_buckets[order[i]] == h]
            rounds.append(_scores_and_output(query, [k[j] for j in attended], [v[j] for j in attended], scale))
        top = max(log_norm for log_norm, _ in rounds)
        total = math.log(sum(math.exp(log_norm - top) for log_norm, _ in rounds)) + top
        return sum((math.exp(log_norm - total) * output for log_norm, output in rounds), torch.zeros_like(query))

    return per_query(queries, keys, values, key_valid, start_position, one_query)


def routing_attention(
    queries: torch.Tensor,
    keys: torch.Tensor,
    values: torch.Tensor,
    key_valid: torch.Tensor | None,
    settings: SRformerConfig,
    *,
    scale: float = 1.0,
    parameters: Mapping[str, torch.Tensor] | None = None,
    start_position: int = 0,
) -> torch.Tensor:
    """``routing`` (Roy et al. 2021, Sec. 4; ``srformer.attention.routing``) with fixed centroids (eval) and balanced
    clusters: with ``u = x / ||x||`` and ``mu`` = ``centroids`` (c, d), cluster ``c`` holds the ``w`` real keys of
    smallest ``||u_j - mu_c||^2`` (the earlier position on ties; every real key when there are at most ``w``),
    ``w = cluster_size``, or ``ceil(n / c)`` for ``n`` real keys when it is None;
    query ``t`` goes to the centroid of smallest ``||u_t - mu_c||^2`` (the first on ties) and takes
    ``softmax(scale * Q_t K_A^T) V_A`` over that cluster's keys ``A``. ``parameters["centroids"]`` must be given."""
    check_call(settings, parameters, routing_attention, ROUTING_PARAMETERS)
    centroids = _given(parameters, "centroids", "routing")

    def distance(x: torch.Tensor, centroid: torch.Tensor) -> float:
        return float(((_unit(x) - centroid) ** 2).sum())

    def one_query(query: torch.Tensor, k: torch.Tensor, v: torch.Tensor, t: int) -> torch.Tensor:
        nearest = _first_argmax([-distance(query, centroid) for centroid in centroids])
        size = settings.cluster_size if settings.cluster_size is not None else math.ceil(len(k) / len(centroids))
        members = sorted(range(len(k)), key=lambda j: (distance(k[j], centroids[nearest]), j))[:size]
        return _scores_and_output(query, [k[j] for j in members], [v[j] for j in members], scale)[1]

    return per_query(queries, keys, values, key_valid, start_position, one_query)


def knn_attention(
    queries: torch.Tensor,
    keys: torch.Tensor,
    values: torch.Tensor,
    key_valid: torch.Tensor | None,
    settings: SRformerConfig,
    *,
    scale: float = 1.0,
    parameters: Mapping[str, torch.Tensor] | None = None,
    start_position: int = 0,
) -> torch.Tensor:
    """Float64 reference: per query, the softmax over the ``min(K, n)`` real keys ranked first by
    (``Q_t . K_j`` descending, position ascending) (Unlimiformer, Sec. 2, with exact retrieval). With
    ``knn_index="loki"`` (and ``k >= index_min_keys``) those keys are taken among the ``C = index_candidates`` ranked
    first by ``sum_i (v_i . Q_t)(v_i . K_j)`` over the ``r = index_rank`` eigenvectors ``v_i`` of the real keys'
    centred covariance, among its ``min(d, 2r)`` of largest eigenvalue ``λ_i``, with the largest
    ``|v_i . Q_t| sqrt(λ_i)`` (Loki's basis, Singhania et al. 2024; SparQ's choice of channels, Ribar et al. 2024;
    :mod:`srformer.attention.knn_loki`). With ``index_page``, among the keys of the ``index_pages`` pages of best
    bound only, ranked on the ``r' = index_key_rank`` channels of largest weight (:func:`_paged_pool`).

    Args:
        queries: (B, H, q, d). keys, values: (B, H, k, d). key_valid: (B, k) bool or None.
        settings: a config with ``variant='knn'``. scale: the model's attention scale.
        parameters: none (the mechanism has no learned tensors). start_position: unused.

    Returns:
        (B, H, q, d) float64; 0 for an example without real keys.
    """
    check_call(settings, parameters, knn_attention)
    top = settings.resolved_top_keys()
    two_stage = settings.knn_index == "loki" and keys.shape[2] >= settings.resolved_index_min_keys()

    def chosen_keys(query: torch.Tensor, k: torch.Tensor) -> list[int]:
        """The indices (into the ``n`` real keys) of the keys the query reads."""
        products = (k @ query).tolist()
        pool = list(range(len(products)))
        if two_stage:  # the C best scores on the r channels the query weighs most, in these keys' principal basis
            rank = settings.resolved_index_rank()
            basis, spread = _principal_basis(k, rank)
            rotated_query = basis.T @ query
            weight = (rotated_query.abs() * spread).tolist()
            ranked = sorted(range(basis.shape[1]), key=lambda i: (-weight[i], i))  # the largest weight first
            channels = ranked[:rank]
            count = settings.resolved_index_candidates()
            scored = channels
            if settings.index_page is not None:  # only the keys of the pages of best bound, at most the keys of
                # P - 1 full pages and one more, scored on the query's r' = index_key_rank largest channels
                pool = _paged_pool(k @ basis, spread, rotated_query, channels, settings)
                count = min(count, (settings.resolved_index_pages() - 1) * settings.index_page + 1)
                scored = ranked[:settings.resolved_index_key_rank()]
            rough = ((k @ basis[:, scored]) @ rotated_query[scored]).tolist()
            pool = sorted(pool, key=lambda j: (-rough[j], j))[:count]
        return sorted(pool, key=lambda j: (-products[j], j))[:top]

    if two_stage and settings.tail_clusters is not None:
        return _with_tail(queries, keys, values, key_valid, chosen_keys, settings, scale)

    def one_query(query: torch.Tensor, k: torch.Tensor, v: torch.Tensor, t: int) -> torch.Tensor:
        rows = torch.tensor(sorted(chosen_keys(query, k)), dtype=torch.long)
        return softmax_attention(query, k[rows], v[rows], scale)

    return per_query(queries, keys, values, key_valid, start_position, one_query)


def _principal_basis(k: torch.Tensor, rank: int) -> tuple[torch.Tensor, torch.Tensor]:
    """(d, m) the eigenvectors of the real keys' (``k``, (n, d)) centred covariance of the ``m = min(d, 2r)``
    largest eigenvalues (ascending), each with its largest component positive, and (m,) the square roots of those
    eigenvalues, floored at ``10^-3`` of the largest."""
    d = k.shape[1]
    centred = k - k.mean(dim=0)
    values, vectors = torch.linalg.eigh(centred.T @ centred)  # ascending eigenvalues
    kept = min(d, 2 * rank)  # the principal channels kept: the largest eigenvalues
    spread = values[d - kept:].clamp_min(0.0).sqrt()
    spread = torch.maximum(spread, (spread[-1] * 1e-3).clamp_min(torch.finfo(k.dtype).tiny))
    basis = vectors[:, d - kept:]
    return basis * basis[basis.abs().argmax(dim=0), torch.arange(kept)].sign(), spread  # largest component > 0


def _clusters(points: torch.Tensor, clusters: int) -> list[int]:
    """Each of the ``n`` points' ((n, F)) cluster: ``C`` centres at the ``floor(l·S/C)``-th of a sample of the
    ``S = 16·C`` points at ``floor(i·n/S)``, one Lloyd iteration on the sample, each point to its nearest centre
    (ties: the lowest index)."""
    count = points.shape[0]
    size = 16 * clusters
    sample = points[[(i * count) // size for i in range(size)]]
    centres = sample[[(c * size) // clusters for c in range(clusters)]].clone()

    def nearest(x: torch.Tensor, at: torch.Tensor) -> int:
        return int(torch.argmin((at * at).sum(dim=1) - 2.0 * (at @ x)))  # the first of equal distances

    members: list[list[int]] = [[] for _ in range(clusters)]
    for i in range(size):
        members[nearest(sample[i], centres)].append(i)
    for c, group in enumerate(members):
        if group:
            centres[c] = sample[group].mean(dim=0)
    return [nearest(points[j], centres) for j in range(count)]


def _with_tail(queries: torch.Tensor, keys: torch.Tensor, values: torch.Tensor, key_valid: torch.Tensor | None,
               chosen_keys: Callable[[torch.Tensor, torch.Tensor], list[int]], settings: SRformerConfig,
               scale: float) -> torch.Tensor:
    """``knn_attention`` with ``tail_clusters``: per example, its real positions clustered once for all heads
    (:func:`_clusters` of each position's keys on every head's kept principal directions, the heads' side by side);
    per head and query, the softmax over every real key in which a key not in ``chosen_keys`` scores the mean key,
    in that head, of its cluster's keys not chosen: ``sum_j w_j v_j / sum_j w_j`` with ``w_j = exp(scale Q.K_j)``
    for a chosen key and ``exp(scale Q.mean_{i in c(j), i not chosen} K_i)`` for another
    (:mod:`srformer.attention.key_clusters`). (B, H, q, d) float64; 0 for an example without real keys."""
    batch, heads, length, _ = queries.shape
    output = torch.zeros(queries.shape, dtype=torch.float64)
    for b in range(batch):
        real = [j for j in range(keys.shape[2]) if key_valid is None or bool(key_valid[b, j])]
        if not real:
            continue
        k_all, v_all = keys[b][:, real].to(torch.float64), values[b][:, real].to(torch.float64)
        bases = [_principal_basis(k_all[h], settings.resolved_index_rank())[0] for h in range(heads)]
        cluster = _clusters(torch.cat([k_all[h] @ bases[h] for h in range(heads)], dim=1), settings.tail_clusters)
        for h in range(heads):
            k, v = k_all[h], v_all[h]
            for t in range(length):
                query = queries[b, h, t].to(torch.float64)
                read = set(chosen_keys(query, k))
                unread_mean = {c: k[[j for j in range(len(real)) if cluster[j] == c and j not in read]].mean(dim=0)
                               for c in {cluster[j] for j in range(len(real)) if j not in read}}
                logits = torch.stack([scale * (query @ (k[j] if j in read else unread_mean[cluster[j]]))
                                      for j in range(len(real))])
                weights = torch.exp(logits - logits.max())
                output[b, h, t] = (weights @ v) / weights.sum()
    return output


def _paged_pool(on_basis: torch.Tensor, spread: torch.Tensor, rotated_query: torch.Tensor, channels: list[int],
                settings: SRformerConfig) -> list[int]:
    """The keys (indices into the ``n`` real ones) of the ``P = index_pages`` pages of best bound: the keys sorted by
    the Morton code of their levels on the 6 channels of largest variance (8 levels each, cut at the octiles of the
    real keys' ``(v_i . K_j) / sqrt(λ_i)``: the ``floor(i (n - 1) / 8)``-th smallest; bits interleaved, the largest
    variance's first; ties by position), cut
    into pages of ``b = index_page``, each bounded by ``sum_i max_j (v_i . Q_t)(v_i . K_j)`` over the query's channels
    (Quest's page bound, Tang et al. 2024, in Loki's basis; :mod:`srformer.attention.loki_pages`).

    Args:
        on_basis: (n, m) ``v_i . K_j`` for the ``m`` kept directions, the largest variance last. spread: (m,)
            ``sqrt(λ_i)``. rotated_query: (m,) ``v_i . Q_t``. channels: the query's ``r`` channels.
    """
    count, kept = on_basis.shape
    coded = min(6, kept)
    whitened = [[float(on_basis[j, kept - 1 - c] / spread[kept - 1 - c]) for c in range(coded)] for j in range(count)]
    cuts = []  # per channel, the real values' octiles
    for c in range(coded):
        ranked = sorted(row[c] for row in whitened)
        cuts.append([ranked[(i * (count - 1)) // 8] for i in range(1, 8)])
    levels = [[sum(cut < row[c] for cut in cuts[c]) for c in range(coded)] for row in whitened]
    codes = ["".join(format(level[c], "03b")[bit] for bit in range(3) for c in range(coded)) for level in levels]
    order = sorted(range(count), key=lambda j: (codes[j], j))
    page = settings.index_page
    pages = [order[start:start + page] for start in range(0, count, page)]
    bounds = [sum(max(float(rotated_query[i] * on_basis[j, i]) for j in members) for i in channels)
              for members in pages]
    best = sorted(range(len(pages)), key=lambda p: (-bounds[p], p))[:settings.resolved_index_pages()]
    return [j for p in best for j in pages[p]]
