"""Segmented cross attention (paper Eq. 4 and 6, Algorithm 1), the ``segmented`` variant, and the base of every
mechanism that attends with a softmax to the scheduled segment (``srformer``, ``xl``, ``longt5``).

Decoder position ``t`` attends with softmax to the ``s`` keys of segment ``i(t) = floor(t * m / T)``
(:mod:`srformer.attention.schedule`). :class:`SegmentedCrossAttention` holds what the segment-based
mechanisms share: the segment-major state (:mod:`srformer.attention.layout`), the schedule and its check,
the parallel path (every query gathers its own segment's block: ``O(q*s*d)`` per head, not ``O(q*k*d)``),
the incremental path (one block per step, no host sync) and the lean layout (each step projects its
segment's rows of the encoder output). A subclass changes what the softmax reads through two hooks,
:meth:`~SegmentedCrossAttention.context_blocks` (further segment blocks: ``xl``'s memory; or
:meth:`~SegmentedCrossAttention.state_context_blocks` when they depend on the example: ``bigbird``) and
:meth:`~SegmentedCrossAttention.global_tokens` (a fixed set of summary tokens: ``longt5``; with
:meth:`~SegmentedCrossAttention.global_token_allowed` when a query may read only some), and may add a
term to the output (``srformer``'s recurrent attention) by overriding :meth:`~SegmentedCrossAttention._output`
and :meth:`~SegmentedCrossAttention._step_output`.

Padding never receives attention weight: masks cover only real positions and existing segments.
"""

from __future__ import annotations

import warnings
from dataclasses import dataclass, replace
from typing import TYPE_CHECKING

import torch
from torch.nn import functional as F

from srformer.attention.base import CrossAttentionMechanism, ProjectBlock, ProjectRows
from srformer.attention.layout import block_index, segment_major, segment_order, take_blocks
from srformer.attention.schedule import kept_per_shape, num_segments, real_lengths, segment_at, segment_index, tracing
from srformer.attention.state import CrossAttentionState, autocast_off, rows_in_encoder_order
from srformer.core import mechanism

if TYPE_CHECKING:
    from srformer.core import SRformerConfig


@dataclass(kw_only=True)
class SegmentState(CrossAttentionState):
    """Standard-layout state of the segment-based mechanisms: the projected keys and values, segment-major.

    Shapes: B = batch (times beams), H = heads, d = head_dim, s = segment_size, M = the largest number of
    segments in the batch, T = ``target_length``. Memory per head: ``2*k*d`` numbers (paper Table 1).

    Attributes:
        keys: (B, M, H, s, d) segment-major keys: block ``j`` holds compacted positions ``j*s .. j*s + s - 1``
            (each example's real positions moved to the front, zeros after them, so padding never enters
            a segment, ``K^T V`` or ``norm(K)``).
        values: (B, M, H, s, d) values, same layout.
        positions: (B, M*s) int32, the encoder position of each compacted position (the lean layout
            gathers its segment's rows of the encoder output with it; the attention weights scatter to it).
        segment_table: (B, T+1) long, ``i(t)`` for ``t = 0 .. T`` (later steps use column T).
        segment_valid: (B, M, s) bool, the positions a softmax may attend: the real ones, and for an
            empty document all of segment 0 (zero keys and values, so its output is 0).
        segment_bias: (B, M, 1, 1, s) ``segment_valid`` as the additive mask a step hands to
            ``scaled_dot_product_attention`` (0 where attendable, the dtype's lowest number elsewhere:
            :func:`additive_mask`), in the keys' dtype: a step
            reads its block with one ``index_select`` instead of building the mask (three operator calls fewer per
            layer and token); None in a state built without it (the step then builds the mask).
    """

    keys: torch.Tensor
    values: torch.Tensor
    positions: torch.Tensor
    segment_table: torch.Tensor
    segment_valid: torch.Tensor
    segment_bias: torch.Tensor | None = None

    def anchors(self) -> tuple[torch.Tensor, torch.Tensor]:  # noqa: D102 - see the base class
        return self.keys, self.values

    def encoder_keys(self, encoder_length: int) -> torch.Tensor:
        """The keys moved back from the segment-major blocks to encoder order, (B, H, k, d), zero at padded
        positions: one scatter, O(k*d) per head, computed at each call."""
        return self._in_encoder_order(self.keys, encoder_length)

    def encoder_values(self, encoder_length: int) -> torch.Tensor:
        """The values in encoder order, as :meth:`encoder_keys`."""
        return self._in_encoder_order(self.values, encoder_length)

    def _in_encoder_order(self, blocks: torch.Tensor, encoder_length: int) -> torch.Tensor:
        batch, max_segments, heads, s, d = blocks.shape
        rows = blocks.permute(0, 2, 1, 3, 4).reshape(batch, heads, max_segments * s, d)
        # slots past an example's real positions hold zero rows and position 0, so adding them changes nothing
        return rows_in_encoder_order(rows, self.positions, encoder_length)


