"""Softmax cross attention over a fixed summary of the encoder: the base of ``linformer``, ``compressed`` and
``inducing`` (``docs/design.md``, "Mechanisms of the efficient-transformer literature").

Each of these mechanisms maps one example's ``n`` real encoder keys and values (compacted: its real positions,
in order, so left and right padding give the same summary) to ``r`` summary keys ``K~`` and values ``V~``
(``r x d`` per head) once per sequence, in :meth:`SummaryCrossAttention.summarise`, and every decoder query
attends the summary with one softmax::

    O[t] = softmax(scale * Q_t K~^T) V~          (over the summary rows that exist)

No segments (``segment_size`` and the schedule are unused). A decoder step costs ``O(r·d)`` per head, the state
holds ``2·r·d`` numbers per head (in float32, or the keys' dtype when wider), and attention dropout (training
only) applies to the probabilities over the summary rows. An example without real encoder positions has no
summary row and its output is that of an empty memory, 0.
"""

from __future__ import annotations

from dataclasses import dataclass

import torch
from torch.nn import functional as F

from srformer.attention.schedule import compaction_order, real_lengths
from srformer.attention.segment_free import SegmentFreeCrossAttention
from srformer.attention.state import CrossAttentionState, accumulation_dtype, autocast_off


@dataclass(kw_only=True)
class SummaryState(CrossAttentionState):
    """The state of a summary mechanism: its ``r`` summary keys and values per head, in float32 or wider.
    ``num_segments`` is 1 (no segments). ``r`` does not depend on the encoder length (``linformer``,
    ``inducing``), so the state is its own lean layout.

    Attributes:
        summary_keys: (B, H, r, d) ``K~``.
        summary_values: (B, H, r, d) ``V~``.
        summary_valid: (B, r) bool, True at the summary rows an example has (none for an empty document).
    """

    summary_keys: torch.Tensor
    summary_values: torch.Tensor
    summary_valid: torch.Tensor

    is_lean = True

    def anchors(self) -> tuple[torch.Tensor, torch.Tensor]:  # noqa: D102 - see the base class
        return self.summary_keys, self.summary_values


def compact(
    keys: torch.Tensor, values: torch.Tensor, key_valid: torch.Tensor | None
) -> tuple[torch.Tensor, torch.Tensor, torch.Tensor, torch.Tensor]:
    """Each example's real positions moved to the front, in order, and the padding after them zeroed.

    Args:
        keys, values: (B, H, k, d). key_valid: (B, k) bool, True at real positions, or None (nothing padded).

    Returns:
        ``(keys, values, valid, lengths)``: keys and values (B, H, k, d) compacted (zero at padding), ``valid``
        (B, k) bool (``valid[b, p] = p < lengths[b]``) and the real lengths (B,) long.
    """
    batch, heads, k, d = keys.shape
    lengths, padded = real_lengths(key_valid, batch, k, keys.device)
    valid = torch.arange(k, device=keys.device)[None, :] < lengths[:, None]
    if padded and key_valid is not None:  # real_lengths reports padding only for a given mask
        order = compaction_order(key_valid.to(device=keys.device, dtype=torch.bool))
        index = order[:, None, :, None].expand(-1, heads, -1, d)
        keep = valid[:, None, :, None].to(keys.dtype)
        keys = torch.gather(keys, 2, index) * keep
        values = torch.gather(values, 2, index) * keep
    return keys, values, valid, lengths


