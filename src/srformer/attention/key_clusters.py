"""Clusters of keys for the keys a top-``K`` step does not read (``tail_clusters``): a layer's keys grouped once,
at the build, into clusters its heads share, and every key a query does not read scored by the mean of its
cluster's keys not read.

Top-``K`` attention (``knn``) takes the softmax over the ``K`` keys of best score and drops the rest. Where a head's
attention is spread over many keys, the ``K`` best hold a small part of its mass: on the SumPubMed base of this
project's grids at 8,192 tokens, the top 32 keys hold 9-19% of the softmax mass in the first decoder layer's heads,
88-92% in the last layers'. The cluster estimate keeps the rest, as Squeezed Attention's centroids (Hooper et al.
2024, Sec. 3: k-means of a fixed context's keys, looked up by the query) but for the keys not read:

``O_t = (sum_{j in S} e^{s_j} v_j + sum_{j not in S} e^{b_c(j)} v_j) / (sum_{j in S} e^{s_j} + sum_{j not in S}
e^{b_c(j)})``, with ``s_j = scale · Q_t . K_j`` the exact scores of the ``K`` keys read (``S``), ``c(j)`` key
``j``'s cluster and ``b_c = scale · Q_t . mean_{i in c, i not in S} K_i`` the score of the mean of the cluster's
keys not read. Scores are linear in the key, so ``b_c = (n_c a_c - sum_{j in S, c(j) = c} s_j) / u_c`` from the
score ``a_c`` of the cluster's mean key, its ``n_c`` keys and ``u_c`` keys not read; and per cluster,
``sum_{j in c, j not in S} e^{b_c} v_j = e^{b_c} (V_c - sum_{j in S, c(j) = c} v_j)`` with ``V_c`` the cluster's
sum of values. A step reads the ``C`` clusters' key and value sums (their sums of encoder rows, in the absorbed
form) and the cluster of each key it reads; nothing of the keys it does not read. The estimate is exact for a
cluster of equal keys and, whatever the clusters, when every key is read (a cluster with no unread key gets weight
0, not a rounding residue). Taking the read keys out of the mean matters: a read key is among the query's best,
so it lifts its cluster's mean score above its unread keys'. On the SumPubMed base (40 papers at 8,192 tokens,
teacher-forced, 1,024 clusters), argmax agreement with full attention rose from 97.05% to 98.01% and perplexity
went from 0.986x full's to 1.007x.

**Shared by the heads.** Keys and values are linear in the encoder output, so a cluster of encoder positions has,
in every head, the mean key and value of the head's projections of its mean encoder row. One clustering of the
positions serves all heads of a layer: the state keeps ``C`` sums of rows per layer, not per head, and a step
reads them once for all its heads (the absorbed form, :mod:`srformer.attention.knn_loki`). Measured on the SumPubMed
base (its dumped queries, keys and values at 5,486 tokens; the median error of the layer output against full
attention's, relative to its spread), the positions clustered on every head's principal directions at once err as
much as clusters of each head's own keys at the same ``C`` (0.091 against 0.089 at 256), and less with more
clusters (0.076 at 512, 0.059 at 1,024); clustering once for every layer errs more (0.100, 0.082, 0.063).

**The clusters** (:func:`cluster_keys`): the positions' points are each head's real keys projected on the principal
directions the first stage keeps (their spread, not whitened), the heads' side by side (:func:`heads_side_by_side`);
a sample of ``S = 16·C`` real positions, the ``floor(i·n/S)``-th of the ``n`` in encoder order (evenly spaced;
repeated when ``n < S``); ``C`` initial centres, the sample's ``floor(l·S/C)``-th; one Lloyd iteration on the sample
(assign to the nearest centre, ties to the lowest index; each centre the mean of its sample points, an empty one
kept); every real position assigned to its nearest centre. On the same dumps, clustering on the principal
directions, on a sample, with 0-3 iterations, errs as much as k-means of the whole keys in all ``d`` channels with 8
iterations (within 0.01).
"""

from __future__ import annotations

import torch

from srformer.attention.nearest_centres import nearest_centres

__all__ = ["SAMPLE_PER_CLUSTER", "cluster_keys", "cluster_sums", "heads_side_by_side", "tail_mix", "tail_weights"]

#: The sample the centres are fitted on: at most this many real keys per cluster.
SAMPLE_PER_CLUSTER = 16


def _evenly(count: torch.Tensor, size: int) -> torch.Tensor:
    """(B, size) long: ``floor(i · count / size)`` for ``i = 0 .. size - 1``, per row of ``count`` ((B, 1) long)."""
    steps = torch.arange(size, device=count.device).view(1, size)
    return torch.div(steps * count, size, rounding_mode="floor")


