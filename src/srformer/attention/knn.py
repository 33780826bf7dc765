"""Unlimiformer's top-k cross attention (Bertsch, Alon, Neubig & Gormley 2023, Unlimiformer: Long-Range
Transformers with Unlimited Length Input, Sec. 2): the ``knn`` variant.

Unlimiformer keeps every encoder key and lets each decoder query, in every cross-attention head, attend only the
``K`` keys with the highest scores ``Q_t . K_j`` (``K = top_keys``), retrieved from a k-nearest-neighbour index
over all the input's keys; the attention over them is the model's own softmax:

    S_t = the K real encoder positions j with the largest Q_t . K_j
    O_t = sum_{j in S_t} softmax_j(scale * Q_t . K_j | j in S_t) V_j

Here the retrieval is exact: every real key is scored and the top ``K`` are taken (``torch.topk`` and the tie rule);
an approximate index (Unlimiformer uses a Faiss index over the encoder's hidden states) is not implemented.

* **Ties**: the order is score descending, then encoder position ascending, a total order: among keys of equal
  score at the cut, the earlier positions are read. Selection scores are ``Q_t . K_j`` computed in float32 or wider
  with autocast off and without gradient (the model's scale is positive and does not change the order); a NaN
  score counts as the lowest finite score, so a real key always ranks before the padding.
* **Padding**: padded keys are never selected and an example's output depends on its own real keys only (left
  or right padding give the same output; the tie rule compares positions among the real keys, whose order does
  not depend on the padding).
* **Clamp**: when ``K >= n`` (the example's real keys) a query reads all ``n`` keys: full attention. A step
  holds ``min(K, k)`` slots for the padded encoder length ``k`` (a shape, never the data); when ``n < K`` the
  slots that hold padded positions are masked.
* **Empty memory**: an example without real keys has output 0, as in every mechanism.
* **Gradient**: the choice of keys is a hard top-k without gradient; the gradient flows through the softmax over
  the selected keys to the queries, those keys and their values.

Costs per head: a decoder step scores every key and selects, ``O(k·d + k·log K)``, then the softmax over ``K``
keys, ``O(K·d)``. The parallel (training) path scores all ``q x k`` pairs, ``O(q·k·d)`` like full attention, so it
saves no training time; it then reads ``K`` keys per query. The state is the projected keys and values (``2·k·d``
numbers, growing with the input; no lean layout: the keys must all be kept to be searched).
"""

from __future__ import annotations

from collections.abc import Mapping
from dataclasses import dataclass
from typing import TYPE_CHECKING

import torch

from srformer.attention.content import ContentSparseCrossAttention, ContentState, content_base_state
from srformer.attention.naive.common import check_call, per_query, softmax_attention
from srformer.attention.settings import MechanismSettings, integer_setting
from srformer.attention.state import CrossAttentionState, accumulation_dtype, autocast_off

if TYPE_CHECKING:  # srformer.config imports the attention registry
    from srformer.config import SRformerConfig

#: ``K`` when ``top_keys`` is None.
DEFAULT_TOP_KEYS = 32


@dataclass(frozen=True)
class KNNSettings(MechanismSettings):
    """The settings of the ``knn`` variant (``SRformerConfig(variant='knn', top_keys=...)``).

    Attributes:
        top_keys: ``K``, the encoder keys every decoder query reads in every head: those with the largest
            ``Q_t . K_j``. An integer >= 1; ``K >= n`` reads all ``n`` real keys (full attention). None (default):
            32, the number of neighbours Memorizing Transformers (Wu et al. 2022) retrieve per query and head.
            Unlimiformer's own default retrieves as many keys as the model's context window (1024 for BART), which
            is full attention on any input that fits that window; 32 keeps the read sparse on inputs of hundreds
            of tokens and more.
    """

    top_keys: int | None = integer_setting(1, None, "the keys each decoder query reads")

    def resolved_top_keys(self, config: SRformerConfig) -> int:
        """``K``: ``top_keys``, or 32 when it is None."""
        return self.top_keys if self.top_keys is not None else DEFAULT_TOP_KEYS