@dataclass(kw_only=True)
class LeanSegmentState(CrossAttentionState):
    """Lean-layout state of ``segmented`` (and the base of ``srformer``'s): no encoder-length keys/values.

    Each step projects its segment's ``s`` rows of the encoder output, which ``generate()`` hands to every
    layer anyway; the projection is kept until the segment changes.

    Attributes:
        positions, segment_table, segment_valid: as in :class:`SegmentState`.
        segment_keys: (B, H, s, d) the current segment's projected keys (zero at padding), kept from the step
            that entered the segment; None before the first step.
        segment_values: (B, H, s, d) the current segment's projected values; None before the first step.
        segment_allowed: (B, s) bool, the current segment's attendable positions; None before the first step.
    """

    positions: torch.Tensor
    segment_table: torch.Tensor
    segment_valid: torch.Tensor
    segment_keys: torch.Tensor | None = None
    segment_values: torch.Tensor | None = None
    segment_allowed: torch.Tensor | None = None

    is_lean = True
    reads_encoder_rows = True

    def anchors(self) -> tuple[torch.Tensor, torch.Tensor]:  # noqa: D102 - see the base class
        return self.positions, self.positions


def restrict(block_allowed: torch.Tensor, extra_mask: torch.Tensor | None) -> torch.Tensor:
    """A block's attendable positions ``block_allowed`` (..., s) bool, restricted by a
    :meth:`SegmentedCrossAttention.context_blocks` mask: None (no restriction), (N,) bool (per block) or
    (N, s) bool (per position), N being the product of ``block_allowed``'s leading dimensions."""
    if extra_mask is None:
        return block_allowed
    if extra_mask.dim() == 1:
        return block_allowed & extra_mask.view(block_allowed.shape[:-1])[..., None]
    return block_allowed & extra_mask.view(block_allowed.shape)


def additive_mask(allowed: torch.Tensor, dtype: torch.dtype) -> torch.Tensor:
    """(B, M, s) bool attendable positions as the (B, M, 1, 1, s) additive attention mask of ``dtype``: 0 where
    True, the dtype's lowest finite number where False (``scaled_dot_product_attention`` adds it to the scaled
    scores: a masked score becomes that number or ``-inf``, whose ``exp`` is 0 next to any attendable position's,
    so the softmax equals the masked one exactly; finite, so that the state passes the NaN/inf check)."""
    batch, max_segments, s = allowed.shape
    bias = torch.zeros(batch, max_segments, 1, 1, s, dtype=dtype, device=allowed.device)
    return bias.masked_fill_(~allowed.view(batch, max_segments, 1, 1, s), torch.finfo(dtype).min)


def cast(tensor: torch.Tensor, dtype: torch.dtype) -> torch.Tensor:
    """``tensor.to(dtype)``, skipped (no dispatcher call) when the dtype already matches: a decode step
    is a few dozen small operations, so even no-op calls show in its time."""
    return tensor if tensor.dtype == dtype else tensor.to(dtype)


