"""The attention module that computes each cross-attention variant."""

from __future__ import annotations

from typing import TYPE_CHECKING

import torch

from srformer.attention.base import CrossAttentionMechanism
from srformer.core import mechanism

if TYPE_CHECKING:
    from srformer.core import SRformerConfig


def build_cross_attention(
    config: SRformerConfig,
    head_dim: int,
    scale: float = 1.0,
    *,
    num_heads: int | None = None,
    device: torch.device | str | None = None,
) -> CrossAttentionMechanism:
    """The module of ``config.variant``'s registry entry (:mod:`srformer.core.registry`), e.g.
    :class:`~srformer.attention.srformer.SRformerCrossAttention` for ``srformer`` (and its ablations).

    Args:
        config: the SRformer settings.
        head_dim: ``d``, size of one attention head.
        scale: the wrapped model's attention scale (T5: 1.0, BART: head_dim^-0.5).
        num_heads: the layer's number of heads, for a mechanism with parameters per head (``adaptive``'s spans);
            None: one set shared by the heads. The other mechanisms ignore it.
        device: where the module goes. None: built where torch builds by default. Otherwise it is built on the CPU
            in torch's default dtype (its ``__init__`` fills every parameter and seeded buffer with its initial
            values, so they do not depend on the device) and moved there; on the meta device it is built there, to
            be filled by ``to_empty()`` + ``init_weights()`` or by loading a checkpoint.

    Raises:
        ValueError: for ``full``, which keeps the model's own attention module.
    """
    entry = mechanism(config.variant)
    if entry.module is None:
        raise ValueError(
            f"The {config.variant!r} variant keeps the model's own attention; no SRformer module is needed."
        )
    cls = entry.module_class()
    per_head = {"num_heads": num_heads} if num_heads is not None and getattr(cls, "per_head_parameters", False) else {}
    if device is None:
        module = cls(config, head_dim, scale, **per_head)
    else:
        target = torch.device(device)
        with torch.device("meta" if target.type == "meta" else "cpu"):
            module = cls(config, head_dim, scale, **per_head)
        if target.type != "meta":
            module = module.to(device=target)
    assert isinstance(module, CrossAttentionMechanism), type(module)
    return module