def top_positions(scores: torch.Tensor, key_valid: torch.Tensor, width: int) -> torch.Tensor:
    """The ``width`` encoder positions first in the order (real first, score descending, position ascending), in
    ascending position order: one ``torch.topk`` for the ``width``-th score ``v``, every position scoring above
    ``v``, and the earliest of those scoring exactly ``v`` up to ``width`` (``torch.topk`` alone leaves the choice
    among equal scores unspecified). ``O(k·log width)`` per row.

    Args:
        scores: (B, H, q, k) selection scores ``Q_t . K_j``, in float32 or wider.
        key_valid: (B, k) bool, True at real encoder positions.
        width: how many positions to return, ``<= k``.

    Returns:
        (B, H, q, width) long in ``[0, k)``, ascending; for an example with ``n`` real keys, ``min(width, n)`` of
        them are real.
    """
    lowest = torch.finfo(scores.dtype).min
    scores = torch.nan_to_num(scores, nan=lowest, posinf=torch.finfo(scores.dtype).max, neginf=lowest)
    scores = scores.masked_fill(~key_valid[:, None, None, :], float("-inf"))  # below every real key
    cut = torch.topk(scores, width, dim=-1).values[..., -1:]
    above, at = scores > cut, scores == cut
    chosen = above | (at & (at.cumsum(-1) <= width - above.sum(-1, keepdim=True)))  # exactly width per row
    index = torch.arange(scores.shape[-1], device=scores.device).expand(scores.shape)
    return torch.topk(index.masked_fill(~chosen, scores.shape[-1]), width, dim=-1, largest=False).values


class KNNCrossAttention(ContentSparseCrossAttention):
    """The ``knn`` variant for one decoder layer (see the module docstring and
    :class:`~srformer.attention.content.ContentSparseCrossAttention`).

    Args:
        config: SRformer settings with ``variant='knn'`` (``top_keys``).
        head_dim: ``d``, size of one attention head.
        scale: the wrapped model's attention scale, used by the softmax.

    Attributes:
        top_keys: ``K``, the keys a query reads.
    """

    variants = ("knn",)

    def __init__(self, config: SRformerConfig, head_dim: int, scale: float = 1.0) -> None:
        super().__init__(config, head_dim, scale)
        self.top_keys = config.resolved_top_keys()

    @autocast_off
    def init_state(self, keys: torch.Tensor, values: torch.Tensor, key_valid: torch.Tensor | None) -> ContentState:
        """The keys and values in encoder order and the real positions (nothing else: the search runs per query).

        Args:
            keys: (B, H, k, d) projected encoder keys.
            values: (B, H, k, d) projected encoder values.
            key_valid: (B, k) bool, True at real encoder positions; None when nothing is padded.

        Returns:
            A :class:`~srformer.attention.content.ContentState`; an empty document has no real key (output 0).
        """
        return content_base_state(keys, values, key_valid)

    def slots(self, queries: torch.Tensor, state: CrossAttentionState) -> tuple[torch.Tensor, torch.Tensor]:
        """The top ``K`` real keys of every query by ``Q_t . K_j`` (ties: the earlier position).

        Args:
            queries: (B, H, q, d) projected decoder queries.
            state: a :class:`~srformer.attention.content.ContentState`.

        Returns:
            ``(positions, mask)``: (B, H, q, min(K, k)), positions ascending; the mask keeps the ``min(K, n)`` real
            ones.
        """
        content = self._state(state)
        width = min(self.top_keys, content.keys.shape[2])
        with torch.no_grad(), torch.autocast(device_type=queries.device.type, enabled=False):
            wide = accumulation_dtype(torch.promote_types(queries.dtype, content.keys.dtype))
            scores = torch.matmul(queries.detach().to(wide), content.keys.detach().to(wide).transpose(-1, -2))
            positions = top_positions(scores, content.key_valid, width)
        batch, heads, length, _ = positions.shape
        valid = content.key_valid[:, None, None, :].expand(batch, heads, length, -1)
        return positions, valid.gather(-1, positions)


def knn_attention(
    queries: torch.Tensor,
    keys: torch.Tensor,
    values: torch.Tensor,
    key_valid: torch.Tensor | None,
    settings: SRformerConfig,
    *,
    scale: float = 1.0,
    parameters: Mapping[str, torch.Tensor] | None = None,
    start_position: int = 0,
) -> torch.Tensor:
    """Float64 reference: per query, the softmax over the ``min(K, n)`` real keys ranked first by
    (``Q_t . K_j`` descending, position ascending) (Unlimiformer, Sec. 2, with exact retrieval).

    Args:
        queries: (B, H, q, d). keys, values: (B, H, k, d). key_valid: (B, k) bool or None.
        settings: a config with ``variant='knn'``. scale: the model's attention scale.
        parameters: none (the mechanism has no learned tensors). start_position: unused.

    Returns:
        (B, H, q, d) float64; 0 for an example without real keys.
    """
    check_call(settings, parameters, "knn")
    top = settings.resolved_top_keys()

    def one_query(query: torch.Tensor, k: torch.Tensor, v: torch.Tensor, t: int) -> torch.Tensor:
        products = (k @ query).tolist()
        chosen = sorted(range(len(products)), key=lambda j: (-products[j], j))[:top]
        rows = torch.tensor(sorted(chosen), dtype=torch.long)
        return softmax_attention(query, k[rows], v[rows], scale)

    return per_query(queries, keys, values, key_valid, start_position, one_query)
