"""Which encoder keys/values the softmax part of each cross-attention variant reads at step ``t``.

All variants share the segment schedule ``i(t)`` (Algorithm 1) and the compacted key layout of
:class:`~srformer.attention.state.CrossAttentionState` (real positions first, segment ``j`` at
compacted positions ``j*s .. j*s + s - 1``):

* ``segmented`` / ``srformer`` (Eq. 6, ``O_S``): the ``s`` keys of segment ``i(t)``.
* ``xl`` (Transformer-XL-style memory, Dai et al. 2019; ``docs/design.md``, "Baselines and ablations"): segment
  ``i(t)`` and segment ``i(t) - 1``, whose keys/values are a stop-gradient memory (2s keys; at
  ``i(t) = 0`` only the current segment).
* ``longt5`` (LongT5-style transient global tokens, Guo et al. 2022): segment ``i(t)`` plus one
  global token per segment of the example, the mean of that segment's real keys/values (s + m keys;
  the current segment's own global token included, as in LongT5's TGlobal attention).

Padding never receives attention weight: masks cover only real positions and existing segments.
"""

from __future__ import annotations

import torch

from srformer.attention.state import CrossAttentionState, accumulation_dtype, required

#: Variants whose softmax term is computed here.
SOFTMAX_VARIANTS: tuple[str, ...] = ("segmented", "srformer", "xl", "longt5")


def global_tokens(
    keys: torch.Tensor, values: torch.Tensor, segment_valid: torch.Tensor
) -> tuple[torch.Tensor, torch.Tensor, torch.Tensor]:
    """LongT5-style global tokens: the mean of each segment's real keys and values.

    Args:
        keys: (B, H, M*s, d) compacted keys, zero at padded positions.
        values: (B, H, M*s, d) compacted values, zero at padded positions.
        segment_valid: (B, M, s) bool, real positions of each segment.

    Returns:
        ``(global_keys, global_values, global_valid)``: (B, H, M, d) each in the keys' dtype
        (averaged in float32 or wider), and (B, M) bool, True for segments that hold a real token.
    """
    batch, heads, _, d = keys.shape
    max_segments, s = segment_valid.shape[1:]
    count = segment_valid.sum(dim=2)  # (B, M)
    wide = accumulation_dtype(keys.dtype)
    divisor = count.clamp(min=1).to(wide)[:, None, :, None]
    global_keys = keys.to(wide).view(batch, heads, max_segments, s, d).sum(dim=3) / divisor
    global_values = values.to(wide).view(batch, heads, max_segments, s, d).sum(dim=3) / divisor
    return global_keys.to(keys.dtype), global_values.to(values.dtype), count > 0


def parallel_context(
    variant: str, state: CrossAttentionState, segments_of_query: torch.Tensor, segment_size: int
) -> tuple[torch.Tensor, torch.Tensor, torch.Tensor]:
    """Keys, values and mask for all ``q`` queries at once (teacher forcing).

    Args:
        variant: one of :data:`SOFTMAX_VARIANTS`.
        state: a standard-layout state (keys/values present; global tokens for ``longt5``).
        segments_of_query: (B, q) long, ``i(t)`` of each query.
        segment_size: ``s`` in tokens.

    Returns:
        ``(keys, values, allowed)``: keys/values (B, H, n, d) and allowed (B, q, n) bool for one
        masked ``scaled_dot_product_attention``. For ``xl`` with gradients enabled, ``n = 2*M*s``:
        the keys appear twice, the second copy detached and allowed only for segment ``i(t) - 1``,
        so the memory segment gets no gradient; without gradients the copy is skipped.
    """
    keys, values = required(state.keys, "keys"), required(state.values, "values")
    n = keys.shape[2]
    key_positions = torch.arange(n, device=keys.device)
    key_segment = torch.div(key_positions, segment_size, rounding_mode="floor")[None, None, :]  # (1, 1, n)
    real = (key_positions[None, :] < state.lengths[:, None])[:, None, :]  # (B, 1, n)
    current = (key_segment == segments_of_query[:, :, None]) & real  # (B, q, n)
    if variant in ("segmented", "srformer"):
        return keys, values, current
    if variant == "xl":
        previous = (key_segment == segments_of_query[:, :, None] - 1) & real
        if torch.is_grad_enabled() and (keys.requires_grad or values.requires_grad):
            return (
                torch.cat([keys, keys.detach()], dim=2),
                torch.cat([values, values.detach()], dim=2),
                torch.cat([current, previous], dim=2),
            )
        return keys, values, current | previous
    if variant == "longt5":
        q = segments_of_query.shape[1]
        global_valid = required(state.global_valid, "global_valid")[:, None, :].expand(-1, q, -1)
        return (
            torch.cat([keys, required(state.global_keys, "global_keys")], dim=2),
            torch.cat([values, required(state.global_values, "global_values")], dim=2),
            torch.cat([current, global_valid], dim=2),
        )
    raise ValueError(f"Variant {variant!r} has no segment-based softmax context; expected one of {SOFTMAX_VARIANTS}.")


def step_context(
    variant: str, state: CrossAttentionState, segment: torch.Tensor, segment_size: int
) -> tuple[torch.Tensor, torch.Tensor, torch.Tensor]:
    """Keys, values and mask for one decoder step, gathered from a standard-layout state.

    Args:
        variant: one of :data:`SOFTMAX_VARIANTS`.
        state: a standard-layout state.
        segment: (B,) long, ``i(t)`` of each example.
        segment_size: ``s`` in tokens.

    Returns:
        ``(keys, values, allowed)``: (B, H, n, d) twice and (B, n) bool with ``n`` = s (segmented,
        srformer), 2s (xl) or s + M (longt5).
    """
    all_keys, all_values = required(state.keys, "keys"), required(state.values, "values")
    segment_valid = required(state.segment_valid, "segment_valid")
    batch, heads, padded, d = all_keys.shape
    max_segments = padded // segment_size
    rows = torch.arange(batch, device=segment.device)
    key_blocks = all_keys.view(batch, heads, max_segments, segment_size, d)
    value_blocks = all_values.view(batch, heads, max_segments, segment_size, d)
    keys, values = key_blocks[rows, :, segment], value_blocks[rows, :, segment]  # (B, H, s, d)
    allowed = segment_valid[rows, segment]  # (B, s)
    if variant in ("segmented", "srformer"):
        return keys, values, allowed
    if variant == "xl":
        previous = (segment - 1).clamp(min=0)
        previous_allowed = segment_valid[rows, previous] & (segment > 0)[:, None]
        return (
            torch.cat([keys, key_blocks[rows, :, previous]], dim=2),
            torch.cat([values, value_blocks[rows, :, previous]], dim=2),
            torch.cat([allowed, previous_allowed], dim=1),
        )
    if variant == "longt5":
        return (
            torch.cat([keys, required(state.global_keys, "global_keys")], dim=2),
            torch.cat([values, required(state.global_values, "global_values")], dim=2),
            torch.cat([allowed, required(state.global_valid, "global_valid")], dim=1),
        )
    raise ValueError(f"Variant {variant!r} has no segment-based softmax context; expected one of {SOFTMAX_VARIANTS}.")
