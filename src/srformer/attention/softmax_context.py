"""Which encoder keys/values the softmax part of each cross-attention variant reads at step ``t``.

All variants share the segment schedule ``i(t)`` (Algorithm 1) and the segment-major key layout of
:class:`~srformer.attention.state.CrossAttentionState` (real positions compacted to the front, keys and
values as (B, M, H, s, d) blocks, block ``j`` holding compacted positions ``j*s .. j*s + s - 1``). A query
reads its segment's block by one ``index_select`` over the flattened (B*M) block axis, both in
generation (one block per example) and in training (one block per query): the softmax costs
``O(q*s*d)`` per head, not ``O(q*k*d)``:

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
from torch.nn import functional as F

from srformer.attention.registry import SEGMENT_SOFTMAX_VARIANTS
from srformer.attention.state import CrossAttentionState, accumulation_dtype, required

#: Variants whose softmax term is computed here (registry: a softmax part over the segment schedule).
SOFTMAX_VARIANTS: tuple[str, ...] = SEGMENT_SOFTMAX_VARIANTS


def block_index(segments: torch.Tensor, max_segments: int) -> torch.Tensor:
    """Flat index of segment blocks in a segment-major tensor whose first two axes (B, M) are flattened.

    Args:
        segments: (B, n) long, a segment index in ``[0, M - 1]`` per example and entry.
        max_segments: ``M``.

    Returns:
        (B*n,) long, ``b * M + segments[b, i]`` in row-major order.
    """
    batch = segments.shape[0]
    offsets = torch.arange(0, batch * max_segments, max_segments, device=segments.device)
    return (segments + offsets[:, None]).reshape(-1)


def take_blocks(blocks: torch.Tensor, index: torch.Tensor, count: int) -> torch.Tensor:
    """The blocks at ``index`` (from :func:`block_index`) of a (B, M, ...) segment-major tensor.

    One ``index_select`` over the flattened (B*M) axis: each block is contiguous, so this copies
    ``count`` dense blocks per example (no element-wise gather).

    Args:
        blocks: (B, M, ...) tensor whose (B, M) axes flatten to a view (the state's layout).
        index: (B*count,) long flat block index.
        count: blocks per example.

    Returns:
        (B, count, ...).
    """
    return blocks.flatten(0, 1).index_select(0, index).view(blocks.shape[0], count, *blocks.shape[2:])


def global_tokens(
    keys: torch.Tensor, values: torch.Tensor, segment_valid: torch.Tensor
) -> tuple[torch.Tensor, torch.Tensor, torch.Tensor]:
    """LongT5-style global tokens: the mean of each segment's real keys and values.

    Args:
        keys: (B, M, H, s, d) segment-major keys, zero at padded positions.
        values: (B, M, H, s, d) values, same layout.
        segment_valid: (B, M, s) bool, real positions of each segment.

    Returns:
        ``(global_keys, global_values, global_valid)``: (B, H, M, d) each in the keys' dtype
        (averaged in float32 or wider), and (B, M) bool, True for segments that hold a real token.
    """
    count = segment_valid.sum(dim=2)  # (B, M)
    wide = accumulation_dtype(keys.dtype)
    divisor = count.clamp(min=1).to(wide)[:, :, None, None]
    global_keys = (keys.to(wide).sum(dim=3) / divisor).transpose(1, 2).contiguous()
    global_values = (values.to(wide).sum(dim=3) / divisor).transpose(1, 2).contiguous()
    return global_keys.to(keys.dtype), global_values.to(values.dtype), count > 0


def parallel_softmax(
    variant: str,
    queries: torch.Tensor,
    state: CrossAttentionState,
    segments_of_query: torch.Tensor,
    scale: float,
    dropout: float = 0.0,
) -> torch.Tensor:
    """The softmax term for all ``q`` queries at once (teacher forcing), each query over its own keys.

    Every query gathers its segment's (H, s, d) block (``xl``: also the previous segment's block, a
    stop-gradient memory; ``longt5``: plus the M global tokens) and takes one softmax over them:
    ``O(q*s*d)`` work per head (``xl`` 2x, ``longt5`` ``O(q*(s+M)*d)``) instead of a masked softmax over
    all ``k`` keys; the function, and therefore its gradients, are the same.

    Args:
        variant: one of :data:`SOFTMAX_VARIANTS`.
        queries: (B, H, q, d) projected decoder queries.
        state: a standard-layout state (keys/values present; global tokens for ``longt5``).
        segments_of_query: (B, q) long, ``i(t)`` of each query.
        scale: the softmax scale (T5: 1, BART: head_dim^-0.5).
        dropout: dropout probability on the attention probabilities (training only).

    Returns:
        (B, H, q, d) in the queries' dtype.

    Raises:
        ValueError: for a variant without a segment-based softmax.
    """
    if variant not in SOFTMAX_VARIANTS:
        raise ValueError(
            f"Variant {variant!r} has no segment-based softmax context; expected one of {SOFTMAX_VARIANTS}."
        )
    keys, values = required(state.keys, "keys"), required(state.values, "values")
    segment_valid = required(state.segment_valid, "segment_valid")
    max_segments = segment_valid.shape[1]
    q = segments_of_query.shape[1]
    query_rows = queries.transpose(1, 2).unsqueeze(-2)  # (B, q, H, 1, d)
    index = block_index(segments_of_query, max_segments)
    block_keys = [take_blocks(keys, index, q).to(queries.dtype)]  # (B, q, H, s, d)
    block_values = [take_blocks(values, index, q).to(queries.dtype)]
    allowed = [take_blocks(segment_valid, index, q)]  # (B, q, s)
    if variant == "xl":
        previous = block_index((segments_of_query - 1).clamp(min=0), max_segments)
        block_keys.append(take_blocks(keys.detach(), previous, q).to(queries.dtype))
        block_values.append(take_blocks(values.detach(), previous, q).to(queries.dtype))
        allowed.append(take_blocks(segment_valid, previous, q) & (segments_of_query > 0)[:, :, None])
    scores = [torch.matmul(query_rows, block.transpose(-1, -2)) for block in block_keys]  # (B, q, H, 1, s)
    if variant == "longt5":
        global_keys = required(state.global_keys, "global_keys").to(queries.dtype)  # (B, H, M, d)
        scores.append(torch.einsum("bhqd,bhmd->bqhm", queries, global_keys).unsqueeze(-2))
        allowed.append(required(state.global_valid, "global_valid")[:, None, :].expand(-1, q, -1))
    mask = torch.cat(allowed, dim=-1)[:, :, None, None, :]  # (B, q, 1, 1, n)
    logits = (torch.cat(scores, dim=-1) * scale).masked_fill(~mask, float("-inf"))
    probabilities = torch.softmax(logits, dim=-1)  # every query has an allowed key (state invariant)
    if dropout > 0.0:
        probabilities = F.dropout(probabilities, p=dropout, training=True)
    parts = probabilities.split([score.shape[-1] for score in scores], dim=-1)
    output = torch.matmul(parts[0], block_values[0])  # (B, q, H, 1, d)
    if variant == "xl":
        output = output + torch.matmul(parts[1], block_values[1])
    output = output.squeeze(-2)
    if variant == "longt5":
        global_values = required(state.global_values, "global_values").to(queries.dtype)
        output = output + torch.einsum("bqhm,bhmd->bqhd", parts[-1].squeeze(-2), global_values)
    return output.transpose(1, 2)


def step_context(
    variant: str, state: CrossAttentionState, index: torch.Tensor, segment: torch.Tensor
) -> tuple[torch.Tensor, torch.Tensor, torch.Tensor]:
    """Keys, values and mask for one decoder step, read from a standard-layout state.

    Args:
        variant: one of :data:`SOFTMAX_VARIANTS`.
        state: a standard-layout state.
        index: (B,) long flat block index of ``i(t)`` (:func:`block_index`).
        segment: (B,) long, ``i(t)`` of each example.

    Returns:
        ``(keys, values, allowed)``: (B, H, n, d) twice and (B, n) bool with ``n`` = s (segmented,
        srformer), 2s (xl) or s + M (longt5). Each is one contiguous block per example (an
        ``index_select``), plus a concatenation for ``xl`` and ``longt5``.
    """
    all_keys, all_values = required(state.keys, "keys"), required(state.values, "values")
    segment_valid = required(state.segment_valid, "segment_valid")
    keys = all_keys.flatten(0, 1).index_select(0, index)  # (B, H, s, d)
    values = all_values.flatten(0, 1).index_select(0, index)
    allowed = segment_valid.flatten(0, 1).index_select(0, index)  # (B, s)
    if variant in ("segmented", "srformer"):
        return keys, values, allowed
    if variant == "xl":
        has_previous = segment > 0
        previous = index - has_previous.to(index.dtype)
        previous_allowed = segment_valid.flatten(0, 1).index_select(0, previous) & has_previous[:, None]
        return (
            torch.cat([keys, all_keys.flatten(0, 1).index_select(0, previous)], dim=2),
            torch.cat([values, all_values.flatten(0, 1).index_select(0, previous)], dim=2),
            torch.cat([allowed, previous_allowed], dim=1),
        )
    if variant == "longt5":
        return (
            torch.cat([keys, required(state.global_keys, "global_keys")], dim=2),
            torch.cat([values, required(state.global_values, "global_values")], dim=2),
            torch.cat([allowed, required(state.global_valid, "global_valid")], dim=1),
        )
    raise ValueError(f"Variant {variant!r} has no segment-based softmax context; expected one of {SOFTMAX_VARIANTS}.")
