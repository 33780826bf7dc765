"""Float64 references of ``srformer`` (paper Eq. 6, 10-16, Appendix A.2) and its ablations (Table 3), and of
``srformer-gated`` (the SRformer structure with the memory read as linear attention under one normaliser,
:mod:`srformer.attention.srformer_gated`)."""

from __future__ import annotations

import math
from collections.abc import Mapping
from typing import TYPE_CHECKING

import torch

from srformer.attention.naive.common import (
    check_call,
    num_segments,
    parameter,
    per_query,
    segment_of,
    segment_rows,
    softmax_attention,
    visited_segments,
)

if TYPE_CHECKING:
    from srformer.core import SRformerConfig


#: The learned tensors of ``srformer`` by their state-dict names: the RAF's ``W``, leak and threshold
#: (Appendix A.2) and the logit of the Eq. 10 mix.
SRFORMER_PARAMETERS: tuple[str, ...] = ("raf.linear.weight", "raf.leak", "raf.threshold", "mix_logit")


def raf_fire(
    membrane: torch.Tensor,
    raf_input: torch.Tensor,
    leak: torch.Tensor | float,
    threshold: torch.Tensor | float,
    *,
    two_sided: bool = False,
    surrogate_slope: float | None = None,
) -> tuple[torch.Tensor, torch.Tensor]:
    """One RAF firing, element-wise. The paper's neuron (Appendix A.2; ``docs/design.md``, "RAF neuron")::

        mem = leak * mem + x;  y = mem / threshold - 1;  mem = mem - threshold * (y > 0);  out = relu(y)

    The two-sided neuron (beyond the paper; ``docs/design.md``, "Two-sided neuron")::

        mem = leak * mem + x;  p = mem / threshold;  fired = |p| > 1
        mem = mem - threshold * sign(mem) * fired;  out = sign(p) * max(|p| - 1, 0)

    With ``surrogate_slope`` (``docs/design.md``, "Surrogate gradient") the output keeps its value and its
    gradient becomes that of ``softplus(slope * e) / slope`` (signed by ``p`` for the two-sided neuron), ``e``
    the distance past the threshold: the straight-through form ``out.detach() + (g - g.detach())``.

    Args:
        membrane: (d, d) membrane before the firing.
        raf_input: (d, d) ``x = W P_i`` (the linear layer is applied by the caller).
        leak, threshold: the neuron's scalars.
        two_sided: the two-sided neuron.
        surrogate_slope: None or the surrogate's slope.

    Returns:
        ``(membrane, out)``: the membrane after the soft reset and the output, both (d, d).
    """
    membrane = leak * membrane + raf_input
    if two_sided:
        potential = membrane / threshold
        fired = (potential.abs() > 1).to(membrane.dtype)
        out = torch.sign(potential) * torch.clamp(potential.abs() - 1.0, min=0.0)
        membrane = membrane - threshold * torch.sign(membrane) * fired
        excess = potential.abs() - 1.0
    else:
        potential = membrane / threshold - 1.0
        membrane = membrane - threshold * (potential > 0).to(membrane.dtype)
        out = torch.relu(potential)
        excess = potential
    if surrogate_slope is not None:
        smooth = torch.nn.functional.softplus(surrogate_slope * excess) / surrogate_slope
        if two_sided:
            smooth = torch.sign(potential) * smooth
        out = out.detach() + (smooth - smooth.detach())  # value of out, derivative of smooth
    return membrane, out


