"""Cross-attention weights for ``output_attentions=True``: what each variant's softmax attends to, laid out
over the encoder positions as transformers returns them, (B, H, q, k).

transformers' eager attention returns ``softmax(scale * Q K^T + mask)``, one distribution over all ``k``
encoder positions per query and head. An SRformer layer's output is not one such distribution
(``docs/design.md``, "Attention weights"), so the weights returned are the part of the output that is one:

* ``segmented`` / ``srformer`` (and its ablations II-IV, and ``mix_init``): the softmax of ``O_S`` over the
  ``s`` keys of segment ``i(t)`` (Eq. 6), at those keys' encoder positions. ``O_S = A V`` exactly; the
  recurrent term ``O_R`` (Eq. 13-16) is added on top and is not a weighted sum of values (RAF's firing is a
  non-linear function of all ``K_j^T V_j`` products), so it has no weights. With ``mix_init`` the output is
  ``sigma * A V + (1 - sigma) * O_R``; ``A`` itself is returned (rows sum to 1).
* ``xl``: the softmax over segment ``i(t)`` and its memory, segment ``i(t) - 1``.
* ``longt5``: the softmax over segment ``i(t)`` and the ``m`` global tokens. A global token is the mean of
  its segment's real keys and values, so its probability times its value is that probability spread evenly
  over the segment's real positions times their values: spread that way, ``A V`` is again exactly the
  output, and the row is a distribution over encoder positions (positions of segment ``i(t)`` get their
  local probability plus their share of its global token).
* ``bigbird``: the softmax over segment ``i(t)``, its random blocks and the global positions, each at its own
  encoder position.
* ``compressive``: the softmax over segment ``i(t)``, its memory and the compressed rows of the older segments,
  each row's probability spread evenly over its window's real positions (a row is their mean).
* ``adaptive``: the softmax of the scores plus ``log m_z(x)`` (the soft span mask, renormalised) at the read
  positions.
* ``bp``: the softmax over segment ``i(t)`` and its span nodes, each node's probability spread evenly over the
  real positions it spans (a node is their mean).
* ``srformer`` ablation I (``recurrent_only``): no softmax term, so zeros (the output is all ``O_R``).
* ``fastformer``: its additive weights ``beta_j`` (Eq. 5), the same for every query: ``V_g = beta V`` and the
  output is ``Q_t * K_g * (A V)`` (element-wise), so ``A`` is the distribution the values are pooled with.
* ``reformer``, ``routing`` (content-based): the softmax over the keys the query reads (its bucket inside two
  chunks of the bucket-sorted keys in every round, or the chunks unmasked when the bucket is empty; its cluster's
  ``w`` keys), at their encoder positions; a key read in two hash rounds gets the sum. ``O = A V`` exactly.
* ``linformer``: ``A = P F`` with ``P`` the softmax over the ``r`` projected rows and ``F`` the value projection
  over the example's positions, so ``O = A V`` exactly; ``F`` is a learned real matrix, so these weights may be
  negative and their rows need not sum to 1
  (:meth:`~srformer.attention.summary.SummaryCrossAttention.attention_weights`).
* ``performer``: ``A[t, j] = phi(Q_t) . phi(K_j) / (phi(Q_t) . sum_l phi(K_l))`` with its random features
  (:meth:`~srformer.attention.performer.PerformerCrossAttention.attention_weights`): ``O = A V`` exactly,
  non-negative, rows summing to 1 (the FAVOR+ estimate of the softmax, not the softmax itself).
* ``compressed``: the softmax over the ``ceil(n/c)`` compressed rows, each row's probability spread evenly over
  the real positions of its block: a distribution over the encoder positions (rows sum to 1), but not one with
  ``O = A V`` (the learned convolution mixes the features of the block's values).
* ``inducing``: ``A = p P`` with ``p`` the softmax over the ``I`` pooled rows and ``P`` the inducing points'
  pooling weights over the positions: ``O = A V`` exactly, non-negative, rows summing to 1.
* ``linear`` (see :func:`linear_weights`): the linear-attention weights
  ``phi(Q_t) . phi(K_j) / (phi(Q_t) . sum_l phi(K_l) + eps)``, for which ``O = A V`` exactly; they are
  non-negative and sum to ``S / (S + eps)`` with ``S = phi(Q_t) . sum_l phi(K_l)`` (1 up to ``eps / S``).

* A module that defines ``attention_weights`` gives its own: ``block-topk`` and ``quest`` (the softmax over its
  segment and the blocks it selected for that query and head, ``O = A V`` exactly), ``knn`` (the softmax over the
  top-k keys, as ``reformer`` and ``routing``), ``srformer-gated`` (its output is ``g A V`` plus the normalised
  memory: ``A`` is the softmax over the scheduled segment, ``g`` the share of the shared normaliser it holds).

Every variant: zeros at padded positions and outside the attended keys; an example with no real encoder
token (an empty memory, output 0) gets all-zero rows.

The weights are recomputed from the queries, the encoder keys and the state, only when they are asked for, and
without host synchronisation. The layer's output is then computed from them
(:meth:`~srformer.attention.base.CrossAttentionMechanism.output_from_weights`), so they are in the autograd graph
and carry ``d(loss)/d(A)``; the output equals the one without weights up to rounding. In training they are the
probabilities before attention dropout.
"""

