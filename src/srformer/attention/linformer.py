"""Linformer (Wang, Li, Khabsa, Fang & Ma 2020, Linformer: Self-Attention with Linear Complexity, Sec. 4),
as decoder cross attention: the ``linformer`` variant.

Linformer projects the keys and values along the sequence axis with learned matrices ``E, F`` (``r x N``)
before the softmax (Sec. 4, Eq. 7)::

    O[t] = softmax(scale * Q_t (E K)^T) (F V)          E K, F V: r x d

Choices (``docs/design.md``, "Linformer"):

* **Variable length.** ``E`` and ``F`` are learned ``(r, N)`` matrices, ``N = max_source_length``. An example
  with ``n`` real encoder positions, compacted (its real positions in order, so the padding pattern does not
  matter), is projected by the first ``n`` columns: ``E K = sum_{p < n} E[:, p] K_p``. An example with
  ``n > N`` raises ``ValueError`` naming ``max_source_length`` (the paper fixes ``n = N``; there is no column
  for position ``N``). The padded width may exceed ``N`` as long as no example has more than ``N`` real
  positions.
* **Sharing.** Headwise sharing (Sec. 4, "Parameter sharing"): one ``E`` and one ``F`` per layer, shared by the
  heads, ``E != F`` (the paper reports the sharing modes within a few tenths of a point of each other;
  headwise keeps the two projections of the original formulation at ``2·r·N`` numbers per layer).
* **Initialisation.** Entries drawn from ``N(0, 1/r)``: the random projection ``R`` of Theorems 1-2
  (``E = delta R``, ``R_ij ~ N(0, 1/k)`` with ``k`` the projected length), so ``E K`` is a Johnson-Lindenstrauss
  sketch of the keys at the start.

Costs per head: build ``O(r·n·d)`` once per sequence, step ``O(r·d)``, state ``2·r·d``. No segments, no lean layout
of its own (the state does not grow with the input: it is its own lean layout).
"""

from __future__ import annotations

import math
from dataclasses import dataclass
from typing import TYPE_CHECKING

import torch
from torch import nn

from srformer.attention.initialization import InitFunctions
from srformer.attention.schedule import tracing
from srformer.attention.summary import SummaryCrossAttention
from srformer.core import MechanismSettings, integer_setting

if TYPE_CHECKING:
    from srformer.core import SRformerConfig


@dataclass(frozen=True)
class LinformerSettings(MechanismSettings):
    """The settings of the ``linformer`` variant (``SRformerConfig(variant='linformer', ...)``;
    None: the default named below).

    Attributes:
        projected_length: ``r``, the number of rows the ``linformer`` variant's learned projections ``E, F`` (Wang et
            al. 2020, Sec. 4) map the encoder keys and values to. At least 1. None (default): 256, the largest projected
            length of the paper's experiments (Sec. 5: 128 and 256).
        max_source_length: ``N``, the number of columns of ``E, F``: the most real encoder tokens a ``linformer``
            example may have (an example of ``n <= N`` tokens is projected by the first ``n`` columns; a longer one
            raises ``ValueError``). At least 1. None (default): 4096, the longest sequence of the paper's experiments
            (Sec. 5) and of common long-document summarisation inputs; the two projections then hold ``2 * 256 * 4096``
            numbers per layer.
    """

    projected_length: int | None = integer_setting(1)
    max_source_length: int | None = integer_setting(1)

    def resolved_projected_length(self, config: SRformerConfig) -> int:
        """``r``: ``projected_length``, or 256 when it is None."""
        return self.projected_length if self.projected_length is not None else 256

    def resolved_max_source_length(self, config: SRformerConfig) -> int:
        """``N``: ``max_source_length``, or 4096 when it is None."""
        return self.max_source_length if self.max_source_length is not None else 4096


class LinformerCrossAttention(SummaryCrossAttention):
    """The ``linformer`` variant for one decoder layer; see :class:`~srformer.attention.summary.SummaryCrossAttention`.

    Args:
        config: settings with ``variant='linformer'``: ``projected_length`` (``r``) and ``max_source_length``
            (``N``), see :class:`~srformer.config.SRformerConfig`.
        head_dim: ``d``. scale: the model's attention scale.

    Attributes:
        key_projection: (r, N) ``E``, shared by the heads.
        value_projection: (r, N) ``F``, shared by the heads.
    """

    def __init__(self, config: SRformerConfig, head_dim: int, scale: float = 1.0) -> None:
        super().__init__(config, head_dim, scale)
        shape = (config.resolved_projected_length(), config.resolved_max_source_length())
        self.key_projection = nn.Parameter(torch.empty(shape))
        self.value_projection = nn.Parameter(torch.empty(shape))
        self.reset_parameters()

    def initialize_parameters(self, init: InitFunctions) -> None:
        """``E, F`` with entries from ``N(0, 1/r)`` (the random projection of Linformer's Theorems 1-2)."""
        std = 1.0 / math.sqrt(self.key_projection.shape[0])
        init.normal_(self.key_projection, std=std)
        init.normal_(self.value_projection, std=std)

    def _columns(self, width: int, lengths: torch.Tensor) -> int:
        """The number of projection columns read for compacted inputs of ``width`` positions.

        Raises:
            ValueError: if an example has more real positions than ``max_source_length``.
        """
        limit = self.key_projection.shape[1]
        if width > limit and not tracing() and int(lengths.max()) > limit:
            raise ValueError(
                f"An encoder input has {int(lengths.max())} real tokens, more than the linformer projection's "
                f"`max_source_length` ({limit}); truncate the inputs or set max_source_length >= "
                f"{int(lengths.max())} (a new model: the projections E, F are (projected_length, max_source_length))."
            )
        return min(width, limit)

    def summarise(
        self, keys: torch.Tensor, values: torch.Tensor, valid: torch.Tensor, lengths: torch.Tensor
    ) -> tuple[torch.Tensor, torch.Tensor, torch.Tensor]:
        """``E[:, :n] K`` and ``F[:, :n] V`` over each example's ``n`` compacted real positions (zero after them);
        every one of the ``r`` rows exists unless the example is empty. Arguments as in the base class."""
        columns = self._columns(keys.shape[2], lengths)
        key_projection = self.key_projection[:, :columns].to(keys.dtype)
        value_projection = self.value_projection[:, :columns].to(keys.dtype)
        summary_keys = torch.matmul(key_projection, keys[:, :, :columns])  # padding is zero after compaction
        summary_values = torch.matmul(value_projection, values[:, :, :columns])
        summary_valid = (lengths > 0)[:, None].expand(-1, key_projection.shape[0])
        return summary_keys, summary_values, summary_valid

    def row_spread(self, keys: torch.Tensor, valid: torch.Tensor, lengths: torch.Tensor) -> torch.Tensor:
        """``F`` over the compacted positions (``F V = S V``), zero at the columns past ``N``: the weights
        ``A = P F`` give ``O = A V`` exactly; they may be negative and need not sum to 1 (``F`` is a learned map)."""
        columns = self._columns(keys.shape[2], lengths)
        spread = keys.new_zeros(self.value_projection.shape[0], keys.shape[2])
        spread[:, :columns] = self.value_projection[:, :columns].to(keys.dtype)
        return spread[None, None]
