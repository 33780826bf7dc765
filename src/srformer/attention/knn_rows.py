"""``knn`` searching the encoder output's rows where they are (``knn_index="rows"``): Unlimiformer's retrieval
(Bertsch et al. 2023, Sec. 2.3) without an index.

Unlimiformer searches the encoder hidden states ``h_j`` with the query rewritten as ``W_k^T Q_t``: ``Q_t . K_j =
(W_k^T Q_t) . h_j + Q_t . b_k``, the bias term the same for every ``j``, so the order of the keys is the order of
``(W_k^T Q_t) . h_j``. Here that search is exhaustive and runs in torch on the encoder output's own device: one
batched matrix product of every head's hidden query with every row, one ``topk`` of order keys that carries the tie
rule (:func:`~srformer.attention.selection.ranked_top`: ties to the earlier position, padding last), one indexing of
the ``min(K, k)`` rows each head chose, and the softmax over them in the hidden space, projected by ``W_v``
(:meth:`~srformer.attention.projection.HeadProjection.attend_rows`). The same keys as the exact search of ``knn``
(which keeps every layer's projected keys) up to the rounding of the scores, and the same output up to rounding.

* **State**: the encoder output itself (held, not copied: generation keeps it anyway), shared by every layer, and per
  layer an order-key term and an additive mask per position (12 bytes per position, against ``4·H·d`` bytes of
  projected bfloat16 keys and values per position in full attention's cache). A beam reorder copies the encoder
  output once for all layers (:class:`~srformer.attention.state.SharedMapping`).
* **Step**: ``O(k·D)`` multiply-adds per head, ``H`` times the exact search's ``O(k·d)``, reading the same ``k·D``
  numbers for every head: half the bytes of full attention's keys and values, in more multiply-adds. Off the CPU
  (:mod:`srformer.attention.step_choice`) a fixed sequence of 18 operator calls per layer whatever ``k`` in float32
  (21 with a value bias), no host sync; on the CPU the selection is one ``topk`` and a host read of whether a tie
  at the cut is left out (free there), the order keys only where one is.
* **Build**: none beyond the mask's two terms, no host sync: the layout is chosen by the padded input length
  (``index_min_keys``), not by a read of the real lengths.
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import ClassVar

import torch

from srformer.attention.projection import HeadProjection
from srformer.attention.schedule import real_lengths, tracing
from srformer.attention.segmented import cast
from srformer.attention.selection import position_order, ranked_top
from srformer.attention.state import CrossAttentionState, accumulation_dtype
from srformer.attention.step_choice import step_kind

__all__ = ["ROWS_INDEX", "RowsKNNState", "rows_state", "rows_step"]

#: The ``knn_index`` value of this layout.
ROWS_INDEX = "rows"


@dataclass(kw_only=True)
class RowsKNNState(CrossAttentionState):
    """The generation state of ``knn`` searching the encoder output's rows (module docstring). ``num_segments`` is
    1. B = batch (times beams), k = padded encoder length, D = d_model.

    Attributes:
        rows: (B, k, D) the encoder output (the same tensor in every layer's state; not counted by :meth:`nbytes`:
            generation holds it anyway).
        rank_order: (B, 1, k) float64, each position's term of the order keys
            (:func:`~srformer.attention.selection.position_order`): ``-inf`` at padding; an example without real
            keys has every position's term as if it were real (its order keys stay finite, so a softmax over them
            does too; :attr:`has_keys` makes its output 0).
        key_bias: (B, k) float32 (float64 for a float64 encoder output), 0 at real positions and float32's lowest
            number at padding: the softmax's additive mask of the chosen rows.
        has_keys: (B, 1, 1, 1) in the same dtype, 1 for an example with a real key, 0 for one without (output 0).
        projection: the layer's key/value projections per head, their views made at the build.
    """

    rows: torch.Tensor
    rank_order: torch.Tensor
    key_bias: torch.Tensor
    has_keys: torch.Tensor
    projection: HeadProjection

    is_lean: ClassVar[bool] = True
    reads_encoder_rows: ClassVar[bool] = True

    def anchors(self) -> tuple[torch.Tensor, torch.Tensor]:  # noqa: D102 - see the base class
        return self.lengths, self.rank_order

    def nbytes(self) -> int:
        """Bytes of the state's own tensors: every field but :attr:`rows`, the encoder output."""
        return super().nbytes() - self.rows.numel() * self.rows.element_size()


