"""Shared pieces of the float64 references: the schedule (paper Sec. 3.1, Algorithm 1), one query's
softmax attention, the per-query driver and the argument checks."""

from __future__ import annotations

import math
from collections.abc import Callable, Mapping
from typing import TYPE_CHECKING

import torch

from srformer.core import REGISTRY

if TYPE_CHECKING:
    from srformer.core import SRformerConfig

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


def parameter(parameters: Mapping[str, torch.Tensor] | None, name: str, default: float | None) -> torch.Tensor:
    """A learned tensor in float64, or its initial value ``default`` when not given."""
    if parameters is not None and name in parameters:
        return parameters[name].detach().to(torch.float64)
    if default is None:
        raise ValueError(
            f"The reference needs the learned tensor {name!r} in `parameters` (e.g. dict(module.state_dict()))."
        )
    return torch.tensor(float(default), dtype=torch.float64)


def check_call(
    settings: SRformerConfig,
    parameters: Mapping[str, torch.Tensor] | None,
    reference: Callable[..., torch.Tensor],
    known_parameters: tuple[str, ...] = (),
) -> None:
    """Reject settings of a variant whose registry entry names another reference than ``reference`` (the calling
    reference itself: its variant's name is written in the registry only), and learned tensors the mechanism does
    not have (a renamed module parameter would otherwise be replaced silently by its initial value)."""
    entry = REGISTRY.get(settings.variant)
    if entry is None or entry.reference is not reference:
        owners = " or ".join(repr(name) for name, other in REGISTRY.items() if other.reference is reference)
        raise ValueError(
            f"This is the reference of variant {owners or reference.__name__}, got settings.variant="
            f"{settings.variant!r}; use srformer.core.mechanism(variant).reference."
        )
    unknown = sorted(set(parameters or {}) - set(known_parameters))
    if unknown:
        raise ValueError(
            f"`parameters` holds {unknown}, which variant {settings.variant!r} does not have; it reads "
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
