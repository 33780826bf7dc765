"""Naive float64 references of every cross-attention mechanism, written straight from their equations.

Each function here computes one mechanism's output one example, one head and one decoder query at
a time, in float64, with Python loops over segments where the equations have them: clarity over
speed. They import nothing from the optimised modules (the mechanisms' modules, ``raf``), so the tests
that compare those modules with these functions compare two independent computations
(``tests/attention/test_variants.py``, ``tests/attention/test_naive.py``).

Every reference has the same signature, so the registry (:mod:`srformer.attention.registry`) can hold
one per mechanism::

    reference(queries, keys, values, key_valid, settings, *, scale=1.0, parameters=None, start_position=0)

Args (shared by every reference):
    queries: (B, H, q, d) decoder queries at positions ``start_position .. start_position + q - 1``.
    keys: (B, H, k, d) encoder keys.
    values: (B, H, k, d) encoder values.
    key_valid: (B, k) bool, True at real encoder positions; None when nothing is padded. Padding may
        sit anywhere: an example's real positions, in their order, are its encoder sequence
        (``docs/design.md``, "Padding"), so left and right padding give the same output.
    settings: the :class:`~srformer.config.SRformerConfig` of the mechanism (its variant, schedule
        ``segment_size``/``target_length``, ``norm_eps``, ``kv_clamp``, ``ablation``, ``recurrence``).
    scale: the model's attention scale (T5: 1.0, BART: head_dim^-0.5).
    parameters: the mechanism's learned tensors by their state-dict names in the module (SRformer:
        ``raf.linear.weight`` (d, d), ``raf.leak``, ``raf.threshold``, ``mix_logit``). ``raf.leak``,
        ``raf.threshold`` and ``mix_logit`` default to the settings' initial values; ``W`` has no
        deterministic initial value and must be given (except under ablation III, which has no ``W``).
    start_position: absolute decoder position ``t`` of the first query.

Returns (every reference): (B, H, q, d) float64.

Raises (every reference): ValueError for settings of another variant, a name in ``parameters`` the
mechanism does not have, or shapes that do not agree.

Notation (``docs/design.md``, "Notation"): one example has ``n`` real encoder positions, ``s`` is
``segment_size``, ``T`` is ``target_length``, ``m = ceil(n / s)`` segments, segment ``j`` holds real
positions ``j*s .. min((j + 1) * s, n) - 1`` and decoder position ``t`` attends segment
``i(t) = min(floor(t * m / T), m - 1)`` (paper Sec. 3.1, Algorithm 1, with the fixed ``T`` of the design).
An example without real positions (an empty document) attends an empty memory: its output is 0.
"""

from __future__ import annotations

import math
from collections.abc import Callable, Mapping
from typing import TYPE_CHECKING

import torch
from torch.nn import functional as F

if TYPE_CHECKING:
    from srformer.config import SRformerConfig

#: The learned tensors of ``srformer`` by their state-dict names: the RAF's ``W``, leak and threshold
#: (Appendix A.2) and the logit of the Eq. 10 mix.
SRFORMER_PARAMETERS: tuple[str, ...] = ("raf.linear.weight", "raf.leak", "raf.threshold", "mix_logit")

#: One query's output from its float64 query (d,), its example's real keys and values (n, d) each
#: (n >= 1) and its absolute decoder position ``t``.
QueryFunction = Callable[[torch.Tensor, torch.Tensor, torch.Tensor, int], torch.Tensor]


# ---------------------------------------------------------------------------------------------- schedule
def num_segments(length: int, segment_size: int) -> int:
    """``m = ceil(n / s)`` segments of ``n`` real encoder positions (paper Sec. 3.1, rounded up)."""
    return math.ceil(length / segment_size)