def heads_side_by_side(projected: torch.Tensor) -> torch.Tensor:
    """(B, 1, k, H, m): every position's point in each head's principal directions, the heads' side by side (the
    points :func:`cluster_keys` clusters once for all heads), a view of projected: (B, H, k, m)."""
    return projected.permute(0, 2, 1, 3)[:, None]


def cluster_keys(projected: torch.Tensor, key_valid: torch.Tensor | None, clusters: int) -> torch.Tensor:
    """Each real key's cluster (module docstring). The assignments are one operator each
    (:func:`~srformer.attention.nearest_centres.nearest_centres`).

    Args:
        projected: (B, G, k, m) each position's point per group, float32 or wider, for clusters per head (G = H),
            or (B, 1, k, H, m) from :func:`heads_side_by_side` for clusters shared by the heads (a point's ``H·m``
            coordinates).
        key_valid: (B, k) bool, True at real positions, or None (all real).
        clusters: ``C >= 1``.

    Returns:
        (B, G, k) long in ``[0, C]``: ``C`` at padded positions. With fewer real keys than ``C``, some clusters are
        empty.

    Raises:
        ValueError: for ``clusters < 1``.
    """
    if clusters < 1:
        raise ValueError(f"`tail_clusters` must be at least 1, got {clusters}.")
    points = projected if projected.dim() == 5 else projected[:, :, :, None]  # (B, G, k, P, m)
    batch, heads, length = points.shape[:3]
    m = points.shape[3] * points.shape[4]
    device = projected.device
    if key_valid is None:
        valid = torch.ones(batch, length, dtype=torch.bool, device=device)
    else:
        valid = key_valid.to(device=device, dtype=torch.bool)
    real = valid.sum(dim=-1, keepdim=True)  # (B, 1)
    # the real positions first, in encoder order (a stable sort of the padding flags)
    first = (~valid).to(torch.int8).sort(dim=-1, stable=True).indices  # (B, k)
    size = SAMPLE_PER_CLUSTER * clusters  # whatever the padding: the same sample of the same real keys
    sample_at = first.gather(1, _evenly(real.clamp_min(1), size))  # (B, size) encoder positions
    example = torch.arange(batch, device=device)[:, None, None]
    group = torch.arange(heads, device=device)[None, :, None]
    sample = points[example, group, sample_at[:, None, :]].flatten(3)  # (B, G, size, P·m)
    centres = sample[:, :, _evenly(torch.full_like(real[:1], size), clusters)[0]]  # (B, G, C, P·m)
    # one Lloyd iteration on the sample; a sample shorter than C repeats keys (the real keys of a short input)
    nearest = nearest_centres(sample[:, :, :, None], centres)
    sums = torch.zeros_like(centres).scatter_add_(2, nearest[..., None].expand(-1, -1, -1, m), sample)
    counts = torch.zeros(batch, heads, clusters, dtype=projected.dtype, device=device).scatter_add_(
        2, nearest, torch.ones_like(nearest, dtype=projected.dtype))
    centres = torch.where(counts[..., None] > 0, sums / counts[..., None].clamp_min(1.0), centres)
    assigned = nearest_centres(points, centres)
    return assigned.masked_fill(~valid[:, None, :], clusters)


def cluster_sums(rows: torch.Tensor, assigned: torch.Tensor, clusters: int) -> tuple[torch.Tensor, torch.Tensor]:
    """Each cluster's sum of rows and its number of keys.

    Args:
        rows: (B, H, k, E) per head (keys or values), or (B, k, E) shared by the heads (the encoder output).
        assigned: (B, H, k) long from :func:`cluster_keys` (``C`` at padded positions: dropped); H may be 1 (the
            clusters the heads share) with rows of either form.
        clusters: ``C``.

    Returns:
        ``(sums, counts)``: (B, H, C, E) in ``rows``' dtype (differentiable in ``rows``) and (B, H, C) the same
        dtype, exact integers.
    """
    batch, heads, length = assigned.shape
    width = rows.shape[-1]
    slots = clusters + 1  # the last one takes the padding
    # torch.zeros, not rows.new_zeros: the same call, which a byte count would take for a read of the rows
    dtype, device = rows.dtype, rows.device
    target = (torch.arange(batch * heads, device=assigned.device).view(batch, heads, 1) * slots + assigned)
    if rows.dim() == 3:  # one head at a time: the shared rows are not copied per head
        sums = torch.zeros(batch, heads, slots, width, dtype=dtype, device=device)
        flat_rows = rows.reshape(batch * length, width)
        for head in range(heads):
            index = (torch.arange(batch, device=assigned.device).view(batch, 1) * slots + assigned[:, head])
            sums[:, head] = torch.zeros(batch * slots, width, dtype=dtype, device=device).index_add(
                0, index.reshape(-1), flat_rows).view(batch, slots, width)
        sums = sums[:, :, :clusters]
    else:
        sums = torch.zeros(batch * heads * slots, width, dtype=dtype, device=device).index_add(
            0, target.reshape(-1), rows.reshape(-1, width)).view(batch, heads, slots, width)[:, :, :clusters]
    ones = torch.ones(batch * heads * length, dtype=dtype, device=device)
    counts = torch.zeros(batch * heads * slots, dtype=dtype, device=device).index_add(
        0, target.reshape(-1), ones).view(batch, heads, slots)[:, :, :clusters]
    return sums, counts


