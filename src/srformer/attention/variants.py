"""The attention module that computes each cross-attention variant."""

from __future__ import annotations

from srformer.attention.linear import LinearCrossAttention
from srformer.attention.segmented_recurrent import SegmentedRecurrentAttention
from srformer.config import SRformerConfig

CrossAttentionModule = SegmentedRecurrentAttention | LinearCrossAttention


def build_cross_attention(config: SRformerConfig, head_dim: int, scale: float = 1.0) -> CrossAttentionModule:
    """The module for ``config.variant``: :class:`LinearCrossAttention` for ``linear``,
    :class:`SegmentedRecurrentAttention` for ``segmented``, ``srformer`` (and its ablations), ``xl``
    and ``longt5``.

    Args:
        config: the SRformer settings.
        head_dim: ``d``, size of one attention head.
        scale: the wrapped model's attention scale (T5: 1.0, BART: head_dim^-0.5).

    Raises:
        ValueError: for ``full``, which keeps the model's own attention module.
    """
    if config.variant == "full":
        raise ValueError("The 'full' variant keeps the model's own attention; no SRformer module is needed.")
    if config.variant == "linear":
        return LinearCrossAttention(config, head_dim, scale)
    return SegmentedRecurrentAttention(config, head_dim, scale)