def rows_state(
    encoder_states: torch.Tensor, key_valid: torch.Tensor | None, projection: HeadProjection
) -> RowsKNNState:
    """The state of one layer (module docstring), without a host sync.

    Args:
        encoder_states: (B, k, D) the encoder output.
        key_valid: (B, k) bool, True at real positions, or None when nothing is padded.
        projection: the layer's key/value projections per head.

    Raises:
        ValueError: for more than ``2^25`` encoder positions (what the order keys keep apart).
    """
    batch, length, _ = encoder_states.shape
    device = encoder_states.device
    lengths, _ = real_lengths(key_valid, batch, length, device)
    real = (torch.ones(batch, length, dtype=torch.bool, device=device) if key_valid is None
            else key_valid.to(device=device, dtype=torch.bool))
    wide = accumulation_dtype(encoder_states.dtype)
    bias = torch.zeros(batch, length, dtype=wide, device=device).masked_fill_(~real, torch.finfo(torch.float32).min)
    return RowsKNNState(
        lengths=lengths, num_segments=torch.ones_like(lengths), last_segment=torch.full_like(lengths, -1),
        rows=encoder_states, rank_order=position_order((real | ~real.any(dim=-1, keepdim=True))[:, None, :]),
        key_bias=bias,
        has_keys=(lengths > 0).to(wide).view(batch, 1, 1, 1), projection=projection.kept(),
    )


def rows_step(
    queries: torch.Tensor, state: RowsKNNState, top_keys: int, scale: float, example: torch.Tensor
) -> torch.Tensor:
    """One decoder position (module docstring): each head reads the ``min(K, k)`` rows of largest
    ``(W_k^T Q_t) . h_j`` (ties to the earlier position, padding last), its softmax over their keys and values
    computed in the absorbed form. The scores are computed in the encoder output's dtype (no copy of it), the
    softmax in float32 or wider.

    Args:
        queries: (B, H, 1, d) projected decoder query.
        state: from :func:`rows_state`.
        top_keys: ``K``.
        scale: the model's attention scale.
        example: (B, 1, 1) long, ``arange(B)``: the first index of the rows' indexing (kept by the caller).

    Returns:
        (B, H, 1, d) in the queries' dtype.
    """
    rows, projection = state.rows, state.projection
    batch, heads = queries.shape[:2]
    width = min(top_keys, rows.shape[1])
    wide = torch.float64 if torch.float64 in (queries.dtype, rows.dtype) else torch.float32
    with torch.no_grad(), torch.autocast(device_type=queries.device.type, enabled=False):
        hidden_queries = projection.step_hidden_queries(queries, wide)  # (B, H, 1, D)
        # (B, k, D) x (B, D, H), read as (B, H, k): the rows as the product's left operand take half the time of
        # their transpose on the right on a CPU (one thread, 16,384 rows: 3.9 against 8.7 ms per layer)
        scores = torch.bmm(rows, cast(hidden_queries.view(batch, heads, -1), rows.dtype).mT).mT
        if step_kind(queries.device) == "cpu" and not tracing():
            chosen = _cpu_top(scores, state, width)
        else:
            # the rows are finite (the state's check) and so are the queries: a score past float32's range would
            # only rank its row first, so ranked_top skips its nan_to_num
            chosen = ranked_top(scores, state.rank_order, width, finite=True)  # (B, H, S)
    hidden = cast(rows[example, chosen], wide)  # (B, H, S, D)
    bias = cast(state.key_bias[example, chosen].view(batch, heads, 1, width), wide)
    if torch.is_grad_enabled():  # the selection carries no gradient; the softmax over the chosen rows does
        hidden_queries = projection.step_hidden_queries(queries, wide)
    output = projection.attend_rows(hidden_queries, hidden, bias, scale, has_keys=cast(state.has_keys, wide))
    return cast(output, queries.dtype)


def _cpu_top(scores: torch.Tensor, state: RowsKNNState, width: int) -> torch.Tensor:
    """The CPU's selection, the same positions as :func:`~srformer.attention.selection.ranked_top`'s: one ``topk``
    of the scores (B, H, k) with the padding's bias added, whose ``width`` first positions are the answer unless a
    score tied at the cut is left out, checked by a host read (free on a CPU; the order keys' passes over every
    score cost it about 15x the ``topk``'s time at 65,536 tokens); where one is, the order keys settle it."""
    batch, _, length = scores.shape
    masked = scores + state.key_bias.view(batch, 1, length)
    if width == length:
        return torch.topk(masked, width, dim=-1, sorted=False).indices
    top = torch.topk(masked, width + 1, dim=-1)
    if bool((top.values[..., width - 1] == top.values[..., width]).any()):
        return ranked_top(scores, state.rank_order, width, finite=True)
    return top.indices[..., :width]