class SegmentedCrossAttention(CrossAttentionMechanism):
    """The ``segmented`` variant for one decoder layer, and the base of the segment-based mechanisms.

    Args:
        config: the SRformer settings; ``config.variant`` must be a variant whose registry entry names this class.
        head_dim: ``d``, size of one attention head.
        scale: the wrapped model's attention scale (T5: 1.0, BART: head_dim^-0.5), used by the softmax.

    The settings are kept as ``.settings``: by transformers' convention the ``.config`` of any
    submodule is the model's ``PretrainedConfig``.

    Attributes:
        has_softmax: a softmax term is part of the output (False only under ``srformer``'s ablation I).
        has_recurrence: a recurrent term ``O_R`` is part of the output (``srformer`` only).

    Raises:
        ValueError: for a variant this class does not compute (use
            :func:`srformer.attention.build_cross_attention`, which reads the registry).
    """

    def __init__(self, config: SRformerConfig, head_dim: int, scale: float = 1.0) -> None:
        super().__init__(config, head_dim, scale)
        self._offsets: dict[tuple[int, int, torch.device], torch.Tensor] = {}  # see _block_offsets

    # ------------------------------------------------------------------ what the softmax reads (hooks)
    def context_blocks(
        self, segments: torch.Tensor, index: torch.Tensor, max_segments: int
    ) -> list[tuple[torch.Tensor, torch.Tensor | None, bool]]:
        """The segment blocks a query of segment ``segments`` attends with softmax.

        Args:
            segments: (N,) long, ``i(t)`` of each query (flattened over batch and queries).
            index: (N,) long, the flat block index of ``segments`` (:func:`~srformer.attention.layout.block_index`).
            max_segments: ``M``, the number of blocks per example in the state (a block index must stay in
                its example's ``M`` blocks: ``index - segments + j`` for ``0 <= j < M``).

        Returns:
            A list of ``(flat_index, extra_mask, memory)``: (N,) long block indices; None, (N,) bool (False
            where that block must not be attended) or (N, s) bool (False at the block's positions that must
            not be attended); and whether the block is a stop-gradient memory in the parallel path. The
            first entry is the scheduled segment's block. Here: the scheduled segment alone.
        """
        return [(index, None, False)]

    def state_context_blocks(
        self, state: CrossAttentionState, segments: torch.Tensor, index: torch.Tensor, max_segments: int
    ) -> list[tuple[torch.Tensor, torch.Tensor | None, bool]]:
        """:meth:`context_blocks` for a mechanism whose blocks depend on the example (its number of segments,
        a table in its state: ``bigbird``'s random blocks). The paths and the attention weights call this
        one; here it returns :meth:`context_blocks`. ``state``: the layer's state, either layout; the other
        arguments and the result as :meth:`context_blocks` (``segments`` flattened in batch-major order)."""
        return self.context_blocks(segments, index, max_segments)

    def block_bias(self, dtype: torch.dtype) -> torch.Tensor | None:
        """Additive log-weights of the positions of :meth:`context_blocks`, the same for every query: (H or 1, n)
        in ``dtype``, ``n`` = blocks x ``s`` in the order the blocks are returned, added to the scaled scores
        before the softmax (``log m`` multiplies the weights by ``m`` and renormalises: ``adaptive``'s soft span
        mask); ``-inf`` excludes a position. None (here): no bias."""
        return None

    def global_tokens(self, state: CrossAttentionState) -> tuple[torch.Tensor, torch.Tensor, torch.Tensor] | None:
        """Summary tokens every query attends besides its blocks: ``(keys, values, valid)``, (B, H, G, d) twice
        and (B, G) bool, or None (here: none)."""
        return None

    def global_token_allowed(
        self, state: CrossAttentionState, valid: torch.Tensor, segments: torch.Tensor
    ) -> torch.Tensor:
        """Which of :meth:`global_tokens` each query may attend: (B, n, G) bool from the tokens' validity
        ``valid`` (B, G) bool and the queries' segments ``segments`` (B, n) long, ``i(t)``. Here every
        valid token, whatever the segment; a subclass whose tokens depend on ``i(t)`` restricts it
        (``compressive``: only segments before ``i(t) - 1``). A query must keep some attendable key: its
        scheduled block has one (state invariant), so a token may be masked for any query."""
        return valid[:, None, :].expand(-1, segments.shape[1], -1)

    def global_token_spread(self, state: CrossAttentionState) -> torch.Tensor:
        """How each of :meth:`global_tokens` summarises the compacted positions: (B, G, M*s), row ``g`` holding
        the weights ``c`` with ``value_g = sum_p c[p] * V[p]`` over the compacted positions ``p`` (zero at
        padding), so that a token's attention probability can be reported at encoder positions
        (:mod:`srformer.attention.weights`). Needed only by a subclass that has global tokens.

        Raises:
            NotImplementedError: here (no global tokens).
        """
        raise NotImplementedError(f"{type(self).__name__} has no global tokens to spread.")

    # ------------------------------------------------------------------ state
    @autocast_off
    def init_state(self, keys: torch.Tensor, values: torch.Tensor, key_valid: torch.Tensor | None) -> SegmentState:
        """Build the per-sequence state (standard layout) from the projected encoder keys/values.

        Cost, once per sequence: one copy of the keys/values into the segment-major layout (with
        compaction when padded), O(k*d) per head.

        An example whose mask is all zero (an empty document) is given one segment whose ``s``
        positions hold zero keys and values and are all attendable: its softmax term averages zero
        values, so its output is that of an empty memory, 0, and the other rows are unaffected
        (``docs/design.md``, "Empty encoder inputs").

        Args:
            keys: (B, H, k, d) projected encoder keys.
            values: (B, H, k, d) projected encoder values.
            key_valid: (B, k) bool, True at real encoder positions; None when nothing is padded.

        Returns:
            A :class:`SegmentState`; no segment visited yet.

        Raises:
            ValueError: with ``strict_schedule``, if an example has more segments than ``target_length``
                (checked in eager mode only: the check needs a host sync).
        """
        batch, _, k, _ = keys.shape
        s = self.settings.resolved_segment_size()
        lengths, compact = real_lengths(key_valid, batch, k, keys.device)
        keys, values, order = segment_major(keys, values, key_valid if compact else None, s)
        fields = self._schedule_fields(lengths, order, compacted=compact)
        if compact or order.shape[1] != k:
            mask = (fields["segment_valid"] & (lengths > 0)[:, None, None])[:, :, None, :, None].to(keys.dtype)
            keys, values = keys * mask, values * mask
        return SegmentState(keys=keys, values=values, segment_bias=additive_mask(fields["segment_valid"], keys.dtype),
                            **fields)

    def _schedule_fields(
        self, lengths: torch.Tensor, order: torch.Tensor, *, compacted: bool = True
    ) -> dict[str, torch.Tensor]:
        """The index fields shared by both layouts' states, from the real lengths (B,) and the segment-major
        order (B, M*s) (:func:`~srformer.attention.layout.segment_order`); checks the schedule in eager mode
        (:meth:`_check_schedule`), with a host sync only where the shapes cannot tell: ``M > T`` and ``compacted``
        (a mask was given: some example may be shorter than the longest)."""
        batch, padded = order.shape
        s = self.settings.resolved_segment_size()
        max_segments = padded // s
        device = lengths.device
        real_valid = (torch.arange(padded, device=device)[None, :] < lengths[:, None]).view(batch, max_segments, s)
        empty = lengths == 0
        segments = num_segments(lengths, s).clamp(min=1)  # an empty example has one (empty) segment
        if not tracing() and max_segments > self.settings.target_length:  # else no example can have too many
            self._check_schedule(segments if compacted else max_segments)
        # attendable positions: the real ones; all of segment 0 (zero keys/values) for an empty example
        first_segment = torch.arange(max_segments, device=device)[None, :, None] == 0
        target = self.settings.target_length
        return dict(
            positions=order.to(torch.int32),
            lengths=lengths,
            num_segments=segments,
            last_segment=torch.full((batch,), -1, dtype=torch.long, device=device),
            segment_table=segment_index(torch.arange(target + 1, device=device), segments, target),
            segment_valid=real_valid | (empty[:, None, None] & first_segment),
        )

    def init_lean_state(
        self, keys: torch.Tensor, values: torch.Tensor, key_valid: torch.Tensor | None
    ) -> LeanSegmentState:
        """The lean layout built directly, equal to ``self.lean(self.init_state(keys, values, key_valid))``
        before any step but without the segment-major copy of the keys and values: O(k) index work here
        (the lean steps project their segments' rows themselves). Arguments and errors as :meth:`init_state`.

        Raises:
            ValueError: for a variant whose registry entry offers no lean layout.
        """
        self._require_lean_layout()
        batch, _, k, _ = keys.shape
        return self._lean_schedule(batch, k, key_valid, keys.device)

    def _lean_schedule(
        self, batch: int, k: int, key_valid: torch.Tensor | None, device: torch.device
    ) -> LeanSegmentState:
        """The lean state's schedule fields for ``batch`` inputs of ``k`` positions (no keys needed)."""
        lengths, compact = real_lengths(key_valid, batch, k, device)
        s = self.settings.resolved_segment_size()
        order = segment_order(key_valid if compact else None, batch, k, s, device)
        return LeanSegmentState(**self._schedule_fields(lengths, order, compacted=compact))

    def streamed_state(
        self, project_block: ProjectBlock, key_length: int, key_valid: torch.Tensor | None, block: int
    ) -> CrossAttentionState | None:
        """With ``lean_cache``, the lean state: its schedule needs no keys (each step projects its segment's rows);
        one position is projected for the batch size and device. None without ``lean_cache`` (the standard layout
        holds every key). See :meth:`CrossAttentionMechanism.streamed_state`."""
        if not self.settings.lean_cache or type(self).init_lean_state is not SegmentedCrossAttention.init_lean_state:
            return None
        self._require_lean_layout()
        keys, _ = project_block(0, min(1, key_length))
        return self._lean_schedule(keys.shape[0], key_length, key_valid, keys.device)

    def _visited(self, segments: torch.Tensor, max_segments: int) -> torch.Tensor:
        """(B, M) bool: segment j is attended at some decoder position t >= 0 (the schedule may skip
        segments when an input has more segments than ``target_length``)."""
        j = torch.arange(max_segments, device=segments.device)[None, :]
        m = segments[:, None]
        first_step = torch.div(j * self.settings.target_length + m - 1, m, rounding_mode="floor")  # ceil(j T / m)
        # segment j is visited iff the schedule floor(t m / T) maps its first candidate step to j itself
        attended_at_first_step = torch.div(first_step * m, self.settings.target_length, rounding_mode="floor") == j
        return (j < m) & (attended_at_first_step | (j == m - 1))

    def _check_schedule(self, segments: torch.Tensor | int) -> None:
        """Warn (or raise, with ``strict_schedule``) when an example has more segments than ``target_length``:
        ``segments`` is (B,) long, each example's count (one host sync), or the largest count when the shapes
        give it (an int: every example is as long as the longest, no sync)."""
        target = self.settings.target_length
        worst = segments if isinstance(segments, int) else int(segments.max())
        if worst > target:
            message = (
                f"An encoder input has {worst} segments of {self.settings.resolved_segment_size()} tokens but "
                f"target_length is {target}: segments after step {target} are never attended by segmented attention. "
                "Increase `segment_size` (to at least input_length / target_length) or `target_length`."
            )
            if self.settings.strict_schedule:
                raise ValueError(message)
            warnings.warn(message, stacklevel=3)

    def _require_lean_layout(self) -> None:
        """Raise ``ValueError`` for a variant whose registry entry offers no lean layout."""
        if not mechanism(self.settings.variant).capabilities.lean_layout:
            raise ValueError(f"The lean cache layout is not implemented for variant {self.settings.variant!r}.")

    @autocast_off
    def lean(self, state: CrossAttentionState) -> CrossAttentionState:
        """The lean layout of a standard ``state``: drops the keys and values (:class:`LeanSegmentState`).

        Raises:
            ValueError: for a variant whose registry entry offers no lean layout (``xl``, ``longt5``).
        """
        self._require_lean_layout()
        assert isinstance(state, SegmentState), type(state)
        return LeanSegmentState(
            lengths=state.lengths, num_segments=state.num_segments, last_segment=state.last_segment,
            positions=state.positions, segment_table=state.segment_table, segment_valid=state.segment_valid,
        )

    # ------------------------------------------------------------------ parallel path
    def forward(
        self,
        queries: torch.Tensor,
        state: CrossAttentionState,
        *,
        start_position: int | torch.Tensor = 0,
        dropout: float = 0.0,
    ) -> tuple[torch.Tensor, CrossAttentionState]:
        """Cross attention for ``q`` consecutive decoder positions at once (teacher forcing).

        No Python loop over positions: each query gathers its own segment's key/value block (one
        ``index_select`` over the segment-major state) and takes one softmax over its keys, so the work
        is O(q*s*d) per head (plus the subclass's blocks, global tokens or recurrent term).

        Args:
            queries: (B, H, q, d) projected decoder queries at positions
                ``start_position .. start_position + q - 1``.
            state: a standard-layout state (from :meth:`init_state`).
            start_position: absolute decoder position of the first query (an int, or a 0-d long
                tensor, e.g. from a static cache).
            dropout: attention-probability dropout for the softmax (training only).

        Returns:
            ``(output, state)``: output (B, H, q, d) in the queries' dtype, and the state after the
            last position.

        Raises:
            ValueError: for a lean-layout state.
        """
        if state.is_lean or not isinstance(state, SegmentState):
            raise ValueError("The parallel path needs a standard-layout state; rebuild it with init_state().")
        q = queries.shape[2]
        positions = torch.arange(q, device=queries.device) + start_position
        segments_of_query = segment_index(positions, state.num_segments, self.settings.target_length)  # (B, q)
        output = self._output(queries, state, segments_of_query, dropout)
        return output, replace(state, last_segment=segments_of_query[:, -1])

    def _output(
        self, queries: torch.Tensor, state: SegmentState, segments_of_query: torch.Tensor, dropout: float
    ) -> torch.Tensor:
        """The parallel path's output (here: the softmax term); see :meth:`forward`."""
        return self._softmax(queries, state, segments_of_query, dropout)

    def _softmax(
        self, queries: torch.Tensor, state: SegmentState, segments_of_query: torch.Tensor, dropout: float
    ) -> torch.Tensor:
        """The softmax term for all ``q`` queries at once, each query over its own blocks and global tokens.

        The function, and therefore its gradients, are those of a masked softmax over all ``k`` keys whose
        mask admits exactly those keys.

        Args:
            queries: (B, H, q, d) projected decoder queries.
            state: a standard-layout state.
            segments_of_query: (B, q) long, ``i(t)`` of each query.
            dropout: dropout probability on the attention probabilities (training only).

        Returns:
            (B, H, q, d) in the queries' dtype.
        """
        keys, values, segment_valid = state.keys, state.values, state.segment_valid
        max_segments = segment_valid.shape[1]
        q = segments_of_query.shape[1]
        query_rows = queries.transpose(1, 2).unsqueeze(-2)  # (B, q, H, 1, d)
        index = block_index(segments_of_query, max_segments)
        block_keys, block_values, allowed = [], [], []
        blocks = self.state_context_blocks(state, segments_of_query.reshape(-1), index, max_segments)
        for flat, extra_mask, memory in blocks:
            block_keys.append(take_blocks(keys.detach() if memory else keys, flat, q).to(queries.dtype))
            block_values.append(take_blocks(values.detach() if memory else values, flat, q).to(queries.dtype))
            allowed.append(restrict(take_blocks(segment_valid, flat, q), extra_mask))  # (B, q, s)
        scores = [torch.matmul(query_rows, block.transpose(-1, -2)) for block in block_keys]  # (B, q, H, 1, s)
        tokens = self.global_tokens(state)
        if tokens is not None:
            global_keys, global_values, global_valid = tokens  # (B, H, G, d) twice, (B, G)
            scores.append(torch.einsum("bhqd,bhmd->bqhm", queries, global_keys.to(queries.dtype)).unsqueeze(-2))
            allowed.append(self.global_token_allowed(state, global_valid, segments_of_query))
        mask = torch.cat(allowed, dim=-1)[:, :, None, None, :]  # (B, q, 1, 1, n)
        logits = torch.cat(scores, dim=-1) * self.scale
        bias = self.block_bias(logits.dtype)
        if bias is not None:  # (H or 1, n blocks' positions); global tokens get none
            logits = logits + F.pad(bias, (0, logits.shape[-1] - bias.shape[-1]))[:, None, :]
        logits = logits.masked_fill(~mask, float("-inf"))
        probabilities = torch.softmax(logits, dim=-1)  # every query has an allowed key (state invariant)
        if dropout > 0.0:
            probabilities = F.dropout(probabilities, p=dropout, training=True)
        parts = probabilities.split([score.shape[-1] for score in scores], dim=-1)
        output = torch.matmul(parts[0], block_values[0])  # (B, q, H, 1, d)
        for part, block in zip(parts[1 : len(block_values)], block_values[1:], strict=True):
            output = output + torch.matmul(part, block)
        output = output.squeeze(-2)
        if tokens is not None:
            output = output + torch.einsum("bqhm,bhmd->bqhd", parts[-1].squeeze(-2), global_values.to(queries.dtype))
        return output.transpose(1, 2)

    # ------------------------------------------------------------------ incremental path
    def _segment_at(self, state: SegmentState | LeanSegmentState, position: int | torch.Tensor) -> torch.Tensor:
        """(B,) long ``i(t)`` read from the state's segment table (:func:`~srformer.attention.schedule.segment_at`)."""
        return segment_at(state.segment_table, position, self.settings.target_length)

    def step(
        self,
        queries: torch.Tensor,
        state: CrossAttentionState,
        *,
        position: int | torch.Tensor,
        project_rows: ProjectRows | None = None,
    ) -> tuple[torch.Tensor, CrossAttentionState]:
        """Cross attention for one decoder position, reading one segment (Algorithm 1).

        Standard layout: the segment's key/value block is read with one ``index_select`` from the
        segment-major state (plus the subclass's blocks and global tokens); the work is O(s*d) per head,
        no tensor of encoder length is touched and there is no host sync. Lean layout: the segment's
        ``s`` encoder rows are projected (O(s * d_model * d) per head) when ``i(t)`` differs from the
        previous step's segment.

        Args:
            queries: (B, H, 1, d) projected decoder query at ``position``.
            state: the state after ``position - 1`` (or a fresh state when ``position`` is 0).
            position: absolute decoder position ``t`` (an int, or a 0-d long tensor).
            project_rows: lean layout only: maps (B, s) encoder positions to the projected
                (keys, values), each (B, H, s, d).

        Returns:
            ``(output, state)``: output (B, H, 1, d) and the updated state.

        Raises:
            ValueError: a lean state without ``project_rows``.
        """
        if not isinstance(state, SegmentState | LeanSegmentState):
            raise ValueError(f"{type(self).__name__} cannot step a {type(state).__name__}; build it with init_state().")
        segment = self._segment_at(state, position)  # (B,) i(t)
        max_segments = state.segment_valid.shape[1]
        # (B,) flat block index b * M + i_b(t) (block_index without its reshapes: fewer ops per step)
        index = segment + self._block_offsets(segment.shape[0], max_segments, segment.device)
        new_state = replace(state, last_segment=segment)
        context = None
        if isinstance(state, SegmentState) and state.segment_bias is not None and self._reads_one_block():
            # the scheduled block alone: its keys, values and additive mask, one index_select each
            output = None
            if self.has_softmax:
                keys = state.keys.flatten(0, 1).index_select(0, index)  # (B, H, s, d)
                values = state.values.flatten(0, 1).index_select(0, index)
                block_mask = state.segment_bias.flatten(0, 1).index_select(0, index)  # (B, 1, 1, s)
                output = F.scaled_dot_product_attention(
                    queries, cast(keys, queries.dtype), cast(values, queries.dtype),
                    attn_mask=cast(block_mask, queries.dtype), scale=self.scale,
                )
            return self._step_output(queries, output, state, new_state, index), new_state
        if isinstance(state, LeanSegmentState):
            assert isinstance(new_state, LeanSegmentState)
            context, new_state = self._lean_segment(state, new_state, index, project_rows)
        elif self.has_softmax:  # ablation I reads no keys in the standard layout
            context = self._step_context(state, index, segment)
        output = None
        if self.has_softmax:
            assert context is not None
            keys, values, allowed = context
            mask = allowed[:, None, None, :]
            bias = self.block_bias(queries.dtype)
            if bias is not None:  # (B, H or 1, 1, n): the log-weights at the allowed positions, -inf elsewhere
                bias = F.pad(bias, (0, allowed.shape[-1] - bias.shape[-1]))
                mask = torch.where(mask, bias[None, :, None, :], float("-inf"))
            output = F.scaled_dot_product_attention(
                queries, cast(keys, queries.dtype), cast(values, queries.dtype), attn_mask=mask, scale=self.scale
            )
        return self._step_output(queries, output, state, new_state, index), new_state

    def finite_check_fields(self, state: CrossAttentionState) -> tuple[str, ...]:
        """The base's fields less ``segment_bias``, finite by construction (:func:`additive_mask`)."""
        return tuple(name for name in super().finite_check_fields(state) if name != "segment_bias")

    def _reads_one_block(self) -> bool:
        """Whether a step's softmax reads the scheduled block alone: no further blocks, global tokens or block bias
        (the hooks are those of this class), so that :meth:`step` may take its shortest path."""
        cls = type(self)
        base = SegmentedCrossAttention
        return (cls.context_blocks is base.context_blocks and cls.state_context_blocks is base.state_context_blocks
                and cls.global_tokens is base.global_tokens and cls.block_bias is base.block_bias)

    def _block_offsets(self, batch: int, max_segments: int, device: torch.device) -> torch.Tensor:
        """(B,) long ``b * M``, the first flat block of each example: made once per batch size, block count and
        device in eager mode and kept on the module (no operator call per step), made in the graph when traced."""
        return kept_per_shape(self._offsets, (batch, max_segments, device),
                              lambda: torch.arange(0, batch * max_segments, max_segments, device=device))

    def _step_output(
        self,
        queries: torch.Tensor,
        softmax_output: torch.Tensor | None,
        state: CrossAttentionState,
        new_state: CrossAttentionState,
        index: torch.Tensor,
    ) -> torch.Tensor:
        """A step's output from its softmax term (here: the softmax term itself); see :meth:`step`."""
        assert softmax_output is not None, "segmented attention always has its softmax term"
        return softmax_output

    def _step_context(
        self, state: SegmentState, index: torch.Tensor, segment: torch.Tensor
    ) -> tuple[torch.Tensor, torch.Tensor, torch.Tensor]:
        """Keys, values and mask for one step from a standard-layout state: (B, H, n, d) twice and (B, n) bool,
        the scheduled block, then :meth:`context_blocks`' further blocks, then :meth:`global_tokens`. Each
        is one contiguous block per example (an ``index_select``), concatenated when there are several."""
        all_keys, all_values = state.keys.flatten(0, 1), state.values.flatten(0, 1)
        segment_valid = state.segment_valid.flatten(0, 1)
        keys, values, allowed = [], [], []
        for flat, extra_mask, _ in self.state_context_blocks(state, segment, index, state.segment_valid.shape[1]):
            keys.append(all_keys.index_select(0, flat))  # (B, H, s, d)
            values.append(all_values.index_select(0, flat))
            allowed.append(restrict(segment_valid.index_select(0, flat), extra_mask))  # (B, s)
        tokens = self.global_tokens(state)
        if tokens is not None:
            keys.append(tokens[0])
            values.append(tokens[1])
            allowed.append(self.global_token_allowed(state, tokens[2], segment[:, None])[:, 0])
        if len(keys) == 1:
            return keys[0], values[0], allowed[0]
        return torch.cat(keys, dim=2), torch.cat(values, dim=2), torch.cat(allowed, dim=1)

    def _lean_segment(
        self,
        state: LeanSegmentState,
        new_state: LeanSegmentState,
        index: torch.Tensor,
        project_rows: ProjectRows | None,
    ) -> tuple[tuple[torch.Tensor, torch.Tensor, torch.Tensor], LeanSegmentState]:
        """Lean layout: the current segment's keys, values and mask.

        They are projected once per segment change (:meth:`_enter_segment` runs then) and kept in the
        state; a step in the same segment as the previous one reuses them. Eager mode decides this on the
        host (one sync per step); under ``torch.compile``/``torch.export`` every step projects (sync-free,
        the same numbers).

        Returns:
            ``((keys, values, allowed), new_state)``: (B, H, s, d) twice, (B, s) bool, and the updated state.

        Raises:
            ValueError: without ``project_rows``.
        """
        segment = new_state.last_segment
        keys, values, allowed = state.segment_keys, state.segment_values, state.segment_allowed
        if (
            keys is not None and values is not None and allowed is not None and not tracing()
            and not bool((segment != state.last_segment).any())  # same segment for every row: reuse
        ):
            return (keys, values, allowed), new_state
        if project_rows is None:
            raise ValueError("A lean SRformer state needs `project_rows` to project its segment.")
        segment_valid = state.segment_valid
        allowed = segment_valid.flatten(0, 1).index_select(0, index)  # (B, s)
        encoder_positions = state.positions.view(index.shape[0] * segment_valid.shape[1], -1).index_select(0, index)
        keys, values = project_rows(encoder_positions.to(torch.int64))
        # real rows only (an empty example's attendable positions are padding rows of the encoder output)
        row_mask = (allowed & (state.lengths > 0)[:, None])[:, None, :, None].to(keys.dtype)
        keys, values = keys * row_mask, values * row_mask
        new_state = self._enter_segment(keys, values, state, new_state)
        return (keys, values, allowed), replace(
            new_state, segment_keys=keys, segment_values=values, segment_allowed=allowed
        )

    def _enter_segment(
        self, keys: torch.Tensor, values: torch.Tensor, state: LeanSegmentState, new_state: LeanSegmentState
    ) -> LeanSegmentState:
        """Lean layout: what a subclass updates when a step projects a segment's keys/values (B, H, s, d)
        (zero at padding); here nothing."""
        return new_state