def segment_of(position: int, segments: int, target_length: int) -> int:
    """``i(t) = min(floor(t * m / T), m - 1)``: the segment decoder position ``t`` attends (Algorithm 1)."""
    return min(position * segments // target_length, segments - 1)


def segment_rows(segment: int, length: int, segment_size: int) -> slice:
    """Real positions of segment ``j``: ``j*s .. min((j + 1) * s, n) - 1`` (Sec. 3.1: ``K_{S_i} = K[i*s : (i+1)*s]``,
    the last segment shorter when ``s`` does not divide ``n``)."""
    return slice(segment * segment_size, min((segment + 1) * segment_size, length))


def visited_segments(segments: int, target_length: int) -> list[int]:
    """The segments the schedule attends at some position ``t >= 0``, in order. Every one when
    ``m <= T``; when ``m > T`` the schedule skips some (they never fire the RAF)."""
    return sorted({segment_of(t, segments, target_length) for t in range(target_length + 1)})


# ---------------------------------------------------------------------------------------------- building blocks
def softmax_attention(query: torch.Tensor, keys: torch.Tensor, values: torch.Tensor, scale: float) -> torch.Tensor:
    """``softmax(scale * Q_t K^T) V`` for one query (paper Eq. 1-2 and 5; Eq. 6 over one segment).

    Args:
        query: (d,). keys, values: (n, d) with n >= 1. scale: the model's attention scale.

    Returns:
        (d,).
    """
    return torch.softmax(scale * (keys @ query), dim=0) @ values


def raf_fire(
    membrane: torch.Tensor, raf_input: torch.Tensor, leak: torch.Tensor | float, threshold: torch.Tensor | float
) -> tuple[torch.Tensor, torch.Tensor]:
    """One RAF firing, paper Appendix A.2 (``docs/design.md``, "RAF neuron"), element-wise::

        mem = leak * mem + x;  y = mem / threshold - 1;  mem = mem - threshold * (y > 0);  out = relu(y)

    Args:
        membrane: (d, d) membrane before the firing.
        raf_input: (d, d) ``x = W P_i`` (the linear layer is applied by the caller).
        leak, threshold: the neuron's scalars.

    Returns:
        ``(membrane, out)``: the membrane after the soft reset and the output ``relu(y)``, both (d, d).
    """
    membrane = leak * membrane + raf_input
    y = membrane / threshold - 1.0
    membrane = membrane - threshold * (y > 0).to(membrane.dtype)
    return membrane, torch.relu(y)


def _parameter(parameters: Mapping[str, torch.Tensor] | None, name: str, default: float | None) -> torch.Tensor:
    """A learned tensor in float64, or its initial value ``default`` when not given."""
    if parameters is not None and name in parameters:
        return parameters[name].detach().to(torch.float64)
    if default is None:
        raise ValueError(
            f"The reference needs the learned tensor {name!r} in `parameters` (e.g. dict(module.state_dict()))."
        )
    return torch.tensor(float(default), dtype=torch.float64)


def _check_call(
    settings: SRformerConfig,
    parameters: Mapping[str, torch.Tensor] | None,
    variant: str,
    known_parameters: tuple[str, ...] = (),
) -> None:
    """Reject settings of another variant, and learned tensors the mechanism does not have (a renamed
    module parameter would otherwise be replaced silently by its initial value)."""
    if settings.variant != variant:
        raise ValueError(
            f"This is the reference of variant {variant!r}, got settings.variant={settings.variant!r}; "
            "use srformer.attention.registry.mechanism(variant).reference."
        )
    unknown = sorted(set(parameters or {}) - set(known_parameters))
    if unknown:
        raise ValueError(
            f"`parameters` holds {unknown}, which variant {variant!r} does not have; it reads "
            f"{list(known_parameters) or 'none'}."
        )


def per_query(
    queries: torch.Tensor,
    keys: torch.Tensor,
    values: torch.Tensor,
    key_valid: torch.Tensor | None,
    start_position: int,
    output_of_query: QueryFunction,
) -> torch.Tensor:
    """Apply ``output_of_query`` to every example, head and query in float64.

    Each example's real positions (``key_valid``) are taken in their order; an example without real
    positions gets output 0 (an empty memory).

    Args:
        queries: (B, H, q, d). keys, values: (B, H, k, d). key_valid: (B, k) bool or None.
        start_position: absolute decoder position of the first query.
        output_of_query: ``(query (d,), keys (n, d), values (n, d), t) -> (d,)``.

    Returns:
        (B, H, q, d) float64.

    Raises:
        ValueError: if the shapes do not match.
    """
    batch, heads, length, head_dim = queries.shape
    if keys.shape[:2] != (batch, heads) or keys.shape != values.shape or keys.shape[-1] != head_dim:
        raise ValueError(
            f"queries (B, H, q, d), keys and values (B, H, k, d) must agree; got {tuple(queries.shape)}, "
            f"{tuple(keys.shape)} and {tuple(values.shape)}."
        )
    if key_valid is not None and tuple(key_valid.shape) != (batch, keys.shape[2]):
        raise ValueError(f"key_valid must be (B, k) = {(batch, keys.shape[2])}, got {tuple(key_valid.shape)}.")
    output = torch.zeros(batch, heads, length, head_dim, dtype=torch.float64)
    for b in range(batch):
        real = slice(None) if key_valid is None else key_valid[b].to(torch.bool)
        for h in range(heads):
            example_keys = keys[b, h][real].detach().to(torch.float64)
            example_values = values[b, h][real].detach().to(torch.float64)
            if example_keys.shape[0] == 0:
                continue  # an empty document: the output of an empty memory, 0
            for position in range(length):
                query = queries[b, h, position].detach().to(torch.float64)
                output[b, h, position] = output_of_query(query, example_keys, example_values, start_position + position)
    return output


# ---------------------------------------------------------------------------------------------- mechanisms
def full_attention(
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
    """``full``: ``O[t] = softmax(scale * Q_t K^T) V`` over every real position (paper Eq. 1-2, 5)."""
    _check_call(settings, parameters, "full")
    return per_query(
        queries, keys, values, key_valid, start_position, lambda query, k, v, t: softmax_attention(query, k, v, scale)
    )


def segmented_attention(
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
    """``segmented``: ``O_S[t] = softmax(scale * Q_t K_{S_i}^T) V_{S_i}`` with ``i = i(t)`` (paper Eq. 4, 6)."""
    _check_call(settings, parameters, "segmented")
    s, target = settings.segment_size, settings.target_length

    def one_query(query: torch.Tensor, k: torch.Tensor, v: torch.Tensor, t: int) -> torch.Tensor:
        rows = segment_rows(segment_of(t, num_segments(len(k), s), target), len(k), s)
        return softmax_attention(query, k[rows], v[rows], scale)

    return per_query(queries, keys, values, key_valid, start_position, one_query)


def xl_attention(
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
    """``xl`` (Transformer-XL-style memory, Dai et al. 2019; paper Sec. 4.2): softmax over segment
    ``i(t) - 1`` and segment ``i(t)`` together (2s keys; at ``i(t) = 0`` the current segment only).
    The memory's stop-gradient changes gradients, not outputs, so it does not appear here."""
    _check_call(settings, parameters, "xl")
    s, target = settings.segment_size, settings.target_length

    def one_query(query: torch.Tensor, k: torch.Tensor, v: torch.Tensor, t: int) -> torch.Tensor:
        i = segment_of(t, num_segments(len(k), s), target)
        first = segment_rows(max(i - 1, 0), len(k), s).start
        rows = slice(first, segment_rows(i, len(k), s).stop)
        return softmax_attention(query, k[rows], v[rows], scale)

    return per_query(queries, keys, values, key_valid, start_position, one_query)


def window_attention(
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
    """``window`` (Longformer's sliding window, Beltagy et al. 2020, Sec. 3.1, centred by the schedule):
    softmax over the real positions ``p`` with ``start <= p < start + w``, ``start = i(t) * s + floor(s / 2) -
    floor(w / 2)``, ``w = settings.resolved_window_size()`` (the window cut at both ends of the input)."""
    _check_call(settings, parameters, "window")
    s, target, w = settings.segment_size, settings.target_length, settings.resolved_window_size()

    def one_query(query: torch.Tensor, k: torch.Tensor, v: torch.Tensor, t: int) -> torch.Tensor:
        start = segment_of(t, num_segments(len(k), s), target) * s + s // 2 - w // 2
        rows = slice(max(start, 0), min(start + w, len(k)))
        return softmax_attention(query, k[rows], v[rows], scale)

    return per_query(queries, keys, values, key_valid, start_position, one_query)


def strided_attention(
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
    """``strided`` (Sparse Transformer's strided/fixed pattern, Child et al. 2019, Sec. 4.2-4.3, the scheduled
    segment as its local part): softmax over the union of segment ``i(t)``'s real positions and the real
    positions ``p`` with ``p mod l = l - 1``, ``l = settings.resolved_stride()``, each position once."""
    _check_call(settings, parameters, "strided")
    s, target, stride = settings.segment_size, settings.target_length, settings.resolved_stride()

    def one_query(query: torch.Tensor, k: torch.Tensor, v: torch.Tensor, t: int) -> torch.Tensor:
        segment = segment_rows(segment_of(t, num_segments(len(k), s), target), len(k), s)
        rows = sorted(set(range(segment.start, segment.stop)) | set(range(stride - 1, len(k), stride)))
        return softmax_attention(query, k[rows], v[rows], scale)

    return per_query(queries, keys, values, key_valid, start_position, one_query)


def star_attention(
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
    """``star`` (Star-Transformer's relay node, Guo et al. 2019, Sec. 3, with the scheduled segment as the
    satellites' neighbourhood): softmax over segment ``i(t)`` plus one relay token whose key and value are the
    mean of all the example's real keys and values (s + 1 keys)."""
    _check_call(settings, parameters, "star")
    s, target = settings.segment_size, settings.target_length

    def one_query(query: torch.Tensor, k: torch.Tensor, v: torch.Tensor, t: int) -> torch.Tensor:
        rows = segment_rows(segment_of(t, num_segments(len(k), s), target), len(k), s)
        relay_key, relay_value = k.mean(dim=0, keepdim=True), v.mean(dim=0, keepdim=True)
        return softmax_attention(query, torch.cat([k[rows], relay_key]), torch.cat([v[rows], relay_value]), scale)

    return per_query(queries, keys, values, key_valid, start_position, one_query)


def longt5_attention(
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
    """``longt5`` (LongT5-style transient global tokens, Guo et al. 2022; paper Sec. 4.2): softmax over
    segment ``i(t)`` plus one global token per segment, whose key and value are the mean of that
    segment's real keys and values (s + m keys; the current segment's own global token included)."""
    _check_call(settings, parameters, "longt5")
    s, target = settings.segment_size, settings.target_length

    def one_query(query: torch.Tensor, k: torch.Tensor, v: torch.Tensor, t: int) -> torch.Tensor:
        m = num_segments(len(k), s)
        segments = [segment_rows(j, len(k), s) for j in range(m)]
        global_keys = torch.stack([k[rows].mean(dim=0) for rows in segments])  # (m, d)
        global_values = torch.stack([v[rows].mean(dim=0) for rows in segments])
        rows = segments[segment_of(t, m, target)]
        return softmax_attention(query, torch.cat([k[rows], global_keys]), torch.cat([v[rows], global_values]), scale)

    return per_query(queries, keys, values, key_valid, start_position, one_query)


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
    _check_call(settings, parameters, "linear")

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
    _check_call(settings, parameters, "fastformer", FASTFORMER_PARAMETERS)
    given = parameters.get("key_weight") if parameters is not None else None
    key_weight = torch.zeros(keys.shape[-1], dtype=torch.float64) if given is None else given.detach().double()

    def one_query(query: torch.Tensor, k: torch.Tensor, v: torch.Tensor, t: int) -> torch.Tensor:
        scores = [math.exp(float(key_weight @ k[j]) / math.sqrt(len(query))) for j in range(len(k))]
        beta = [score / sum(scores) for score in scores]
        global_key = sum(beta[j] * k[j] for j in range(len(k)))
        global_value = sum(beta[j] * v[j] for j in range(len(k)))
        return query * global_key * global_value

    return per_query(queries, keys, values, key_valid, start_position, one_query)


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
    _check_call(settings, parameters, "srformer", SRFORMER_PARAMETERS)
    s, target = settings.segment_size, settings.target_length
    ablation = settings.ablation
    recurrent = settings.recurrence
    softmax_part = ablation != "recurrent_only"
    use_raf = recurrent and ablation != "no_raf"
    weight = leak = threshold = torch.zeros(())  # unused without the RAF
    if use_raf:
        weight = _parameter(parameters, "raf.linear.weight", None)
        leak = _parameter(parameters, "raf.leak", settings.raf_leak_init)
        threshold = _parameter(parameters, "raf.threshold", settings.raf_threshold_init)
    sigma = None
    if settings.mix_init is not None and recurrent:
        initial_logit = math.log(settings.mix_init / (1.0 - settings.mix_init))
        sigma = torch.sigmoid(_parameter(parameters, "mix_logit", initial_logit))

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
                membrane, out = raf_fire(membrane, partial[j] @ weight.T, leak, threshold)  # x_j = W P_j
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
