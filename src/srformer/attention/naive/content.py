"""Float64 references of the content-based sparse attentions: Reformer's LSH attention (Kitaev et al. 2020)
and the Routing Transformer's k-means routing (Roy et al. 2021). A query attends, with one softmax, the real
keys that share its group (bucket, cluster) in some round, each once; a query sharing no group with any real
key attends every real key; an example without real keys has output 0 (``srformer.attention.content``)."""

from __future__ import annotations

from collections.abc import Callable, Mapping
from typing import TYPE_CHECKING

import torch

from srformer.attention.naive.common import check_call, per_query, softmax_attention

if TYPE_CHECKING:
    from srformer.config import SRformerConfig

#: The tensor ``reformer`` reads: its random rotations ``rotations`` (R, d, b/2), one ``R`` per hash round.
REFORMER_PARAMETERS: tuple[str, ...] = ("rotations",)

#: The tensor ``routing`` reads: its k-means centroids ``centroids`` (c, d).
ROUTING_PARAMETERS: tuple[str, ...] = ("centroids",)

#: One vector's group in every round: (d,) float64 -> one int per round.
Grouping = Callable[[torch.Tensor], list[int]]


def _given(parameters: Mapping[str, torch.Tensor] | None, name: str, variant: str) -> torch.Tensor:
    if parameters is None or name not in parameters:
        raise ValueError(
            f"The {variant!r} reference needs the module's {name!r} in `parameters` (e.g. dict(module.state_dict()))."
        )
    return parameters[name].detach().to(torch.float64)


def _first_argmax(numbers: list[float]) -> int:
    """The index of the largest number, the first one on ties."""
    best = 0
    for index, number in enumerate(numbers):
        if number > numbers[best]:
            best = index
    return best


def _grouped_attention(
    queries: torch.Tensor,
    keys: torch.Tensor,
    values: torch.Tensor,
    key_valid: torch.Tensor | None,
    scale: float,
    start_position: int,
    group: Grouping,
) -> torch.Tensor:
    """Softmax over the union, over rounds, of the real keys in the query's group; every real key if none."""

    def one_query(query: torch.Tensor, k: torch.Tensor, v: torch.Tensor, t: int) -> torch.Tensor:
        query_groups = group(query)
        attended = [j for j in range(len(k)) if any(a == b for a, b in zip(group(k[j]), query_groups, strict=True))]
        if not attended:  # no real key shares a group with the query: every real key
            attended = list(range(len(k)))
        return softmax_attention(query, k[attended], v[attended], scale)

    return per_query(queries, keys, values, key_valid, start_position, one_query)


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
    """``reformer`` (Kitaev et al. 2020, Sec. 2; ``srformer.attention.reformer``): in round ``r`` a vector ``x``
    falls in bucket ``h_r(x) = argmax([u R_r ; -u R_r])`` with ``u = x / ||x||`` and ``R_r`` = ``rotations[r]``
    (d, b/2) (the first index on ties). Query ``t`` attends ``softmax(scale * Q_t K_A^T) V_A`` over the real keys
    ``A = {j : h_r(K_j) = h_r(Q_t) for some r}``, or every real key when ``A`` is empty.
    ``parameters["rotations"]`` must be given."""
    check_call(settings, parameters, "reformer", REFORMER_PARAMETERS)
    rotations = _given(parameters, "rotations", "reformer")

    def buckets(x: torch.Tensor) -> list[int]:
        unit = x / x.norm() if x.norm() > 0 else x
        result = []
        for rotation in rotations:
            projected = [float(unit @ rotation[:, c]) for c in range(rotation.shape[1])]
            result.append(_first_argmax(projected + [-p for p in projected]))
        return result

    return _grouped_attention(queries, keys, values, key_valid, scale, start_position, buckets)


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
    """``routing`` (Roy et al. 2021, Sec. 4; ``srformer.attention.routing``) with fixed centroids (eval): a vector
    ``x`` is in cluster ``argmin_c ||u - mu_c||^2`` with ``u = x / ||x||`` and ``mu`` = ``centroids`` (c, d) (the
    first index on ties). Query ``t`` attends ``softmax(scale * Q_t K_A^T) V_A`` over the real keys ``A`` of its
    cluster, or every real key when ``A`` is empty. ``parameters["centroids"]`` must be given."""
    check_call(settings, parameters, "routing", ROUTING_PARAMETERS)
    centroids = _given(parameters, "centroids", "routing")

    def cluster(x: torch.Tensor) -> list[int]:
        unit = x / x.norm() if x.norm() > 0 else x
        distances = [-float(((unit - centroid) ** 2).sum()) for centroid in centroids]
        return [_first_argmax(distances)]

    return _grouped_attention(queries, keys, values, key_valid, scale, start_position, cluster)
