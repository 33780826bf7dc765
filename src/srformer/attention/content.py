"""The base of the content-based sparse cross attentions (``reformer``, ``routing``): a decoder query attends,
with one softmax, the real encoder keys that share a group (an LSH bucket, a k-means cluster) with it.

Which keys a query reads depends on the query's and the keys' content, not on the segment schedule, so these
mechanisms have no segments (``segment_size``/``target_length`` are unused) and their output does not depend on
the decoder position. A subclass says how vectors are grouped (:meth:`ContentSparseCrossAttention.codes`: one
group id per round, ``R`` rounds); this base does the rest:

* the state (:class:`ContentState`) holds the projected keys and values and the group ids of the keys
  (``key_codes``, -1 at padding), computed once per sequence;
* query ``t`` attends the union over rounds of the real keys whose group equals its own in that round, each key
  once: ``O[t] = softmax_j(scale * Q_t . K_j | j in A(t)) V``. With one round this is the paper's "attend within
  the bucket/cluster"; with several it is the set-union reading of Reformer's multi-round hashing (Kitaev et al.
  2020, Sec. 2.3: a key found in several rounds is counted once);
* a query that shares no group with any real key of its example (``A(t)`` empty) attends **every** real key:
  the model's full cross attention. Its output is then a softmax over encoder positions like every other
  query's, never the zero of an empty memory (the decoder would otherwise see a context-free step);
* an example without real keys (an empty document) has output 0 (an empty memory), as in every mechanism.

Cost, honestly: the layout is the encoder-order keys/values plus one long id per key and round; a step
(and the parallel path, per query) takes a masked softmax over all ``k`` keys, ``O(k·(d + R))`` per head, the
same order as full attention. The sparsity is in the attention pattern (what a query can see), not in the
work: a bucket-sorted layout whose step reads only its group would need per-example group offsets and a
capacity per group (the largest group, a host sync at build), left for later (``docs/design.md``).
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import TYPE_CHECKING

import torch
from torch import nn
from torch.nn import functional as F

from srformer.attention.schedule import real_lengths
from srformer.attention.state import CrossAttentionState, accumulation_dtype, autocast_off

if TYPE_CHECKING:  # srformer.config imports the attention registry
    from srformer.config import SRformerConfig


@dataclass(kw_only=True)
class ContentState(CrossAttentionState):
    """The state of a content-based sparse attention (``reformer``, ``routing``). ``num_segments`` is 1.

    Attributes:
        keys: (B, H, k, d) projected encoder keys, in encoder order (padding included).
        values: (B, H, k, d) projected encoder values.
        key_codes: (B, H, R, k) long, the group (bucket, cluster) of every key in each of the ``R`` rounds;
            -1 at padding (no query has group -1).
        key_valid: (B, k) bool, True at real encoder positions.
    """

    keys: torch.Tensor
    values: torch.Tensor
    key_codes: torch.Tensor
    key_valid: torch.Tensor

    def anchors(self) -> tuple[torch.Tensor, torch.Tensor]:  # noqa: D102 - see the base class
        return self.keys, self.values


def unit_rows(x: torch.Tensor) -> torch.Tensor:
    """``x / ||x||`` along the last axis (a zero row stays zero)."""
    return x / x.norm(dim=-1, keepdim=True).clamp_min(torch.finfo(x.dtype).tiny)


class ContentSparseCrossAttention(nn.Module):
    """Base of :class:`~srformer.attention.reformer.ReformerCrossAttention` and
    :class:`~srformer.attention.routing.RoutingCrossAttention`; same interface as
    :class:`~srformer.attention.segmented.SegmentedCrossAttention` (see the module docstring).

    Args:
        config: SRformer settings of one of :attr:`variants`.
        head_dim: ``d``, size of one attention head.
        scale: the wrapped model's attention scale (T5: 1.0, BART: head_dim^-0.5), used by the softmax.

    Attributes:
        has_softmax: True (the output is one softmax over encoder positions); has_recurrence: False.

    Raises:
        ValueError: if ``config.variant`` is not one of :attr:`variants`.
    """

    #: The variant names this class computes (set by each subclass).
    variants: tuple[str, ...] = ()

    def __init__(self, config: SRformerConfig, head_dim: int, scale: float = 1.0) -> None:
        super().__init__()
        if config.variant not in self.variants:
            raise ValueError(f"{type(self).__name__} implements the variants {self.variants}, got {config.variant!r}.")
        self.settings = config
        self.head_dim = head_dim
        self.scale = float(scale)
        self.has_softmax = True
        self.has_recurrence = False

    # ------------------------------------------------------------------ what a subclass defines
    def codes(self, vectors: torch.Tensor) -> torch.Tensor:
        """The group of every vector in each round.

        Args:
            vectors: (B, H, n, d) queries or keys, in float32 or wider.

        Returns:
            (B, H, R, n) long, in ``[0, number of groups)``.
        """
        raise NotImplementedError

    def reset_parameters(self) -> None:
        """Draw the mechanism's seeded buffers again (rotations, initial centroids)."""
        raise NotImplementedError

    def wide_codes(self, vectors: torch.Tensor) -> torch.Tensor:
        """:meth:`codes` of ``vectors`` in float32 or wider, without gradient and with autocast off (a group id
        must not depend on whether bf16 autocast is on around the float32 arithmetic that decides it)."""
        with torch.no_grad(), torch.autocast(device_type=vectors.device.type, enabled=False):
            return self.codes(vectors.detach().to(accumulation_dtype(vectors.dtype)))

    # ------------------------------------------------------------------ state
    @autocast_off
    def init_state(self, keys: torch.Tensor, values: torch.Tensor, key_valid: torch.Tensor | None) -> ContentState:
        """The keys, values and the keys' groups, once per sequence: ``O(k·d·G·R)`` per head for ``G`` groups.

        Args:
            keys: (B, H, k, d) projected encoder keys.
            values: (B, H, k, d) projected encoder values.
            key_valid: (B, k) bool, True at real encoder positions; None when nothing is padded.

        Returns:
            A :class:`ContentState`; an empty document has no real key (its output is 0).
        """
        batch, _, k, _ = keys.shape
        lengths, _ = real_lengths(key_valid, batch, k, keys.device)
        if key_valid is None:
            valid = torch.ones(batch, k, dtype=torch.bool, device=keys.device)
        else:
            valid = key_valid.to(device=keys.device, dtype=torch.bool)
        # a group id is piecewise constant: no gradient flows through it
        key_codes = self.wide_codes(keys).masked_fill(~valid[:, None, None, :], -1)
        return ContentState(
            lengths=lengths,
            num_segments=torch.ones_like(lengths),
            last_segment=torch.full_like(lengths, -1),
            keys=keys,
            values=values,
            key_codes=key_codes,
            key_valid=valid,
        )

    def lean(self, state: CrossAttentionState) -> CrossAttentionState:
        """No lean layout: every step may read any key.

        Raises:
            ValueError: always.
        """
        raise ValueError(f"The lean cache layout is not implemented for variant {self.settings.variant!r}.")

    # ------------------------------------------------------------------ attention
    def allowed(self, queries: torch.Tensor, state: CrossAttentionState) -> torch.Tensor:
        """Which keys each query attends: the real keys sharing a group with it in some round, or every real
        key when there is none (see the module docstring).

        Args:
            queries: (B, H, q, d) projected decoder queries.
            state: a :class:`ContentState` from :meth:`init_state`.

        Returns:
            (B, H, q, k) bool; all False only for an example without real keys.

        Raises:
            ValueError: for a state of another class.
        """
        if not isinstance(state, ContentState):
            raise ValueError(f"{type(self).__name__} needs a ContentState, got a {type(state).__name__}.")
        query_codes = self.wide_codes(queries)  # (B, H, R, q)
        shared = (query_codes[..., :, None] == state.key_codes[..., None, :]).any(dim=2)  # (B, H, q, k)
        valid = state.key_valid[:, None, None, :]
        return torch.where(shared.any(dim=-1, keepdim=True), shared, valid)

    def probabilities(self, queries: torch.Tensor, state: CrossAttentionState) -> torch.Tensor:
        """The softmax weights of every query over the encoder positions (zero outside :meth:`allowed`).

        Args:
            queries: (B, H, q, d) projected decoder queries.
            state: a :class:`ContentState`.

        Returns:
            (B, H, q, k) in the queries' dtype; rows sum to 1, all-zero rows for an empty document.
        """
        allowed = self.allowed(queries, state)
        assert isinstance(state, ContentState)
        logits = torch.matmul(queries, state.keys.to(queries.dtype).transpose(-1, -2)) * self.scale
        # an example without real keys takes a finite softmax (no NaN in values or gradients), then zeros
        some = allowed.any(dim=-1, keepdim=True)
        logits = logits.masked_fill(~allowed, float("-inf")).masked_fill(~some, 0.0)
        return torch.softmax(logits, dim=-1) * some.to(logits.dtype)

    def _read(self, queries: torch.Tensor, state: CrossAttentionState, dropout: float) -> torch.Tensor:
        probabilities = self.probabilities(queries, state)
        if dropout > 0.0:
            probabilities = F.dropout(probabilities, p=dropout, training=True)
        assert isinstance(state, ContentState)
        return torch.matmul(probabilities, state.values.to(queries.dtype))

    def forward(
        self,
        queries: torch.Tensor,
        state: CrossAttentionState,
        *,
        start_position: int | torch.Tensor = 0,
        dropout: float = 0.0,
    ) -> tuple[torch.Tensor, CrossAttentionState]:
        """Content-based sparse attention for ``q`` decoder positions at once.

        Args:
            queries: (B, H, q, d) projected decoder queries.
            state: from :meth:`init_state`.
            start_position: unused (the output does not depend on the position).
            dropout: attention-probability dropout (training only).

        Returns:
            ``(output, state)``: (B, H, q, d) in the queries' dtype, and the unchanged state.
        """
        return self._read(queries, state, dropout), state

    def step(
        self, queries: torch.Tensor, state: CrossAttentionState, *, position: int | torch.Tensor, project_rows=None
    ):
        """One decoder position: same as :meth:`forward` with q = 1 (a masked softmax over the ``k`` keys)."""
        return self._read(queries, state, 0.0), state
