"""The base of the segment-free cross attentions whose output does not depend on the decoder position.

``linear``, ``fastformer``, ``performer``, the summaries (``linformer``, ``compressed``, ``inducing``) and the
content-based ``reformer``/``routing`` build a per-sequence state once (``init_state``) and then read it the
same way for every decoder position: teacher forcing (``forward``) and a decoder step (``step``) are one
function of the queries and the state, :meth:`SegmentFreeCrossAttention._read`, and the state never changes.
"""

from __future__ import annotations

import torch

from srformer.attention.base import CrossAttentionMechanism
from srformer.attention.state import CrossAttentionState


class SegmentFreeCrossAttention(CrossAttentionMechanism):
    """Shared ``forward``/``step``/``lean`` of the position-independent mechanisms; a subclass gives ``_read``
    (and ``init_state``). Arguments as :class:`~srformer.attention.base.CrossAttentionMechanism`."""

    def init_state(
        self, keys: torch.Tensor, values: torch.Tensor, key_valid: torch.Tensor | None
    ) -> CrossAttentionState:
        """The per-sequence state from the projected encoder keys/values (B, H, k, d) and ``key_valid`` (B, k)
        bool or None; each mechanism defines it."""
        raise NotImplementedError

    def _read(self, queries: torch.Tensor, state: CrossAttentionState, dropout: float) -> torch.Tensor:
        """The output (B, H, q, d), in the queries' dtype, of queries (B, H, q, d) reading ``state``, with
        ``dropout`` on the attention probabilities where the mechanism forms them (ignored otherwise)."""
        raise NotImplementedError

    def forward(
        self,
        queries: torch.Tensor,
        state: CrossAttentionState,
        *,
        start_position: int | torch.Tensor = 0,
        dropout: float = 0.0,
    ) -> tuple[torch.Tensor, CrossAttentionState]:
        """Cross attention for ``q`` decoder positions at once.

        Args:
            queries: (B, H, q, d) projected decoder queries.
            state: from ``init_state``.
            start_position: unused (the output does not depend on the position).
            dropout: attention-probability dropout (training only) for the mechanisms that form probabilities
                (``reformer``, ``routing``, the summaries); the others ignore it.

        Returns:
            ``(output, state)``: (B, H, q, d) in the queries' dtype, and the unchanged state.
        """
        return self._read(queries, state, dropout), state

    def step(
        self, queries: torch.Tensor, state: CrossAttentionState, *, position: int | torch.Tensor, project_rows=None
    ) -> tuple[torch.Tensor, CrossAttentionState]:
        """One decoder position: :meth:`forward` with q = 1 and no dropout (the position and ``project_rows``
        are unused)."""
        return self._read(queries, state, 0.0), state

    def lean(self, state: CrossAttentionState) -> CrossAttentionState:
        """The state itself when it does not grow with the input (it is its own lean layout).

        Raises:
            ValueError: for a state that grows with the input (``compressed``, ``reformer``, ``routing``): no lean
                layout.
        """
        if not state.is_lean:
            raise ValueError(f"The lean cache layout is not implemented for variant {self.settings.variant!r}.")
        return state
