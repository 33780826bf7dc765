"""Float64 references of the segment-free summaries of the encoder: Linformer (Wang et al. 2020), Performer's
FAVOR+ (Choromanski et al. 2021), memory-compressed attention (Liu et al. 2018) and Set Transformer's
inducing points (Lee et al. 2019). Each builds its summary from one example's real keys and values, with
Python loops where the equations have sums, and attends it from one query."""

from __future__ import annotations

import math
from collections.abc import Mapping
from typing import TYPE_CHECKING

import torch

from srformer.attention.naive.common import check_call, per_query, softmax_attention

if TYPE_CHECKING:
    from srformer.core import SRformerConfig


def _required(parameters: Mapping[str, torch.Tensor] | None, name: str) -> torch.Tensor:
    """A learned tensor without a deterministic initial value, in float64."""
    if parameters is None or name not in parameters:
        raise ValueError(
            f"The reference needs the learned tensor {name!r} in `parameters` (e.g. dict(module.state_dict()))."
        )
    return parameters[name].detach().to(torch.float64)


#: The learned tensors of ``linformer``: ``E`` and ``F`` (r, N), shared by the heads.
LINFORMER_PARAMETERS: tuple[str, ...] = ("key_projection", "value_projection")


def linformer_attention(
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
    """``linformer`` (Wang et al. 2020, Sec. 4, Eq. 7; ``srformer.attention.linformer``): with the example's
    ``n`` real keys and values in order, ``K~_i = sum_{p < n} E[i, p] K_p``, ``V~_i = sum_{p < n} F[i, p] V_p``
    (``i < r``) and ``O[t] = softmax(scale * Q_t K~^T) V~``. ``parameters`` must hold ``key_projection`` (``E``)
    and ``value_projection`` (``F``), (r, N).

    Raises:
        ValueError: as every reference, without ``E``/``F``, or for an example with more than ``N`` real positions
            (naming ``max_source_length``).
    """
    check_call(settings, parameters, linformer_attention, LINFORMER_PARAMETERS)
    key_projection = _required(parameters, "key_projection")
    value_projection = _required(parameters, "value_projection")
    limit = key_projection.shape[1]

    def one_query(query: torch.Tensor, k: torch.Tensor, v: torch.Tensor, t: int) -> torch.Tensor:
        if len(k) > limit:
            raise ValueError(f"An example has {len(k)} real positions, more than max_source_length={limit}.")
        summary_keys = key_projection[:, : len(k)] @ k  # K~_i = sum_p E[i, p] K_p
        summary_values = value_projection[:, : len(k)] @ v
        return softmax_attention(query, summary_keys, summary_values, scale)

    return per_query(queries, keys, values, key_valid, start_position, one_query)



#: The learned tensor of ``performer``: its random features ``W`` (m, d), a buffer drawn from the seed.
PERFORMER_PARAMETERS: tuple[str, ...] = ("random_features",)


def performer_attention(
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
    """``performer`` (Choromanski et al. 2021, FAVOR+, Sec. 2.2-2.4; ``srformer.attention.performer``): with
    ``x = sqrt(scale) Q_t``, ``y_j = sqrt(scale) K_j`` and the exponents ``e(z) = W z - |z|^2 / 2``,

    * ``phi(Q_t)_f = exp(e(x)_f - max_g e(x)_g) + eps``,
    * ``phi(K_j)_f = exp(e(y_j)_f - c) + eps`` with ``c = max_{j, g} e(y_j)_g`` over the example's real keys,
    * ``O[t] = sum_j (phi(Q_t) . phi(K_j)) V_j / sum_j (phi(Q_t) . phi(K_j))``,

    ``eps = settings.norm_eps``. ``parameters["random_features"]`` is ``W`` (m, d)."""
    check_call(settings, parameters, performer_attention, PERFORMER_PARAMETERS)
    features = _required(parameters, "random_features")
    root = math.sqrt(scale)
    eps = settings.norm_eps

    def exponents(z: torch.Tensor) -> torch.Tensor:
        return features @ (root * z) - 0.5 * float((root * z) @ (root * z))

    def one_query(query: torch.Tensor, k: torch.Tensor, v: torch.Tensor, t: int) -> torch.Tensor:
        query_exponents = exponents(query)
        phi_query = torch.exp(query_exponents - query_exponents.max()) + eps
        key_exponents = [exponents(k[j]) for j in range(len(k))]
        offset = max(float(e.max()) for e in key_exponents)
        kernel = [float(phi_query @ (torch.exp(e - offset) + eps)) for e in key_exponents]
        weighted = torch.stack([kernel[j] * v[j] for j in range(len(k))]).sum(dim=0)
        return weighted / sum(kernel)

    return per_query(queries, keys, values, key_valid, start_position, one_query)


#: The learned tensors of ``compressed``: its two convolutions, (d, d, c) weights and (d,) biases.
COMPRESSED_PARAMETERS: tuple[str, ...] = ("key_weight", "key_bias", "value_weight", "value_bias")


def compressed_attention(
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
    """``compressed`` (memory-compressed attention, Liu et al. 2018, Sec. 4.2.3; ``srformer.attention.compressed``):
    with the example's ``n`` real keys and values in order and ``c = settings.resolved_compression_stride()``,
    row ``r < ceil(n / c)`` is ``K~_r = b_K + sum_{j < c, rc + j < n} W_K[:, :, j] K_{rc + j}`` (and ``V~_r``
    alike: positions past ``n - 1`` read as zero), and ``O[t] = softmax(scale * Q_t K~^T) V~``. The weights and
    biases default to their initial values, mean pooling ``W[o, i, j] = [o = i] / c`` and ``b = 0``."""
    check_call(settings, parameters, compressed_attention, COMPRESSED_PARAMETERS)
    c, d = settings.resolved_compression_stride(), keys.shape[-1]
    given = dict(parameters or {})
    pooling = (torch.eye(d, dtype=torch.float64)[:, :, None] / c).expand(-1, -1, c)
    weights = {name: given[name].detach().double() if name in given else pooling
               for name in ("key_weight", "value_weight")}
    biases = {name: given[name].detach().double() if name in given else torch.zeros(d, dtype=torch.float64)
              for name in ("key_bias", "value_bias")}

    def convolve(rows: torch.Tensor, kind: str) -> torch.Tensor:
        weight, bias = weights[f"{kind}_weight"], biases[f"{kind}_bias"]
        blocks = range(math.ceil(len(rows) / c))
        return torch.stack([
            bias + sum(weight[:, :, j] @ rows[r * c + j] for j in range(c) if r * c + j < len(rows)) for r in blocks
        ])

    def one_query(query: torch.Tensor, k: torch.Tensor, v: torch.Tensor, t: int) -> torch.Tensor:
        return softmax_attention(query, convolve(k, "key"), convolve(v, "value"), scale)

    return per_query(queries, keys, values, key_valid, start_position, one_query)


#: The learned tensor of ``inducing``: the inducing queries (I, d), shared by the heads.
INDUCING_PARAMETERS: tuple[str, ...] = ("inducing_points",)


def inducing_attention(
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
    """``inducing`` (Set Transformer's inducing points, Lee et al. 2019, Sec. 3.2; ``srformer.attention.inducing``):
    for each inducing point ``I_i``, ``P_i = softmax_j(scale * I_i . K_j)`` over the example's real positions,
    ``K~_i = sum_j P_ij K_j``, ``V~_i = sum_j P_ij V_j``, and ``O[t] = softmax(scale * Q_t K~^T) V~``.
    ``parameters["inducing_points"]`` is ``I`` (I, d)."""
    check_call(settings, parameters, inducing_attention, INDUCING_PARAMETERS)
    points = _required(parameters, "inducing_points")

    def one_query(query: torch.Tensor, k: torch.Tensor, v: torch.Tensor, t: int) -> torch.Tensor:
        rows = [torch.softmax(scale * (k @ point), dim=0) for point in points]  # P_i over the n positions
        summary_keys = torch.stack([row @ k for row in rows])
        summary_values = torch.stack([row @ v for row in rows])
        return softmax_attention(query, summary_keys, summary_values, scale)

    return per_query(queries, keys, values, key_valid, start_position, one_query)
