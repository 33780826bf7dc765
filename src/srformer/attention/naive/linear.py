"""Float64 references of the segment-free summaries: linear attention (Katharopoulos et al. 2020) and
Fastformer's additive attention (Wu et al. 2021)."""

from __future__ import annotations

import math
from collections.abc import Mapping
from typing import TYPE_CHECKING

import torch
from torch.nn import functional as F

from srformer.attention.naive.common import check_call, per_query

if TYPE_CHECKING:
    from srformer.core import SRformerConfig


def linear_attention(
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
    """``linear`` (Katharopoulos et al. 2020; paper Appendix A.1, Eq. 20):
    ``O[t] = phi(Q_t) sum_j phi(K_j)^T V_j / (phi(Q_t) . sum_j phi(K_j) + norm_eps)`` over every real
    position, ``phi(x) = elu(x) + 1``. No segments and no attention scale (``scale`` is ignored)."""
    check_call(settings, parameters, linear_attention)

    def phi(x: torch.Tensor) -> torch.Tensor:
        return F.elu(x) + 1.0

    def one_query(query: torch.Tensor, k: torch.Tensor, v: torch.Tensor, t: int) -> torch.Tensor:
        key_value = torch.stack([torch.outer(phi(k[j]), v[j]) for j in range(len(k))]).sum(0)  # sum_j phi(K_j)^T V_j
        key_sum = torch.stack([phi(k[j]) for j in range(len(k))]).sum(0)  # sum_j phi(K_j)
        return (phi(query) @ key_value) / (phi(query) @ key_sum + settings.norm_eps)

    return per_query(queries, keys, values, key_valid, start_position, one_query)


#: The learned tensor of ``fastformer``: ``w_k`` of Eq. 5 (d,), zero at initialisation.
FASTFORMER_PARAMETERS: tuple[str, ...] = ("key_weight",)


def fastformer_attention(
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
    """``fastformer`` (Wu et al. 2021, Eq. 3-6, adapted to cross attention; ``srformer.attention.fastformer``):
    ``beta_j = exp(w_k . K_j / sqrt(d)) / sum_l exp(w_k . K_l / sqrt(d))`` over the real positions,
    ``K_g = sum_j beta_j K_j``, ``V_g = sum_j beta_j V_j`` and ``O[t] = Q_t * K_g * V_g`` element-wise.
    ``parameters["key_weight"]`` is ``w_k`` (default: zero, its initial value). No segments and no attention
    scale (``scale`` is ignored)."""
    check_call(settings, parameters, fastformer_attention, FASTFORMER_PARAMETERS)
    given = parameters.get("key_weight") if parameters is not None else None
    key_weight = torch.zeros(keys.shape[-1], dtype=torch.float64) if given is None else given.detach().double()

    def one_query(query: torch.Tensor, k: torch.Tensor, v: torch.Tensor, t: int) -> torch.Tensor:
        scores = [math.exp(float(key_weight @ k[j]) / math.sqrt(len(query))) for j in range(len(k))]
        beta = [score / sum(scores) for score in scores]
        global_key = sum(beta[j] * k[j] for j in range(len(k)))
        global_value = sum(beta[j] * v[j] for j in range(len(k)))
        return query * global_key * global_value

    return per_query(queries, keys, values, key_valid, start_position, one_query)