from __future__ import annotations

import torch
from torch.nn import functional as F

from srformer.attention.base import CrossAttentionMechanism
from srformer.attention.content import ContentSparseCrossAttention
from srformer.attention.fastformer import FastformerCrossAttention, additive_weights
from srformer.attention.layout import block_index, take_blocks
from srformer.attention.linear import LinearCrossAttention, LinearState, feature_map
from srformer.attention.performer import PerformerCrossAttention
from srformer.attention.schedule import segment_index
from srformer.attention.segmented import LeanSegmentState, SegmentedCrossAttention, SegmentState, restrict
from srformer.attention.state import CrossAttentionState
from srformer.attention.summary import SummaryCrossAttention


def segment_weights(
    attention: SegmentedCrossAttention,
    queries: torch.Tensor,
    keys: torch.Tensor,
    state: SegmentState | LeanSegmentState,
    *,
    start_position: int | torch.Tensor,
) -> torch.Tensor:
    """The softmax weights of a segment-based module for ``q`` consecutive decoder positions: its
    :meth:`~srformer.attention.segmented.SegmentedCrossAttention.context_blocks` at their encoder positions,
    and its :meth:`~srformer.attention.segmented.SegmentedCrossAttention.global_tokens` spread over the
    positions they summarise (:meth:`~srformer.attention.segmented.SegmentedCrossAttention.global_token_spread`).

    Args:
        attention: the layer's module (read: ``settings.target_length``, ``scale`` and its hooks).
        queries: (B, H, q, d) projected decoder queries at positions ``start_position ..``.
        keys: (B, H, k, d) projected encoder keys in encoder order (not compacted).
        state: the layer's state, either layout (``positions``, ``segment_valid``, ``num_segments``,
            ``lengths``; ``longt5``: its global tokens).
        start_position: absolute decoder position of the first query (an int or a 0-d long tensor).

    Returns:
        (B, H, q, k) in the queries' dtype; each row sums to 1 over the keys it attends (see the module
        docstring), zero elsewhere; all-zero rows for an example without real encoder tokens.
    """
    batch, heads, q, d = queries.shape
    k = keys.shape[2]
    segment_valid = state.segment_valid  # (B, M, s)
    max_segments, s = segment_valid.shape[1:]
    position_blocks = state.positions.to(torch.long).view(batch, max_segments, s)
    positions = torch.arange(q, device=queries.device) + start_position
    segments = segment_index(positions, state.num_segments, attention.settings.target_length)  # (B, q) i(t)
    encoder_positions, allowed = [], []
    blocks = attention.state_context_blocks(
        state, segments.reshape(-1), block_index(segments, max_segments), max_segments
    )
    for flat, extra_mask, _ in blocks:
        encoder_positions.append(take_blocks(position_blocks, flat, q))  # (B, q, s)
        allowed.append(restrict(take_blocks(segment_valid, flat, q), extra_mask))
    local_positions = torch.cat(encoder_positions, dim=-1)  # (B, q, n)
    n = local_positions.shape[-1]
    gathered = keys.to(queries.dtype).gather(
        2, local_positions.view(batch, 1, q * n, 1).expand(-1, heads, -1, d)
    ).view(batch, heads, q, n, d)
    logits = [torch.einsum("bhqd,bhqnd->bhqn", queries, gathered)]
    tokens = attention.global_tokens(state)
    if tokens is not None:
        global_keys, _, global_valid = tokens  # (B, H, G, d), (B, G)
        logits.append(torch.matmul(queries, global_keys.to(queries.dtype).transpose(-1, -2)))  # (B, H, q, G)
        allowed.append(attention.global_token_allowed(state, global_valid, segments))
    mask = torch.cat(allowed, dim=-1)[:, None]  # (B, 1, q, n [+ M])
    logits_all = torch.cat(logits, dim=-1) * attention.scale
    bias = attention.block_bias(logits_all.dtype)
    if bias is not None:  # (H or 1, n): the blocks' log-weights (adaptive span); global tokens get none
        logits_all = logits_all + F.pad(bias, (0, logits_all.shape[-1] - bias.shape[-1]))[None, :, None, :]
    probabilities = torch.softmax(logits_all.masked_fill(~mask, float("-inf")), dim=-1)
    weights = queries.new_zeros(batch, heads, q, k)
    # masked keys have probability exactly 0, so the positions they carry (padding) receive nothing
    weights.scatter_add_(3, local_positions[:, None].expand(-1, heads, -1, -1), probabilities[..., :n])
    if tokens is not None:  # each global token's probability, spread over the positions it summarises
        spread = attention.global_token_spread(state).to(probabilities.dtype)  # (B, G, M*s)
        token_weights = torch.matmul(probabilities[..., n:], spread[:, None])  # (B, H, q, M*s)
        all_positions = position_blocks.view(batch, 1, 1, max_segments * s).expand(-1, heads, q, -1)
        weights.scatter_add_(3, all_positions, token_weights)
    return weights * (state.lengths > 0).to(weights.dtype)[:, None, None, None]