class SummaryCrossAttention(SegmentFreeCrossAttention):
    """Softmax attention of every decoder query over a per-sequence summary (see the module docstring); a
    subclass defines :meth:`summarise` (its registry entry names it). Same interface as
    :class:`~srformer.attention.segmented.SegmentedCrossAttention`.

    Args:
        config: SRformer settings of a variant whose registry entry names this class.
        head_dim: ``d``, size of one attention head.
        scale: the wrapped model's attention scale (T5: 1.0, BART: ``d^-0.5``), applied to ``Q_t K~^T``.

    Attributes:
        has_softmax: True (the output is a softmax over the summary rows). has_recurrence: False.

    Raises:
        ValueError: if ``config.variant`` is not a variant whose registry entry names this class.
    """

    #: The class of the state :meth:`init_state` builds.
    state_class: type[SummaryState] = SummaryState

    def summarise(
        self, keys: torch.Tensor, values: torch.Tensor, valid: torch.Tensor, lengths: torch.Tensor
    ) -> tuple[torch.Tensor, torch.Tensor, torch.Tensor]:
        """The summary of compacted keys and values (each example's real positions first, zero after them).

        Args:
            keys, values: (B, H, k, d) compacted, in the accumulation dtype.
            valid: (B, k) bool, ``valid[b, p] = p < lengths[b]``. lengths: (B,) long real lengths.

        Returns:
            ``(summary_keys, summary_values, summary_valid)``: (B, H, r, d), (B, H, r, d), (B, r) bool.
        """
        raise NotImplementedError

    def row_spread(self, keys: torch.Tensor, valid: torch.Tensor, lengths: torch.Tensor) -> torch.Tensor:
        """How each summary value is made of the encoder values, for the attention weights: ``S`` with
        ``V~ = S V`` (or, where no such ``S`` exists, the documented stand-in).

        Args:
            keys: (B, H, k, d) compacted keys in the accumulation dtype. valid: (B, k) bool. lengths: (B,) long.

        Returns:
            (B or 1, H or 1, r, k) over the compacted positions.
        """
        raise NotImplementedError

    def attention_weights(
        self, queries: torch.Tensor, keys: torch.Tensor, state: CrossAttentionState, key_valid: torch.Tensor | None
    ) -> torch.Tensor:
        """Weights over the encoder positions for ``output_attentions``: ``A = P S`` with ``P`` the probabilities
        over the summary rows (:meth:`probabilities`) and ``S`` the :meth:`row_spread`, laid out at the encoder
        positions (zero at padding; all-zero rows for an empty document).

        Args:
            queries: (B, H, q, d). keys: (B, H, k, d) projected encoder keys in encoder order.
            state: from :meth:`init_state`. key_valid: (B, k) bool, or None (nothing padded).

        Returns:
            (B, H, q, k) in the queries' dtype.
        """
        probabilities = self.probabilities(queries, state)
        compacted, _, valid, lengths = compact(keys.to(probabilities.dtype), keys.to(probabilities.dtype), key_valid)
        spread = self.row_spread(compacted, valid, lengths)
        weights = torch.matmul(probabilities, spread) * valid[:, None, None, :].to(probabilities.dtype)
        if key_valid is not None:  # compacted position p belongs to encoder position order[p]
            order = compaction_order(key_valid.to(device=keys.device, dtype=torch.bool))
            weights = torch.zeros_like(weights).scatter_(3, order[:, None, None, :].expand_as(weights), weights)
        return weights.to(queries.dtype)

    @autocast_off
    def init_state(self, keys: torch.Tensor, values: torch.Tensor, key_valid: torch.Tensor | None) -> SummaryState:
        """The summary of the real encoder positions (:meth:`summarise`), once per sequence.

        Args:
            keys: (B, H, k, d) projected encoder keys.
            values: (B, H, k, d) projected encoder values.
            key_valid: (B, k) bool, True at real encoder positions; None when nothing is padded.

        Returns:
            A :attr:`state_class` in float32 or the keys' dtype when wider.
        """
        wide = accumulation_dtype(keys.dtype)
        keys, values, valid, lengths = compact(keys.to(wide), values.to(wide), key_valid)
        summary_keys, summary_values, summary_valid = self.summarise(keys, values, valid, lengths)
        return self.state_class(
            lengths=lengths,
            num_segments=torch.ones_like(lengths),
            last_segment=torch.full_like(lengths, -1),
            summary_keys=summary_keys,
            summary_values=summary_values,
            summary_valid=summary_valid,
        )

    def probabilities(self, queries: torch.Tensor, state: CrossAttentionState) -> torch.Tensor:
        """``softmax(scale * Q K~^T)`` over each example's summary rows.

        Args:
            queries: (B, H, q, d). state: from :meth:`init_state`.

        Returns:
            (B, H, q, r) in the state's dtype; zero at missing rows, all zero for an example without rows.

        Raises:
            ValueError: for a state of another class.
        """
        if not isinstance(state, self.state_class):
            raise ValueError(
                f"{type(self).__name__} needs a {self.state_class.__name__}, got a {type(state).__name__}."
            )
        summary_keys = state.summary_keys
        logits = torch.matmul(queries.to(summary_keys.dtype), summary_keys.transpose(-1, -2)) * self.scale
        valid = state.summary_valid[:, None, None, :]
        # an example without rows takes a finite softmax (no NaN in values or gradients), then zeros
        logits = logits.masked_fill(~valid, float("-inf")).masked_fill(~valid.any(dim=-1, keepdim=True), 0.0)
        return torch.softmax(logits, dim=-1) * valid.to(logits.dtype)

    def _read(self, queries: torch.Tensor, state: CrossAttentionState, dropout: float) -> torch.Tensor:
        probabilities = self.probabilities(queries, state)
        if dropout > 0.0:
            probabilities = F.dropout(probabilities, p=dropout, training=True)
        assert isinstance(state, SummaryState)
        return torch.matmul(probabilities, state.summary_values).to(queries.dtype)
