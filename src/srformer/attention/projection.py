"""A decoder layer's key and value projections, split per head: what a mechanism needs to search the encoder
output itself and to project only the rows it retrieves (the indexed ``knn``, Unlimiformer Sec. 2.3).
"""

from __future__ import annotations

from dataclasses import dataclass

import torch
from torch import nn

__all__ = ["HeadProjection"]


@dataclass(frozen=True)
class HeadProjection:
    """``K_j = W_k h_j + b_k`` and ``V_j = W_v h_j + b_v`` per head, for encoder hidden states ``h_j`` of size ``D``.

    Attributes:
        key_weight: (H, d, D) view of the key projection's weight (no copy).
        key_bias: (H, d) or None.
        value_weight: (H, d, D).
        value_bias: (H, d) or None.
    """

    key_weight: torch.Tensor
    key_bias: torch.Tensor | None
    value_weight: torch.Tensor
    value_bias: torch.Tensor | None

    @classmethod
    def from_linear(cls, key: nn.Module, value: nn.Module, heads: int, head_dim: int) -> HeadProjection | None:
        """The projection of two ``nn.Linear`` modules (T5's ``k``/``v``, BART's ``k_proj``/``v_proj``), or None
        for any other module (a quantized or adapter-wrapped projection: the mechanism then takes its exact path)."""
        if type(key) is not nn.Linear or type(value) is not nn.Linear:
            return None

        def split(linear: nn.Linear) -> tuple[torch.Tensor, torch.Tensor | None]:
            weight = linear.weight.view(heads, head_dim, linear.in_features)
            bias = None if linear.bias is None else linear.bias.view(heads, head_dim)
            return weight, bias

        return cls(*split(key), *split(value))

    def hidden_queries(self, queries: torch.Tensor) -> torch.Tensor:
        """``W_k^T Q``: queries in the encoder's hidden space, whose inner product with ``h_j`` orders the keys as
        ``Q . K_j`` does (the bias adds the same ``Q . b_k`` to every key).

        Args:
            queries: (B, H, q, d).

        Returns:
            (B, H, q, D) in float32 or wider.
        """
        wide = torch.promote_types(queries.dtype, torch.float32)
        return torch.einsum("bhqd,hdD->bhqD", queries.to(wide), self.key_weight.to(wide))

    def project(self, rows: torch.Tensor) -> tuple[torch.Tensor, torch.Tensor]:
        """Each head's keys and values of its own encoder rows.

        Args:
            rows: (B, H, n, D) encoder hidden states, head ``h`` reading ``rows[:, h]``.

        Returns:
            ``(keys, values)``, each (B, H, n, d) in the weights' dtype.
        """
        rows = rows.to(self.key_weight.dtype)
        keys = torch.einsum("bhnD,hdD->bhnd", rows, self.key_weight)
        values = torch.einsum("bhnD,hdD->bhnd", rows, self.value_weight)
        if self.key_bias is not None:
            keys = keys + self.key_bias[None, :, None, :]
        if self.value_bias is not None:
            values = values + self.value_bias[None, :, None, :]
        return keys, values
