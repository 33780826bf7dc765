"""The base of the content-based sparse cross attentions (``reformer``, ``routing``): a decoder query attends,
with one softmax, a fixed number ``S`` of encoder keys chosen by its content and the keys' content (an LSH
bucket's chunks, a k-means cluster's members).

Which keys a query reads depends on the query's and the keys' content, not on the segment schedule, so these
mechanisms have no segments (``segment_size``/``target_length`` are unused) and their output does not depend on
the decoder position. A subclass builds its per-sequence layout in :meth:`ContentSparseCrossAttention.init_state`
(a subclass of :class:`ContentState`: bucket-sorted key order, cluster members) and says which keys a query reads
in :meth:`ContentSparseCrossAttention.slots`: ``S`` encoder positions per query (a fixed number, set by the
settings and the padded encoder length, never by the data) and a mask of the slots that count. This base does
the rest, the same in the parallel path and in a decoder step:

* gather the ``S`` keys and values of every query, ``O_t = sum_s softmax_s(scale * Q_t . K_{p_s} | mask) V_{p_s}``;
  a position listed in two slots (two hash rounds that both find it) counts twice, as in the paper's combination
  of rounds (``srformer.attention.reformer``);
* a query without any unmasked slot (only an example without real keys, an empty document) has output 0 (an
  empty memory), as in every mechanism.

Cost per head and query: ``O(S·d)`` for the gather, scores and weighted sum, plus what the subclass needs to
choose the slots (hashing or routing the query, ``O(d·b)`` or ``O(d·c)``): independent of the encoder length
``k`` once ``S`` is fixed. No host synchronisation and no data-dependent shape: a batch of any content runs the
same kernels. The attention weights (:meth:`ContentSparseCrossAttention.probabilities`) scatter the slot
probabilities back to encoder positions, ``(B, H, q, k)``, and only they cost ``O(q·k)``.
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import TYPE_CHECKING

import torch
from torch.nn import functional as F

from srformer.attention.schedule import real_lengths
from srformer.attention.segment_free import SegmentFreeCrossAttention
from srformer.attention.state import CrossAttentionState, accumulation_dtype
from srformer.core import MechanismSettings

if TYPE_CHECKING:
    from srformer.core import SRformerConfig


@dataclass(frozen=True)
class ContentSettings(MechanismSettings):
    """The settings of the ``reformer`` and ``routing`` variant (``SRformerConfig(variant='reformer', ...)``;
    None: the default named below).

    Attributes:
        content_seed: seed of the random draws of the content-based variants (``reformer``'s rotations, ``routing``'s
            initial centroids), stored with the model as a buffer. A non-negative integer. None (default): 0.
            ``reformer`` and
    """

    content_seed: int | None = None

    def validate(self, config: SRformerConfig) -> None:
        """``content_seed``: None or a non-negative integer."""
        seed = self.resolved_content_seed(config)
        if isinstance(seed, bool) or not isinstance(seed, int) or seed < 0:
            raise ValueError(f"`content_seed` must be a non-negative integer, got {seed!r}.")

    def resolved_content_seed(self, config: SRformerConfig) -> int:
        """The seed of the random draws: ``content_seed``, or 0 when it is None."""
        return self.content_seed if self.content_seed is not None else 0


@dataclass(kw_only=True)
class ContentState(CrossAttentionState):
    """The fields every content-based sparse attention's state has (``reformer``, ``routing``); each mechanism
    extends it with its layout. ``num_segments`` is 1.

    Attributes:
        keys: (B, H, k, d) projected encoder keys, in encoder order (padding included), contiguous.
        values: (B, H, k, d) projected encoder values, contiguous.
        key_valid: (B, k) bool, True at real encoder positions.
    """

    keys: torch.Tensor
    values: torch.Tensor
    key_valid: torch.Tensor

    def anchors(self) -> tuple[torch.Tensor, torch.Tensor]:  # noqa: D102 - see the base class
        return self.keys, self.values

    def encoder_keys(self, encoder_length: int) -> torch.Tensor:
        """The keys, (B, H, k, d) in encoder order, zeroed at padded positions (as every state presents them)."""
        return self.keys * self.key_valid[:, None, :, None].to(self.keys.dtype)

    def encoder_values(self, encoder_length: int) -> torch.Tensor:
        """The values, as :meth:`encoder_keys`."""
        return self.values * self.key_valid[:, None, :, None].to(self.values.dtype)


def unit_rows(x: torch.Tensor) -> torch.Tensor:
    """``x / ||x||`` along the last axis (a zero row stays zero)."""
    return x / x.norm(dim=-1, keepdim=True).clamp_min(torch.finfo(x.dtype).tiny)


def gather_rows(x: torch.Tensor, positions: torch.Tensor) -> torch.Tensor:
    """The rows ``x[b, h, positions[b, h, t, s]]``: ``O(S·d)`` per query and head, reading nothing else.

    Args:
        x: (B, H, k, d), contiguous (the states store their keys and values so; another ``x`` is copied first).
        positions: (B, H, q, S) long in ``[0, k)``.

    Returns:
        (B, H, q, S, d).
    """
    batch, heads, k, d = x.shape
    # one index_select over the flattened rows: on CPU about ten times faster than advanced indexing or a gather
    # with an index expanded over d (they copy element by element)
    rows = torch.arange(batch * heads, device=positions.device).view(batch, heads, 1, 1) * k + positions
    return x.contiguous().view(batch * heads * k, d).index_select(0, rows.reshape(-1)).view(*positions.shape, d)


def slot_softmax(queries: torch.Tensor, keys: torch.Tensor, mask: torch.Tensor, scale: float) -> torch.Tensor:
    """Each query's softmax over its own slots: ``softmax_s(scale * Q_t . K_s)`` over the unmasked slots.

    Args:
        queries: (B, H, q, d). keys: (B, H, q, S, d), each query's slot keys. mask: (B, H, q, S) bool, the slots
            that count. scale: the model's attention scale.

    Returns:
        (B, H, q, S) in the queries' dtype, zero at masked slots; a row without any unmasked slot (an example without
        real keys) takes a finite softmax (no NaN in values or gradients), then zeros.
    """
    logits = torch.einsum("bhqd,bhqsd->bhqs", queries, keys) * scale
    some = mask.any(dim=-1, keepdim=True)
    logits = logits.masked_fill(~mask, float("-inf")).masked_fill(~some, 0.0)
    return torch.softmax(logits, dim=-1) * some.to(logits.dtype)


def content_base_state(keys: torch.Tensor, values: torch.Tensor, key_valid: torch.Tensor | None) -> ContentState:
    """The :class:`ContentState` fields of a sequence (a subclass's ``init_state`` extends them).

    Args:
        keys, values: (B, H, k, d). key_valid: (B, k) bool or None (nothing padded).
    """
    batch, _, k, _ = keys.shape
    lengths, _ = real_lengths(key_valid, batch, k, keys.device)
    if key_valid is None:
        valid = torch.ones(batch, k, dtype=torch.bool, device=keys.device)
    else:
        valid = key_valid.to(device=keys.device, dtype=torch.bool)
    return ContentState(
        lengths=lengths,
        num_segments=torch.ones_like(lengths),
        last_segment=torch.full_like(lengths, -1),
        keys=keys.contiguous(),  # once per sequence, so that a step's gather reads whole rows (gather_rows)
        values=values.contiguous(),
        key_valid=valid,
    )


class ContentSparseCrossAttention(SegmentFreeCrossAttention):
    """Base of :class:`~srformer.attention.reformer.ReformerCrossAttention` and
    :class:`~srformer.attention.routing.RoutingCrossAttention`; same interface as
    :class:`~srformer.attention.segmented.SegmentedCrossAttention` (see the module docstring).

    Args:
        config: SRformer settings of a variant whose registry entry names this class.
        head_dim: ``d``, size of one attention head.
        scale: the wrapped model's attention scale (T5: 1.0, BART: head_dim^-0.5), used by the softmax.

    Attributes:
        has_softmax: True (the output is one softmax over encoder positions); has_recurrence: False.

    Raises:
        ValueError: if ``config.variant`` is not a variant whose registry entry names this class.
    """

    # ------------------------------------------------------------------ what a subclass defines
    def codes(self, vectors: torch.Tensor) -> torch.Tensor:
        """The group (bucket, cluster) of every vector in each round.

        Args:
            vectors: (B, H, n, d) queries or keys, in float32 or wider.

        Returns:
            (B, H, R, n) long, in ``[0, number of groups)``.
        """
        raise NotImplementedError

    def init_state(self, keys: torch.Tensor, values: torch.Tensor, key_valid: torch.Tensor | None) -> ContentState:
        """The per-sequence layout (once per sequence).

        Args:
            keys: (B, H, k, d) projected encoder keys.
            values: (B, H, k, d) projected encoder values.
            key_valid: (B, k) bool, True at real encoder positions; None when nothing is padded.
        """
        raise NotImplementedError

    def slots(self, queries: torch.Tensor, state: CrossAttentionState) -> tuple[torch.Tensor, torch.Tensor]:
        """The encoder positions every query reads.

        Args:
            queries: (B, H, q, d) projected decoder queries.
            state: this mechanism's state from :meth:`init_state`.

        Returns:
            ``(positions, mask)``: (B, H, q, S) long in ``[0, k)`` and (B, H, q, S) bool (the slots that count;
            a masked slot's position is arbitrary).
        """
        raise NotImplementedError

    # ------------------------------------------------------------------ shared
    def wide_codes(self, vectors: torch.Tensor) -> torch.Tensor:
        """:meth:`codes` of ``vectors`` in float32 or wider, without gradient and with autocast off (a group id
        must not depend on whether bf16 autocast is on around the float32 arithmetic that decides it)."""
        with torch.no_grad(), torch.autocast(device_type=vectors.device.type, enabled=False):
            return self.codes(vectors.detach().to(accumulation_dtype(vectors.dtype)))

    def _state(self, state: CrossAttentionState) -> ContentState:
        if not isinstance(state, ContentState):
            raise ValueError(f"{type(self).__name__} needs a ContentState, got a {type(state).__name__}.")
        return state

    def slot_probabilities(
        self, queries: torch.Tensor, state: CrossAttentionState
    ) -> tuple[torch.Tensor, torch.Tensor]:
        """The softmax of every query over its slots (:meth:`slots`).

        Args:
            queries: (B, H, q, d) projected decoder queries.
            state: this mechanism's state.

        Returns:
            ``(positions, probabilities)``: (B, H, q, S) long and (B, H, q, S) in the queries' dtype, zero at masked
            slots; a row sums to 1, or is all zero for an example without real keys.
        """
        content = self._state(state)
        positions, mask = self.slots(queries, content)
        keys = gather_rows(content.keys, positions).to(queries.dtype)  # (B, H, q, S, d)
        return positions, slot_softmax(queries, keys, mask, self.scale)

    def probabilities(self, queries: torch.Tensor, state: CrossAttentionState) -> torch.Tensor:
        """The attention weights at encoder positions: each slot's probability added at its position (a position
        read by two slots gets both). ``O = A V`` exactly.

        Args:
            queries: (B, H, q, d) projected decoder queries.
            state: this mechanism's state.

        Returns:
            (B, H, q, k) in the queries' dtype; rows sum to 1, all-zero rows for an empty document.
        """
        positions, probabilities = self.slot_probabilities(queries, state)
        content = self._state(state)
        weights = probabilities.new_zeros(*probabilities.shape[:3], content.keys.shape[2])
        return weights.scatter_add(-1, positions, probabilities)

    def _read(self, queries: torch.Tensor, state: CrossAttentionState, dropout: float) -> torch.Tensor:
        positions, probabilities = self.slot_probabilities(queries, state)
        if dropout > 0.0:
            probabilities = F.dropout(probabilities, p=dropout, training=True)
        values = gather_rows(self._state(state).values, positions).to(queries.dtype)
        return torch.einsum("bhqs,bhqsd->bhqd", probabilities, values)