def srformer_attention(
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
    """``srformer``: segmented attention plus recurrent attention, ``O = O_S + O_R`` (paper Eq. 11).

    * ``O_S[t]``: Eq. 6, the softmax over segment ``i = i(t)``.
    * Products (Eq. 14-16): ``K^T V = sum_j K_j^T V_j`` and ``P_i = K^T V - K_i^T V_i``; with ``kv_clamp``
      both ``K^T V`` and ``K_i^T V_i`` are clamped to ``[-kv_clamp, kv_clamp]`` first (Appendix A.3).
    * RAF (Sec. 3.3, Appendix A.2, Algorithm 1): the input of segment ``j`` is ``x_j = W P_j`` with the
      bias-free ``W`` acting on the last axis (``x_j = P_j W^T``). The neuron fires once per visited
      segment, in order, from a zero membrane; ``out_i`` is its output after firing for segment ``i``.
      ``raf_neuron='two_sided'`` and ``raf_surrogate_slope`` change the neuron (:func:`raf_fire`).
    * ``norm(K)`` (Eq. 13, ``docs/design.md``): per key feature ``c``, ``sqrt(sum_positions K[., c]^2) + norm_eps``.
    * ``O_R[t] = (scale * Q_t) out_i / norm(K)`` (Eq. 13), divided feature-wise.
    * With ``mix_init``: ``O = sigma O_S + (1 - sigma) O_R``, ``sigma = sigmoid(mix_logit)`` (Eq. 10).
    * ``recurrence=False``: ``O = O_S``. Ablations (Table 3): (I) ``recurrent_only``: ``O = O_R``;
      (II) ``no_norm``: ``norm(K) = 1``; (III) ``no_raf``: ``out_i = P_i`` (no neuron, no ``W``);
      (IV) ``segment_products``: ``x_j = W K_j^T V_j`` instead of ``W P_j``.

    Raises:
        ValueError: for settings of another variant, for unknown names in ``parameters``, or without
            ``raf.linear.weight`` when the RAF is used.
    """
    check_call(settings, parameters, srformer_attention, SRFORMER_PARAMETERS)
    s, target = settings.resolved_segment_size(), settings.target_length
    ablation = settings.ablation
    recurrent = settings.recurrence
    softmax_part = ablation != "recurrent_only"
    use_raf = recurrent and ablation != "no_raf"
    weight = leak = threshold = torch.zeros(())  # unused without the RAF
    if use_raf:
        weight = parameter(parameters, "raf.linear.weight", None)
        leak = parameter(parameters, "raf.leak", settings.raf_leak_init)
        threshold = parameter(parameters, "raf.threshold", settings.raf_threshold_init)
    sigma = None
    if settings.mix_init is not None and recurrent:
        initial_logit = math.log(settings.mix_init / (1.0 - settings.mix_init))
        sigma = torch.sigmoid(parameter(parameters, "mix_logit", initial_logit))

    def clamp(x: torch.Tensor) -> torch.Tensor:
        return x if settings.kv_clamp is None else x.clamp(-settings.kv_clamp, settings.kv_clamp)

    def one_query(query: torch.Tensor, k: torch.Tensor, v: torch.Tensor, t: int) -> torch.Tensor:
        n, d = k.shape
        m = num_segments(n, s)
        i = segment_of(t, m, target)
        segments = [segment_rows(j, n, s) for j in range(m)]
        output_s = softmax_attention(query, k[segments[i]], v[segments[i]], scale) if softmax_part else None
        if not recurrent:
            assert output_s is not None
            return output_s
        products = [clamp(k[rows].T @ v[rows]) for rows in segments]  # K_j^T V_j, Eq. 15
        total = clamp(k.T @ v)  # K^T V, Eq. 14
        partial = [products[j] if ablation == "segment_products" else total - products[j] for j in range(m)]  # Eq. 16
        out = partial[i]  # ablation III: P_i itself
        if use_raf:
            membrane = torch.zeros(d, d, dtype=torch.float64)
            for j in visited_segments(m, target):  # Algorithm 1: fire once per new segment, up to i(t)
                membrane, out = raf_fire(  # x_j = W P_j
                    membrane, partial[j] @ weight.T, leak, threshold, two_sided=settings.raf_neuron == "two_sided",
                    surrogate_slope=settings.raf_surrogate_slope,
                )
                if j == i:
                    break
        if ablation == "no_norm":
            key_norm = torch.ones(d, dtype=torch.float64)
        else:  # norm(K): the L2 norm of each key feature over the real positions, plus eps
            key_norm = k.pow(2).sum(dim=0).sqrt() + settings.norm_eps
        output_r = (scale * query) @ out / key_norm  # Eq. 13
        if output_s is None:
            return output_r
        if sigma is not None:
            return sigma * output_s + (1 - sigma) * output_r  # Eq. 10
        return output_s + output_r  # Eq. 11

    return per_query(queries, keys, values, key_valid, start_position, one_query)


def gated_attention(
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
    """Float64 reference: one normalised mix over the example's real positions, ``e^{scale q.k_p}`` for ``p`` in
    segment ``i(t)`` and ``phi(q) . phi(k_p)`` for every other ``p`` (the module docstring's ``O_t``), computed
    per position as a softmax over the log-weights.

    ``parameters`` must hold ``projection`` (D', d) for ``feature_map="taylor"`` (e.g. ``module.state_dict()``);
    nothing for ``elu``."""
    taylor = settings.resolved_feature_map() == "taylor"
    check_call(settings, parameters, gated_attention, ("projection",) if taylor else ())
    s, target = settings.resolved_segment_size(), settings.target_length
    projection = None
    if taylor:
        if parameters is None or "projection" not in parameters:
            raise ValueError("The reference needs `parameters['projection']` for feature_map='taylor'.")
        projection = parameters["projection"].detach().to(torch.float64)

    def phi(x: torch.Tensor) -> torch.Tensor:
        if projection is None:
            return torch.where(x > 0, x + 1.0, torch.exp(x))  # elu(x) + 1
        y = projection @ x
        size = len(y)
        second = torch.outer(y, y).reshape(-1) / math.sqrt(2 * size)
        return torch.cat([torch.ones(1, dtype=y.dtype), y / size**0.25, second])

    def one_query(query: torch.Tensor, k: torch.Tensor, v: torch.Tensor, t: int) -> torch.Tensor:
        rows = segment_rows(segment_of(t, num_segments(len(k), s), target), len(k), s)
        inside = torch.zeros(len(k), dtype=torch.bool)
        inside[rows] = True
        kernel = torch.stack([phi(query) @ phi(key) for key in k])
        log_weights = torch.where(inside, scale * (k @ query), kernel.log())
        return torch.softmax(log_weights, dim=0) @ v

    return per_query(queries, keys, values, key_valid, start_position, one_query)
