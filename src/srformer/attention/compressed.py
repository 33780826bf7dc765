"""Memory-compressed attention (Liu, Saleh, Pot, Goodrich, Sepassi, Kaiser & Shazeer 2018, Generating Wikipedia by
Summarizing Long Sequences, Sec. 4.2.3), as decoder cross attention: the ``compressed`` variant.

A strided convolution (kernel size = stride = ``c``) over the keys and over the values reduces ``n`` positions to
``ceil(n / c)`` rows, and the queries attend the compressed keys and values with one softmax::

    K~_r = b_K + sum_{j < c} W_K[:, :, j] K_{r c + j},   V~_r = b_V + sum_{j < c} W_V[:, :, j] V_{r c + j}
    O[t] = softmax(scale * Q_t K~^T) V~                  (r < ceil(n / c))

Choices (``docs/design.md``, "Memory-compressed attention"):

* **Padding and the last block.** The convolution runs over the example's ``n`` real positions, compacted (its
  real positions in order, so the padding pattern does not matter); a last partial block (``n mod c != 0``) reads
  zeros past position ``n - 1`` (a zero-padded convolution), so it has as many rows as there are blocks holding a
  real position, ``ceil(n / c)``, and none is made of padding only.
* **Weights.** One convolution for the keys and one for the values (``W`` of shape ``(d, d, c)`` and a bias
  ``b`` of ``d`` numbers, the layout of ``torch.nn.Conv1d``), per layer, shared by the heads (the paper
  convolves the keys and values, ``d_model`` wide, before they are split into heads; here they arrive per
  head, so the convolution acts on each head's ``d`` features). Initialised to mean pooling,
  ``W[o, i, j] = [o = i] / c`` and ``b = 0``, so a converted model starts by attending block means (a last
  partial block: the sum of its real rows over ``c``).
* ``c = compression_stride`` (default 3, the paper's kernel size and stride).

Costs per head: build ``O(n·d²)``, step ``O((k/c)·d)``, state ``2·(k/c)·d`` (it grows with the input, so there
is no lean layout). The ``output_attentions`` weights spread each row's probability evenly over the real
positions of its block (a distribution over the encoder positions; with learned ``W`` it is not ``O = A V``).
"""

from __future__ import annotations

import math
from dataclasses import dataclass
from typing import TYPE_CHECKING

import torch
from torch import nn

from srformer.attention.initialization import InitFunctions
from srformer.attention.schedule import compaction_order
from srformer.attention.state import CrossAttentionState
from srformer.attention.summary import SummaryCrossAttention, SummaryState
from srformer.core import MechanismSettings, integer_setting

if TYPE_CHECKING:
    from srformer.core import SRformerConfig


@dataclass(frozen=True)
class CompressedSettings(MechanismSettings):
    """The settings of the ``compressed`` variant (``SRformerConfig(variant='compressed', ...)``;
    None: the default named below).

    Attributes:
        compression_stride: ``c``, kernel size and stride of the ``compressed`` variant's convolutions over the keys and
            values (Liu et al. 2018, Sec. 4.2.3): ``n`` real encoder tokens become ``ceil(n / c)`` rows. At least 1 (1
            keeps every position, each through the learned map). None (default): 3, the paper's.
    """

    compression_stride: int | None = integer_setting(1)

    def resolved_compression_stride(self, config: SRformerConfig) -> int:
        """``c``: ``compression_stride``, or 3 when it is None."""
        return self.compression_stride if self.compression_stride is not None else 3


@dataclass(kw_only=True)
class CompressedState(SummaryState):
    """The ``compressed`` state: :class:`~srformer.attention.summary.SummaryState` with ``r = ceil(k / c)`` rows
    (``summary_valid[b, r] = r < ceil(n_b / c)``); it grows with the input, so it is not lean."""

    is_lean = False


def mean_pooling(head_dim: int, stride: int) -> torch.Tensor:
    """The initial convolution weight, ``W[o, i, j] = [o = i] / c``: (d, d, c) float32."""
    return (torch.eye(head_dim)[:, :, None] / stride).expand(-1, -1, stride).clone()


