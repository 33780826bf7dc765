"""Segmented recurrent cross attention as one ``nn.Module`` over projected queries/keys/values.

Implements paper Eq. 6 (segmented attention ``O_S``), Eq. 13-16 (recurrent attention ``O_R``)
and Eq. 11 (``O = O_S + O_R``) with the interpretation described in ``docs/design.md``
("Recurrent attention", "RAF neuron"):

* ``KV = sum_j K_j^T V_j`` over real positions only, all ``K_j^T V_j`` in one einsum;
  ``P_i = KV - K_i^T V_i`` (Eq. 16).
* RAF fires once each time the segment index changes (Algorithm 1), with ``W P_i`` as input.
* ``norm(K)``: L2 norm of the real keys over the sequence axis, per example, head and
  key-feature column, shape (d,), broadcast over the output's last axis, plus ``eps``.
* ``O_R[t] = (scale * Q_t) . RAF_out_{i(t)} / norm(K)``, ``scale`` being the model's own
  attention scale (T5: 1, BART: head_dim^-0.5).

Two paths compute the same function: :meth:`SegmentedRecurrentAttention.forward` for any number
of decoder positions at once (teacher forcing, and generation without a cache), and
:meth:`SegmentedRecurrentAttention.step` for one decoder position with a carried
:class:`~srformer.attention.state.CrossAttentionState` (O(s*d + d^2) work per head).

The segments an example visits, and therefore its whole RAF sequence, depend only on its encoder
output and the schedule, never on the generated tokens. The standard state layout therefore runs
the RAF recurrence over all visited segments once, when the state is built, and a step reads the
output of its segment. The lean layout keeps no per-segment tensors and fires RAF incrementally,
once per segment change, from ``K^T V``, the membrane and the last segment index (Algorithm 1).
Both give the same outputs (tested).

The same module computes the paper's segment-based baselines and ablations (``docs/design.md``,
"Baselines and ablations"; paper Figure 4 and Table 3): the softmax context of ``xl`` and ``longt5`` comes from
:mod:`srformer.attention.softmax_context`; the ablations change the recurrent term:

* (I) ``recurrent_only``: ``O = O_R`` (no ``O_S``).
* (II) ``no_norm``: ``O_R[t] = scale * Q_t . RAF_out_{i(t)}`` (``norm(K)`` replaced by 1).
* (III) ``no_raf``: ``O_R[t] = scale * Q_t . P_{i(t)} / norm(K)``: no neuron, no ``W``.
* (IV) ``segment_products``: RAF reads ``W K_i^T V_i`` instead of ``W P_i``, accumulating the
  segments seen so far in its membrane.

With ``mix_init`` set, ``O = sigma * O_S + (1 - sigma) * O_R`` (Eq. 10), ``sigma = sigmoid(a)``
with one learnable scalar ``a`` per layer.
"""

from __future__ import annotations

import warnings
from collections.abc import Callable
from dataclasses import replace

import torch
from torch import nn
from torch.nn import functional as F

from srformer.attention.raf import RecurrentAccumulateAndFire
from srformer.attention.schedule import compaction_order, num_segments, real_lengths, segment_index
from srformer.attention.softmax_context import SOFTMAX_VARIANTS, global_tokens, parallel_context, step_context
from srformer.attention.state import CrossAttentionState, accumulation_dtype, autocast_off, required
from srformer.config import LEAN_VARIANTS, SRformerConfig