def linear_weights(
    queries: torch.Tensor,
    keys: torch.Tensor,
    state: LinearState,
    key_valid: torch.Tensor | None,
    eps: float,
) -> torch.Tensor:
    """The weights of linear attention, ``A[t, j] = phi(Q_t) . phi(K_j) / (phi(Q_t) . sum_l phi(K_l) + eps)``
    (Katharopoulos et al. 2020, Eq. 4-6), so that the ``linear`` output is ``A V`` exactly.

    Args:
        queries: (B, H, q, d) projected decoder queries.
        keys: (B, H, k, d) projected encoder keys in encoder order.
        state: the ``linear`` state (its ``linear_key_sum`` is the normaliser's ``sum_l phi(K_l)``).
        key_valid: (B, k) bool, True at real encoder positions, or None (nothing padded).
        eps: the normaliser's ``eps`` (``SRformerConfig.norm_eps``).

    Returns:
        (B, H, q, k) in the queries' dtype: non-negative, zero at padded positions, rows summing to
        ``S / (S + eps)``, ``S = phi(Q_t) . sum_l phi(K_l)``; all-zero rows for an example without real tokens.
    """
    key_sum = state.linear_key_sum  # (B, H, d), accumulation dtype
    query_features = feature_map(queries.to(key_sum.dtype))
    key_features = feature_map(keys.to(key_sum.dtype))
    if key_valid is not None:
        key_features = key_features * key_valid.to(device=keys.device, dtype=key_features.dtype)[:, None, :, None]
    numerator = torch.matmul(query_features, key_features.transpose(-1, -2))  # (B, H, q, k)
    denominator = (query_features * key_sum[:, :, None, :]).sum(dim=-1, keepdim=True) + eps
    return (numerator / denominator).to(queries.dtype)


def cross_attention_weights(
    attention: CrossAttentionMechanism,
    queries: torch.Tensor,
    keys: torch.Tensor,
    state: CrossAttentionState,
    *,
    start_position: int | torch.Tensor,
    key_valid: torch.Tensor | None,
) -> torch.Tensor:
    """The weights of one layer's SRformer cross attention (see the module docstring), for its variant.

    Args:
        attention: the layer's SRformer module (a
            :class:`~srformer.attention.segmented.SegmentedCrossAttention` or subclass, or a
            :class:`~srformer.attention.linear.LinearCrossAttention`).
        queries: (B, H, q, d) projected decoder queries at positions ``start_position ..``.
        keys: (B, H, k, d) projected encoder keys in encoder order.
        state: the layer's state for this sequence.
        start_position: absolute decoder position of the first query (an int or a 0-d long tensor).
        key_valid: (B, k) bool, True at real encoder positions, or None (read by ``linear`` only: the
            segment-based variants take the real positions from the state).

    Returns:
        (B, H, q, k) in the queries' dtype.
    """
    if isinstance(attention, ContentSparseCrossAttention):  # the softmax over the query's bucket or cluster
        return attention.probabilities(queries, state)
    if isinstance(attention, SummaryCrossAttention | PerformerCrossAttention):  # their own definitions (above)
        return attention.attention_weights(queries, keys, state, key_valid)
    if isinstance(attention, FastformerCrossAttention):  # beta, the same for every query
        weights = additive_weights(keys.to(queries.dtype), attention.key_weight.to(queries.dtype), key_valid)
        return weights[:, :, None, :].expand(-1, -1, queries.shape[2], -1)
    if isinstance(attention, LinearCrossAttention):
        assert isinstance(state, LinearState), type(state)
        return linear_weights(queries, keys, state, key_valid, attention.settings.norm_eps)
    own_weights = getattr(attention, "attention_weights", None)
    if not isinstance(attention, SegmentedCrossAttention):  # every other segment-free module is above
        assert own_weights is not None, type(attention)  # a module outside both families gives its own (quest)
        return own_weights(queries, keys, state, key_valid, start_position=start_position)
    if not attention.has_softmax:  # srformer's ablation I: no softmax term, the output is O_R alone
        return queries.new_zeros(*queries.shape[:3], keys.shape[2])
    if own_weights is not None:  # a segment-based module whose choice of keys the block hooks cannot express
        return own_weights(queries, keys, state, key_valid, start_position=start_position)
    assert isinstance(state, SegmentState | LeanSegmentState), type(state)
    return segment_weights(attention, queries, keys, state, start_position=start_position)