class CompressedCrossAttention(SummaryCrossAttention):
    """The ``compressed`` variant for one decoder layer; see :class:`~srformer.attention.summary.SummaryCrossAttention`.

    Args:
        config: settings with ``variant='compressed'`` (``compression_stride``).
        head_dim: ``d``. scale: the model's attention scale.

    Attributes:
        key_weight, value_weight: (d, d, c) the convolutions' weights (``torch.nn.Conv1d`` layout: out, in, kernel).
        key_bias, value_bias: (d,) their biases.
    """

    state_class = CompressedState

    def __init__(self, config: SRformerConfig, head_dim: int, scale: float = 1.0) -> None:
        super().__init__(config, head_dim, scale)
        self.stride = config.resolved_compression_stride()
        self.key_weight = nn.Parameter(torch.empty(head_dim, head_dim, self.stride))
        self.value_weight = nn.Parameter(torch.empty(head_dim, head_dim, self.stride))
        self.key_bias = nn.Parameter(torch.empty(head_dim))
        self.value_bias = nn.Parameter(torch.empty(head_dim))
        self.reset_parameters()

    def initialize_parameters(self, init: InitFunctions) -> None:
        """Mean pooling: ``W[o, i, j] = [o = i] / c``, ``b = 0``."""
        for weight in (self.key_weight, self.value_weight):
            init.copy_(weight, mean_pooling(self.head_dim, self.stride))
        init.zeros_(self.key_bias)
        init.zeros_(self.value_bias)

    def _convolve(self, tensor: torch.Tensor, weight: torch.Tensor, bias: torch.Tensor) -> torch.Tensor:
        """Kernel = stride = ``c`` over zero-padded compacted positions: (B, H, k, d) -> (B, H, ceil(k / c), d)."""
        batch, heads, k, d = tensor.shape
        rows = math.ceil(k / self.stride)
        padded = torch.nn.functional.pad(tensor, (0, 0, 0, rows * self.stride - k))
        blocks = padded.view(batch, heads, rows, self.stride, d)
        return torch.einsum("bhrji,oij->bhro", blocks, weight.to(tensor.dtype)) + bias.to(tensor.dtype)

    def summarise(
        self, keys: torch.Tensor, values: torch.Tensor, valid: torch.Tensor, lengths: torch.Tensor
    ) -> tuple[torch.Tensor, torch.Tensor, torch.Tensor]:
        """The convolved keys and values, one row per block of ``c`` compacted positions; a row exists where its
        block holds a real position (``r < ceil(n / c)``). Arguments as in the base class."""
        summary_keys = self._convolve(keys, self.key_weight, self.key_bias)
        summary_values = self._convolve(values, self.value_weight, self.value_bias)
        rows = torch.arange(summary_keys.shape[2], device=keys.device)
        summary_valid = rows[None, :] * self.stride < lengths[:, None]
        return summary_keys, summary_values, summary_valid

    def output_from_weights(
        self, weights: torch.Tensor, queries: torch.Tensor, keys: torch.Tensor, values: torch.Tensor,
        state: CrossAttentionState, *, start_position: int | torch.Tensor, key_valid: torch.Tensor | None,
    ) -> torch.Tensor:
        """``P V~`` with each row's probability ``P_g`` recovered from the returned weights as the sum over its
        block's positions (:meth:`row_spread` spreads ``P_g`` evenly over them), so the output depends on the
        weights although the convolved values are no weighted sum of ``V``. Arguments as in the base class."""
        assert isinstance(state, CompressedState), type(state)
        summary_values = state.summary_values
        weights = weights.to(summary_values.dtype)
        if key_valid is not None:  # compacted position p holds encoder position order[p]
            order = compaction_order(key_valid.to(device=weights.device, dtype=torch.bool))
            weights = weights.gather(3, order[:, None, None, :].expand_as(weights))
        k = weights.shape[-1]
        block = torch.arange(k, device=weights.device) // self.stride  # the block of each compacted position
        rows = torch.arange(summary_values.shape[2], device=weights.device)
        member = (block[:, None] == rows[None, :]).to(weights.dtype)  # (k, R)
        return torch.matmul(torch.matmul(weights, member), summary_values).to(queries.dtype)

    def row_spread(self, keys: torch.Tensor, valid: torch.Tensor, lengths: torch.Tensor) -> torch.Tensor:
        """Each row's probability spread evenly over the real positions of its block (a documented stand-in:
        the learned convolution mixes features, so no ``S`` with ``V~ = S V`` exists)."""
        k = keys.shape[2]
        rows = math.ceil(k / self.stride)
        block = torch.arange(k, device=keys.device) // self.stride  # (k,) the block of each compacted position
        member = (block[None, :] == torch.arange(rows, device=keys.device)[:, None])[None] & valid[:, None, :]
        member = member.to(keys.dtype)  # (B, R, k)
        return (member / member.sum(dim=-1, keepdim=True).clamp(min=1))[:, None]