class SegmentedRecurrentAttention(nn.Module):
    """Cross attention of the segment-based variants (``segmented``, ``srformer`` and its ablations,
    ``xl``, ``longt5``) for one decoder layer.

    Args:
        config: the SRformer settings (variant in :data:`~srformer.attention.softmax_context.SOFTMAX_VARIANTS`).
        head_dim: ``d``, size of one attention head.
        scale: the wrapped model's attention scale (T5: 1.0, BART: head_dim^-0.5), used by the
            softmax of ``O_S`` and multiplied into ``Q`` for ``O_R``.

    The settings are kept as ``.settings``: by transformers' convention the ``.config`` of any
    submodule is the model's ``PretrainedConfig``.

    Raises:
        ValueError: for another variant (``full`` keeps the model's own module; ``linear`` is
            :class:`~srformer.attention.linear.LinearCrossAttention`).
    """

    def __init__(self, config: SRformerConfig, head_dim: int, scale: float = 1.0) -> None:
        super().__init__()
        self.scale = float(scale)
        if config.variant not in SOFTMAX_VARIANTS:
            raise ValueError(
                f"SegmentedRecurrentAttention computes the variants {SOFTMAX_VARIANTS}, not {config.variant!r}; "
                "use srformer.attention.build_cross_attention(config, ...) to get the right module."
            )
        self.settings = config
        self.head_dim = head_dim
        self.raf = None
        if self.has_recurrence and config.ablation != "no_raf":
            self.raf = RecurrentAccumulateAndFire(
                head_dim, config.raf_leak_init, config.raf_threshold_init, config.raf_linear_init_scale
            )
        self.mix_logit = None
        if config.mix_init is not None and self.has_recurrence:
            self.mix_logit = nn.Parameter(torch.logit(torch.tensor(float(config.mix_init))))

    @property
    def has_recurrence(self) -> bool:
        """True when ``O_R`` is part of the output (variant ``srformer`` with recurrence on)."""
        return self.settings.variant == "srformer" and self.settings.recurrence

    @property
    def has_softmax(self) -> bool:
        """True when a softmax term (``O_S`` or a baseline's) is part of the output (not ablation I)."""
        return self.settings.ablation != "recurrent_only"

    def _project(self, products: torch.Tensor) -> torch.Tensor:
        """``W x`` on the last axis, or ``x`` itself under ablation III (no RAF, no ``W``)."""
        return products if self.raf is None else self.raf.project(products)

    def _combine(self, softmax_output: torch.Tensor | None, recurrent: torch.Tensor) -> torch.Tensor:
        """``O_S + O_R`` (Eq. 11), ``sigma O_S + (1 - sigma) O_R`` (Eq. 10), or ``O_R`` (ablation I)."""
        if softmax_output is None:
            return recurrent
        recurrent = recurrent.to(softmax_output.dtype)
        if self.mix_logit is None:
            return softmax_output + recurrent
        sigma = torch.sigmoid(self.mix_logit).to(softmax_output.dtype)
        return sigma * softmax_output + (1.0 - sigma) * recurrent

    # ------------------------------------------------------------------ state
    @autocast_off
    def init_state(
        self, keys: torch.Tensor, values: torch.Tensor, key_valid: torch.Tensor | None
    ) -> CrossAttentionState:
        """Build the per-sequence state (standard layout) from the projected encoder keys/values.

        Cost, once per sequence: O(k*d^2) per head for the ``K_j^T V_j`` products (one einsum),
        O(m*d^3) for ``W P_j`` and an m-step RAF recurrence (paper Table 1).

        Args:
            keys: (B, H, k, d) projected encoder keys.
            values: (B, H, k, d) projected encoder values.
            key_valid: (B, k) bool, True at real encoder positions; None when nothing is padded.

        Returns:
            A :class:`CrossAttentionState` with keys/values, the segment table and masks, the
            recurrent readout of every visited segment, ``raf_total`` and ``key_norm``; no segment
            visited yet.

        Raises:
            ValueError: if an example has no real encoder token (an empty document), or, with
                ``strict_schedule``, if an example has more segments than ``target_length``.
        """
        batch, heads, k, d = keys.shape
        s = self.settings.segment_size
        device = keys.device
        # Compaction is skipped when nothing is padded.
        lengths, padded_input = real_lengths(key_valid, batch, k, device)
        if not padded_input or key_valid is None:  # real_lengths reports padding only for a given mask
            order = torch.arange(k, device=device).expand(batch, k)
        else:
            order = compaction_order(key_valid.to(device=device, dtype=torch.bool))
            gather = order[:, None, :, None].expand(batch, heads, k, d)
            keys = torch.gather(keys, 2, gather)
            values = torch.gather(values, 2, gather)
        segments = num_segments(lengths, s)
        max_segments = -(-k // s)
        padded = max_segments * s
        if padded != k:
            keys = F.pad(keys, (0, 0, 0, padded - k))
            values = F.pad(values, (0, 0, 0, padded - k))
            order = F.pad(order, (0, padded - k))
        position_valid = torch.arange(padded, device=device)[None, :] < lengths[:, None]  # (B, M*s)
        mask = position_valid[:, None, :, None].to(keys.dtype)
        keys = keys * mask
        values = values * mask
        self._check_schedule(segments)

        target = self.settings.target_length
        segment_valid = position_valid.view(batch, max_segments, s)
        state = CrossAttentionState(
            keys=keys,
            values=values,
            positions=order.to(torch.int32),
            lengths=lengths,
            num_segments=segments,
            last_segment=torch.full((batch,), -1, dtype=torch.long, device=device),
            segment_table=segment_index(torch.arange(target + 1, device=device), segments, target),
            segment_valid=segment_valid,
        )
        if self.settings.variant == "longt5":
            state.global_keys, state.global_values, state.global_valid = global_tokens(keys, values, segment_valid)
        if self.has_recurrence:
            raf_inputs, state.raf_total = self._raf_inputs(keys, values)
            if self.raf is None:  # ablation III: P_j itself
                raf_outputs = raf_inputs
            else:
                zeros = raf_inputs.new_zeros(batch, heads, d, d)
                raf_outputs, _, _ = self.raf.scan(raf_inputs, self._visited(segments, max_segments), zeros, zeros)
            if self.settings.ablation == "no_norm":  # ablation II
                state.key_norm = raf_inputs.new_ones(batch, heads, d)
            else:
                state.key_norm = keys.to(raf_inputs.dtype).pow(2).sum(dim=2).sqrt() + self.settings.norm_eps
            state.raf_readout = raf_outputs * (self.scale / state.key_norm[:, :, None, None, :])
        return state

    def _raf_inputs(self, keys: torch.Tensor, values: torch.Tensor) -> tuple[torch.Tensor, torch.Tensor]:
        """RAF inputs ``x_j = W P_j`` of every segment, (B, H, M, d, d), and ``W K^T V``, (B, H, d, d),
        in :func:`~srformer.attention.state.accumulation_dtype` (float32, or float64 for a float64
        model) from compacted, zero-padded keys/values (B, H, M*s, d) (Eq. 14-16, A.2).
        Under ablation III there is no ``W`` (``x_j = P_j``); under ablation IV ``x_j = W K_j^T V_j``.

        ``W`` acts on the last (value) axis, so ``(K_j^T V_j) W^T = K_j^T (V_j W^T)``: without a clamp
        the values are projected first and every segment costs O(s*d^2) (2*k*d^2 per head in all)
        instead of O(s*d^2 + d^3) (k*d^2 + m*d^3, 2.5x more at s = d/4). With ``kv_clamp`` the
        products are clamped before ``W``, as the BART authors did.
        """
        batch, heads, _, d = keys.shape
        shape = (batch, heads, -1, self.settings.segment_size, d)
        wide = accumulation_dtype(keys.dtype)
        keys_wide = keys.to(wide).view(shape)
        if self.settings.kv_clamp is None:
            projected_values = self._project(values.to(wide)).view(shape)
            segment_products = torch.einsum("bhmsd,bhmse->bhmde", keys_wide, projected_values)  # W K_j^T V_j
            total = segment_products.sum(dim=2, keepdim=True)
        else:
            c = self.settings.kv_clamp
            segment_products = torch.einsum("bhmsd,bhmse->bhmde", keys_wide, values.to(wide).view(shape))
            total = self._project(segment_products.sum(dim=2, keepdim=True).clamp(-c, c))
            segment_products = self._project(segment_products.clamp(-c, c))
        return self._recurrent_input(total, segment_products), total[:, :, 0]

    def _recurrent_input(self, total: torch.Tensor, segment_products: torch.Tensor) -> torch.Tensor:
        """The RAF input from ``W K^T V`` and ``W K_i^T V_i`` (any matching shapes): ``W P_i`` (Eq. 16),
        or ``W K_i^T V_i`` itself under ablation IV."""
        if self.settings.ablation == "segment_products":
            return segment_products
        return total - segment_products

    def _visited(self, segments: torch.Tensor, max_segments: int) -> torch.Tensor:
        """(B, M) bool: segment j is attended at some decoder position t >= 0 (the schedule may skip
        segments when an input has more segments than ``target_length``)."""
        j = torch.arange(max_segments, device=segments.device)[None, :]
        m = segments[:, None]
        first_step = torch.div(j * self.settings.target_length + m - 1, m, rounding_mode="floor")  # ceil(j T / m)
        # segment j is visited iff the schedule floor(t m / T) maps its first candidate step to j itself
        attended_at_first_step = torch.div(first_step * m, self.settings.target_length, rounding_mode="floor") == j
        return (j < m) & (attended_at_first_step | (j == m - 1))

    def _check_schedule(self, segments: torch.Tensor) -> None:
        target = self.settings.target_length
        worst = int(segments.max())
        if worst > target:
            message = (
                f"An encoder input has {worst} segments of {self.settings.segment_size} tokens but target_length is "
                f"{target}: segments after step {target} are never attended by segmented attention. "
                "Increase `segment_size` (to at least input_length / target_length) or `target_length`."
            )
            if self.settings.strict_schedule:
                raise ValueError(message)
            warnings.warn(message, stacklevel=3)

    @autocast_off
    def lean(self, state: CrossAttentionState) -> CrossAttentionState:
        """The lean layout of a standard ``state`` (see :class:`CrossAttentionState`).

        Drops keys, values and the per-segment RAF outputs; keeps ``K^T V``, ``norm(K)`` and the
        RAF membrane/output after ``state.last_segment`` (recomputed by one recurrence over the
        segments visited so far), from which later steps fire RAF incrementally.
        """
        if self.settings.variant not in LEAN_VARIANTS:
            raise ValueError(f"The lean cache layout is not implemented for variant {self.settings.variant!r}.")
        lean = replace(state, keys=None, values=None, raf_readout=None)
        if self.raf is None:  # no recurrence, or ablation III (its output is recomputed at each step)
            return lean
        batch, heads, max_segments, d, _ = required(state.raf_readout, "raf_readout").shape
        # The RAF inputs are not kept in the standard layout; rebuild them for the visited prefix.
        raf_inputs, _ = self._raf_inputs(required(state.keys, "keys"), required(state.values, "values"))
        done = self._visited(state.num_segments, max_segments)
        done &= torch.arange(max_segments, device=done.device)[None, :] <= state.last_segment[:, None]
        zeros = raf_inputs.new_zeros(batch, heads, d, d)
        _, membrane, raf_output = self.raf.scan(raf_inputs, done, zeros, zeros)
        return replace(lean, membrane=membrane, raf_output=raf_output)

    # ------------------------------------------------------------------ parallel path
    def forward(
        self,
        queries: torch.Tensor,
        state: CrossAttentionState,
        *,
        start_position: int = 0,
        dropout: float = 0.0,
    ) -> tuple[torch.Tensor, CrossAttentionState]:
        """Cross attention for ``q`` consecutive decoder positions at once (teacher forcing).

        No Python loop over positions: segmented attention is one masked ``scaled_dot_product_attention``
        call, and each query reads the RAF output of its segment from the state.

        Args:
            queries: (B, H, q, d) projected decoder queries at positions
                ``start_position .. start_position + q - 1``.
            state: a standard-layout state (from :meth:`init_state`).
            start_position: absolute decoder position of the first query.
            dropout: attention-probability dropout for ``O_S`` (training only).

        Returns:
            ``(output, state)``: output (B, H, q, d) in the queries' dtype, and the state after the
            last position.

        Raises:
            ValueError: for a lean-layout state.
        """
        if state.is_lean:
            raise ValueError("The parallel path needs a standard-layout state; rebuild it with init_state().")
        batch, heads, q, d = queries.shape
        positions = torch.arange(start_position, start_position + q, device=queries.device)
        segments_of_query = segment_index(positions, state.num_segments, self.settings.target_length)  # (B, q)

        output = None
        if self.has_softmax:
            keys, values, allowed = parallel_context(
                self.settings.variant, state, segments_of_query, self.settings.segment_size
            )
            output = F.scaled_dot_product_attention(
                queries,
                keys.to(queries.dtype),
                values.to(queries.dtype),
                attn_mask=allowed[:, None],
                dropout_p=dropout,
                scale=self.scale,
            )
        if self.has_recurrence:
            # Q_t . out_j for every segment j in one batched matmul (q*M*d numbers per head, less than
            # materialising a (d, d) block per query), then keep each query's own segment.
            raf_readout = required(state.raf_readout, "raf_readout")
            all_segments = torch.einsum("bhqd,bhmde->bhqme", queries.to(raf_readout.dtype), raf_readout)
            pick = segments_of_query[:, None, :, None, None].expand(batch, heads, q, 1, d)
            recurrent = torch.take_along_dim(all_segments, pick, dim=3)[:, :, :, 0]
            output = self._combine(output, recurrent.to(queries.dtype))
        assert output is not None, "every variant has softmax or recurrent attention (SRformerConfig checks)"
        return output, replace(state, last_segment=segments_of_query[:, -1])

    # ------------------------------------------------------------------ incremental path
    def step(
        self,
        queries: torch.Tensor,
        state: CrossAttentionState,
        *,
        position: int,
        project_rows: Callable[[torch.Tensor], tuple[torch.Tensor, torch.Tensor]] | None = None,
    ) -> tuple[torch.Tensor, CrossAttentionState]:
        """Cross attention for one decoder position, reading one segment and a (d, d) matrix per head.

        Algorithm 1: attend to segment ``i(t)`` with softmax and add ``Q_t . RAF_out_{i(t)} / norm(K)``.
        Standard layout: the RAF output is read from the state; the work is O(s*d + d^2) per head,
        no tensor of encoder length is touched and there is no host sync. Lean layout: the
        segment's ``s`` encoder rows are projected (O(s * d_model * d) per head) and, when
        ``i(t)`` differs from the previous step's segment, RAF fires once with
        ``W K^T V - W K_i^T V_i`` (O(s*d^2 + d^3)). ``xl`` reads 2s keys and ``longt5`` s + m
        (see :func:`~srformer.attention.softmax_context.step_context`).

        Args:
            queries: (B, H, 1, d) projected decoder query at ``position``.
            state: the state after ``position - 1`` (or a fresh state when ``position`` is 0).
            position: absolute decoder position ``t``.
            project_rows: lean layout only: maps (B, s) encoder positions to the projected
                (keys, values), each (B, H, s, d).

        Returns:
            ``(output, state)``: output (B, H, 1, d) and the updated state.

        Raises:
            ValueError: a lean state without ``project_rows``.
        """
        batch = queries.shape[0]
        s = self.settings.segment_size
        device = queries.device
        segment_table = required(state.segment_table, "segment_table")
        segment = segment_table[:, min(position, self.settings.target_length)]  # (B,) i(t)
        rows = torch.arange(batch, device=device)
        if state.is_lean:
            if project_rows is None:
                raise ValueError("A lean SRformer state needs `project_rows` to project its segment.")
            allowed = required(state.segment_valid, "segment_valid")[rows, segment]  # (B, s)
            positions = required(state.positions, "positions")
            max_segments = positions.shape[1] // s
            encoder_positions = positions.view(batch, max_segments, s)[rows, segment].to(torch.int64)
            keys, values = project_rows(encoder_positions)
            row_mask = allowed[:, None, :, None].to(keys.dtype)
            keys, values = keys * row_mask, values * row_mask
        elif self.has_softmax:  # ablation I reads no keys in the standard layout
            keys, values, allowed = step_context(self.settings.variant, state, segment, s)
        output = None
        if self.has_softmax:
            output = F.scaled_dot_product_attention(
                queries, keys.to(queries.dtype), values.to(queries.dtype), attn_mask=allowed[:, None, None, :],
                scale=self.scale,
            )
        new_state = replace(state, last_segment=segment)
        if self.has_recurrence:
            if state.is_lean:
                readout, new_state = self._lean_readout(keys, values, segment, state, new_state)
            else:
                # scale * RAF_out_i / norm(K), (B, H, d, d)
                readout = required(state.raf_readout, "raf_readout")[rows, :, segment]
            output = self._combine(output, torch.matmul(queries.to(readout.dtype), readout).to(queries.dtype))
        assert output is not None, "every variant has softmax or recurrent attention (SRformerConfig checks)"
        return output, new_state

    @autocast_off
    def _lean_readout(
        self,
        keys: torch.Tensor,
        values: torch.Tensor,
        segment: torch.Tensor,
        state: CrossAttentionState,
        new_state: CrossAttentionState,
    ) -> tuple[torch.Tensor, CrossAttentionState]:
        """Lean layout: fire RAF when the segment changes (Algorithm 1) and return the step's readout
        ``scale * RAF_out_i / norm(K)`` (B, H, d, d) with the updated state. ``keys``/``values``
        (B, H, s, d) are the current segment's, zero at padding."""
        wide = accumulation_dtype(keys.dtype)
        products = torch.einsum("bhsd,bhse->bhde", keys.to(wide), values.to(wide))  # K_i^T V_i
        if self.settings.kv_clamp is not None:
            products = products.clamp(-self.settings.kv_clamp, self.settings.kv_clamp)
        # W P_i (ablation III: no W)
        raf_input = self._recurrent_input(required(state.raf_total, "raf_total"), self._project(products))
        if self.raf is None:  # ablation III: the output depends only on the segment
            raf_output = raf_input
        else:
            changed = (segment != state.last_segment)[:, None, None, None]
            previous_membrane = required(state.membrane, "membrane")
            membrane, raf_output = self.raf.fire(previous_membrane, raf_input)
            raf_output = torch.where(changed, raf_output, required(state.raf_output, "raf_output"))
            membrane = torch.where(changed, membrane, previous_membrane)
            new_state = replace(new_state, membrane=membrane, raf_output=raf_output)
        return raf_output * (self.scale / required(state.key_norm, "key_norm")[:, :, None, :]), new_state
