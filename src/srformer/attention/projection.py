"""A decoder layer's key and value projections, split per head: what a mechanism needs to search the encoder
output itself and to project only the rows it retrieves (the indexed ``knn``, Unlimiformer Sec. 2.3).
"""

from __future__ import annotations

import torch
from torch import nn
from torch.nn import functional as F

__all__ = ["HeadProjection"]


class HeadProjection:
    """``K_j = W_k h_j + b_k`` and ``V_j = W_v h_j + b_v`` per head, for encoder hidden states ``h_j`` of size ``D``.

    The per-head views of the weights are made when first read and kept on the object: a projection is made at every
    forward call of a converted layer (:meth:`from_linear`), and a step that does not read it (every layout that
    holds its keys and values) makes no operator call for it. A state that keeps a projection for its steps calls
    :meth:`kept` when it is built, so that its steps read views made once per sequence.

    Attributes:
        key_weight: (H, d, D) view of the key projection's weight (no copy).
        key_bias: (H, d) or None.
        value_weight: (H, d, D).
        value_bias: (H, d) or None.
    """

    def __init__(self, key: nn.Linear, value: nn.Linear, heads: int, head_dim: int) -> None:
        self._linears = (key, value)
        self._heads, self._head_dim = heads, head_dim
        self._views: tuple[torch.Tensor, torch.Tensor | None, torch.Tensor, torch.Tensor | None] | None = None

    @classmethod
    def from_linear(cls, key: nn.Module, value: nn.Module, heads: int, head_dim: int) -> HeadProjection | None:
        """The projection of two ``nn.Linear`` modules (T5's ``k``/``v``, BART's ``k_proj``/``v_proj``), or None
        for any other module (a quantized or adapter-wrapped projection: the mechanism then takes its exact path).
        No operator call: the views are made when first read."""
        if type(key) is not nn.Linear or type(value) is not nn.Linear:
            return None
        return cls(key, value, heads, head_dim)

    def _split(self) -> tuple[torch.Tensor, torch.Tensor | None, torch.Tensor, torch.Tensor | None]:
        if self._views is None:
            heads, head_dim = self._heads, self._head_dim
            parts: list[torch.Tensor | None] = []
            for linear in self._linears:
                parts.append(linear.weight.view(heads, head_dim, linear.in_features))
                parts.append(None if linear.bias is None else linear.bias.view(heads, head_dim))
            key_weight, key_bias, value_weight, value_bias = parts
            assert key_weight is not None and value_weight is not None
            self._views = (key_weight, key_bias, value_weight, value_bias)
        return self._views

    def kept(self) -> HeadProjection:
        """This projection with its views made now (two to four view calls, once): for a state that reads it at
        every step, so that no step makes them again (nor, compiled, changes an object the graph reads)."""
        self._split()
        return self

    @property
    def key_weight(self) -> torch.Tensor:  # noqa: D102 - see the class
        return self._split()[0]

    @property
    def key_bias(self) -> torch.Tensor | None:  # noqa: D102 - see the class
        return self._split()[1]

    @property
    def value_weight(self) -> torch.Tensor:  # noqa: D102 - see the class
        return self._split()[2]

    @property
    def value_bias(self) -> torch.Tensor | None:  # noqa: D102 - see the class
        return self._split()[3]

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

    def step_hidden_queries(self, queries: torch.Tensor, dtype: torch.dtype) -> torch.Tensor:
        """``W_k^T Q_t`` of one decoder position as a product and a sum (three operator calls, where an einsum
        takes about eight): the decoder steps' form of :meth:`hidden_queries`.

        Args:
            queries: (B, H, 1, d).
            dtype: the dtype to compute in (float32 or wider).

        Returns:
            (B, H, 1, D) in ``dtype``.
        """
        return (_as(queries, dtype).transpose(-1, -2) * _as(self.key_weight, dtype)).sum(dim=-2, keepdim=True)

    def example_values(self, has_keys: torch.Tensor) -> tuple[torch.Tensor, torch.Tensor | None]:
        """The value projection of each example for :meth:`attend_rows`, made once per sequence by a state that
        reads encoder rows (``quest``'s): ``W_v`` and ``b_v`` times ``has_keys``, so that an example without a real
        key outputs 0 without a step multiplying by it (one or two operator calls per layer and step fewer).
        ``B·H·d·D`` numbers per layer: a t5-small layer's 262,144 per example (1 MiB in float32).

        Args:
            has_keys: (B, 1, 1, 1) float32 or wider, 1 for an example with a real key and 0 for one without.

        Returns:
            ``(value_weight, value_bias)``: (B, H, d, D) and (B, H, 1, d) or None (no value bias), in
            ``has_keys``' dtype.
        """
        dtype = has_keys.dtype
        weight = has_keys * _as(self.value_weight, dtype)
        bias = None if self.value_bias is None else has_keys * _as(self.value_bias, dtype).unsqueeze(1)
        return weight, bias

    def attend_rows(
        self, hidden_queries: torch.Tensor, rows: torch.Tensor, bias: torch.Tensor, scale: float, *,
        has_keys: torch.Tensor | None = None,
        example_values: tuple[torch.Tensor, torch.Tensor | None] | None = None,
    ) -> torch.Tensor:
        """Attention of one decoder position over encoder rows in the absorbed form (Unlimiformer Sec. 2.3): the
        softmax of ``scale · (W_k^T Q_t) · h_x + bias_x`` mixes the rows ``h_x`` in the hidden space, and ``W_v``
        projects the mix (``sum_x a_x (W_v h_x + b_v) = W_v (sum_x a_x h_x) + b_v``): the output of the softmax over
        the rows' keys and values, without projecting them. An example without a real key outputs 0, by one of two
        forms: the layer's ``W_v`` and a factor per example (five operator calls, eight with a value bias), or each
        example's ``W_v`` with the factor folded in (:meth:`example_values`: four, five with a value bias).

        Args:
            hidden_queries: (B, H, 1, D), :meth:`step_hidden_queries`.
            rows: (B, H, S, D) the rows each head reads, in the hidden queries' dtype.
            bias: (B, H, 1, S) additive bias in that dtype (the dtype's lowest value at a row not to read).
            scale: the model's attention scale.
            has_keys: (B, 1, 1, 1) in that dtype, 1 for an example with a real key and 0 for one without.
            example_values: :meth:`example_values`, instead of ``has_keys``.

        Returns:
            (B, H, 1, d) in the hidden queries' dtype (or wider, where the value projection is).

        Raises:
            ValueError: unless exactly one of ``has_keys`` and ``example_values`` is given.
        """
        if (has_keys is None) == (example_values is None):
            raise ValueError("attend_rows takes either `has_keys` (the layer's W_v) or `example_values` (each "
                             "example's W_v), exactly one of them.")
        mixed = F.scaled_dot_product_attention(hidden_queries, rows, rows, attn_mask=bias, scale=scale)
        if example_values is not None:
            value_weight, value_bias = example_values
        else:
            assert has_keys is not None
            dtype, heads = hidden_queries.dtype, rows.shape[1]
            mixed = mixed * has_keys
            value_weight = _as(self.value_weight, dtype)
            value_bias = (None if self.value_bias is None
                          else _as(self.value_bias, dtype).view(1, heads, 1, -1) * has_keys)
        output = (mixed * value_weight).sum(dim=-1).unsqueeze(2)  # (B, H, 1, d)
        return output if value_bias is None else output + value_bias

    def keys(self, hidden: torch.Tensor) -> torch.Tensor:
        """The keys of encoder rows as the layer computes them (its own ``linear``, bias included), split into
        heads: about six operator calls, where a per-head ``einsum`` takes fourteen.

        Args:
            hidden: (B, n, D) encoder hidden states.

        Returns:
            (B, H, n, d) in the weights' dtype (a transposed view of (B, n, H, d)).
        """
        key = self._linears[0]
        batch, count = hidden.shape[:2]
        keys = F.linear(_as(hidden, key.weight.dtype), key.weight, key.bias)
        return keys.view(batch, count, self._heads, self._head_dim).transpose(1, 2)

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


def _as(tensor: torch.Tensor, dtype: torch.dtype) -> torch.Tensor:
    """``tensor`` in ``dtype``, without an operator call when it already is."""
    return tensor if tensor.dtype == dtype else tensor.to(dtype)
