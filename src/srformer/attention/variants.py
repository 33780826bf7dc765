"""The attention module that computes each cross-attention variant."""

from __future__ import annotations

from typing import TYPE_CHECKING

from srformer.attention.base import CrossAttentionMechanism
from srformer.core import mechanism

if TYPE_CHECKING:
    from srformer.core import SRformerConfig


def build_cross_attention(
    config: SRformerConfig, head_dim: int, scale: float = 1.0, *, num_heads: int | None = None
) -> CrossAttentionMechanism:
    """The module of ``config.variant``'s registry entry (:mod:`srformer.core.registry`), e.g.
    :class:`~srformer.attention.srformer.SRformerCrossAttention` for ``srformer`` (and its ablations).

    Args:
        config: the SRformer settings.
        head_dim: ``d``, size of one attention head.
        scale: the wrapped model's attention scale (T5: 1.0, BART: head_dim^-0.5).
        num_heads: the layer's number of heads, for a mechanism with parameters per head (``adaptive``'s spans);
            None: one set shared by the heads. The other mechanisms ignore it.

    Raises:
        ValueError: for ``full``, which keeps the model's own attention module.
    """
    entry = mechanism(config.variant)
    if entry.module is None:
        raise ValueError(
            f"The {config.variant!r} variant keeps the model's own attention; no SRformer module is needed."
        )
    cls = entry.module_class()
    if num_heads is not None and getattr(cls, "per_head_parameters", False):
        module = cls(config, head_dim, scale, num_heads=num_heads)
    else:
        module = cls(config, head_dim, scale)
    assert isinstance(module, CrossAttentionMechanism), type(module)
    return module
