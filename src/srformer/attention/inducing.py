"""Inducing points (Lee, Lee, Kim, Kosiorek, Choi & Teh 2019, Set Transformer, Sec. 3.2: ISAB and PMA), as decoder
cross attention: the ``inducing`` variant.

Set Transformer's induced set attention block lets ``I`` learned inducing queries attend the set (``H = MAB(I, X)``,
Eq. 9-10) and pooling by multihead attention summarises a set by ``k`` learned seed queries (``PMA``, Eq. 11). As
cross attention, the learned queries attend the example's real encoder keys once per sequence and the decoder
attends the ``I``-row summary::

    P = softmax_j(scale * I K^T)      (I x n: one distribution over the real positions per inducing point)
    K~ = P K,  V~ = P V               (I x d each)
    O[t] = softmax(scale * Q_t K~^T) V~

Choices (``docs/design.md``, "Inducing points"):

* **The summary's keys and values** are the encoder keys and values pooled with the same weights ``P``: the decoder
  query compares itself with keys in the model's own key space (so ``scale`` keeps its meaning), and the output is
  a convex combination of the encoder values, ``O = (p P) V``. The row-wise feed-forward and layer norm of the
  paper's MAB are left out (there is no encoder-side layer to place them in; the decoder layer's own feed-forward
  follows the attention).
* ``I = num_inducing_points`` (default 32, the largest of the paper's experiments, Sec. 5), one set of points
  per layer shared by the heads (each head pools its own keys), initialised ``N(0, 1/d)``.
* Padding: ``P`` is a softmax over the example's real positions only (compacted), so padding never matters; an
  empty document has no summary rows (output 0).

Costs per head: build ``O(I·n·d)``, step ``O(I·d)``, state ``2·I·d`` (its own lean layout).
"""

from __future__ import annotations

import math
from dataclasses import dataclass
from typing import TYPE_CHECKING

import torch
from torch import nn

from srformer.attention.initialization import InitFunctions
from srformer.attention.summary import SummaryCrossAttention
from srformer.core import MechanismSettings, integer_setting

if TYPE_CHECKING:
    from srformer.core import SRformerConfig


@dataclass(frozen=True)
class InducingSettings(MechanismSettings):
    """The settings of the ``inducing`` variant (``SRformerConfig(variant='inducing', ...)``;
    None: the default named below).

    Attributes:
        num_inducing_points: ``I``, the number of learned inducing queries of the ``inducing`` variant (Lee et al. 2019,
            Set Transformer): the encoder is summarised into ``I`` rows per head. At least 1. None (default): 32, the
            largest number of the paper's experiments.
    """

    num_inducing_points: int | None = integer_setting(1)

    def resolved_inducing_points(self, config: SRformerConfig) -> int:
        """``I``: ``num_inducing_points``, or 32 when it is None."""
        return self.num_inducing_points if self.num_inducing_points is not None else 32


class InducingCrossAttention(SummaryCrossAttention):
    """The ``inducing`` variant for one decoder layer; see :class:`~srformer.attention.summary.SummaryCrossAttention`.

    Args:
        config: settings with ``variant='inducing'`` (``num_inducing_points``).
        head_dim: ``d``. scale: the model's attention scale (used in both softmaxes).

    Attributes:
        inducing_points: (I, d) the learned inducing queries, shared by the heads.
    """

    def __init__(self, config: SRformerConfig, head_dim: int, scale: float = 1.0) -> None:
        super().__init__(config, head_dim, scale)
        self.inducing_points = nn.Parameter(torch.empty(config.resolved_inducing_points(), head_dim))
        self.reset_parameters()

    def initialize_parameters(self, init: InitFunctions) -> None:
        """Inducing points from ``N(0, 1/d)``."""
        init.normal_(self.inducing_points, std=1.0 / math.sqrt(self.head_dim))

    def pooling(self, keys: torch.Tensor, valid: torch.Tensor) -> torch.Tensor:
        """``P = softmax_j(scale * I K^T)`` over the real (compacted) positions.

        Args:
            keys: (B, H, k, d) compacted. valid: (B, k) bool.

        Returns:
            (B, H, I, k): zero at padding; all zero for an example without real positions.
        """
        logits = torch.matmul(self.inducing_points.to(keys.dtype), keys.transpose(-1, -2)) * self.scale
        mask = valid[:, None, None, :]
        # an example without real positions takes a finite softmax (no NaN, in values or gradients), then zeros
        logits = logits.masked_fill(~mask, float("-inf")).masked_fill(~mask.any(dim=-1, keepdim=True), 0.0)
        return torch.softmax(logits, dim=-1) * mask.to(logits.dtype)

    def summarise(
        self, keys: torch.Tensor, values: torch.Tensor, valid: torch.Tensor, lengths: torch.Tensor
    ) -> tuple[torch.Tensor, torch.Tensor, torch.Tensor]:
        """``K~ = P K`` and ``V~ = P V``; all ``I`` rows exist unless the example is empty. Arguments as in the
        base class."""
        pooling = self.pooling(keys, valid)
        summary_valid = (lengths > 0)[:, None].expand(-1, pooling.shape[2])
        return torch.matmul(pooling, keys), torch.matmul(pooling, values), summary_valid

    def row_spread(self, keys: torch.Tensor, valid: torch.Tensor, lengths: torch.Tensor) -> torch.Tensor:
        """``P`` itself (``V~ = P V``): the weights ``A = p P`` give ``O = A V`` exactly, non-negative, rows
        summing to 1."""
        return self.pooling(keys, valid)