def tail_weights(
    scores: torch.Tensor, read_clusters: torch.Tensor, read_real: torch.Tensor, cluster_scores: torch.Tensor,
    counts: torch.Tensor,
) -> tuple[torch.Tensor, torch.Tensor]:
    """The normalised weights of the module docstring's ``O_t``: of each key read, and of each unread key per
    cluster, scored at the mean of its cluster's unread keys (``(n_c·a_c - sum_{j in S, c(j) = c} s_j) / u_c``,
    ``u_c`` the cluster's keys not read). N = examples times heads, q = queries, S = keys read per query,
    C = clusters.

    Args:
        scores: (N, q, S) ``s_j`` of the keys read, scale applied; the dtype's lowest number at a slot that is not
            a real key.
        read_clusters: (N, q, S) long, their clusters (any value in ``[0, C)`` at a slot that is not real).
        read_real: (N, q, S) the scores' dtype, 1 at a real key read, 0 elsewhere.
        cluster_scores: (N, q, C) ``a_c``, the score of each cluster's mean key, scale applied.
        counts: (N, 1, C) each cluster's keys ``n_c`` (0: an empty cluster, never weighed).

    Returns:
        ``(read, unread)``, in float32 or wider: (N, q, S) each read key's weight and (N, q, C) the weight of each
        key of the cluster not read (0 for a cluster whose keys are all read); all of them sum to 1 per query, or
        all are 0 where no key is real.
    """
    dtype = torch.promote_types(torch.promote_types(scores.dtype, cluster_scores.dtype), torch.float32)
    scores, cluster_scores = scores.to(dtype), cluster_scores.to(dtype)
    counts, read_real = counts.to(dtype), read_real.to(dtype)
    read_count = torch.zeros_like(cluster_scores).scatter_add_(-1, read_clusters, read_real)
    read_sum = torch.zeros_like(cluster_scores).scatter_add_(-1, read_clusters, scores * read_real)
    unread = counts - read_count
    live = unread > 0
    cluster_scores = torch.where(live, (counts * cluster_scores - read_sum) / unread.clamp_min(1.0),
                                 torch.finfo(dtype).min)
    top = torch.maximum(scores.amax(dim=-1, keepdim=True), cluster_scores.amax(dim=-1, keepdim=True))
    weight = torch.exp(cluster_scores - top) * live  # exactly 0 for a cluster without keys not read
    exact = torch.exp(scores - top)
    denominator = exact.sum(dim=-1, keepdim=True) + (weight * unread).sum(dim=-1, keepdim=True)
    denominator = denominator.clamp_min(torch.finfo(denominator.dtype).tiny)
    return exact / denominator, weight / denominator


def tail_mix(
    read: torch.Tensor, unread: torch.Tensor, read_clusters: torch.Tensor, read_real: torch.Tensor,
    values: torch.Tensor, cluster_values: torch.Tensor, counts: torch.Tensor,
) -> torch.Tensor:
    """``O_t`` from :func:`tail_weights`' weights: each read key's value at its weight less its cluster's (it leaves
    the cluster's sum), plus each cluster's value sum at its weight. Shapes as :func:`tail_weights`; E = value width.

    Args:
        read, unread: :func:`tail_weights`' weights. read_clusters, read_real, counts: as :func:`tail_weights`.
        values: (N, q, S, E) the values of the keys read (or their encoder rows, in the absorbed form).
        cluster_values: (N, C, E) each cluster's mean value (or mean row).

    Returns:
        (N, q, E) in the weights' dtype; 0 where no key is real.
    """
    dtype = read.dtype
    coefficient = read - unread.gather(-1, read_clusters) * read_real.to(dtype)
    mixed = (coefficient.unsqueeze(-2) @ values.to(dtype)).squeeze(-2)
    return mixed + (unread * counts.to(dtype)) @ cluster_values.to(dtype)
