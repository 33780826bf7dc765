"""Reformer's LSH attention (Kitaev, Kaiser & Levskaya 2020, Reformer: The Efficient Transformer, Sec. 2,
"Locality sensitive hashing attention"), adapted to decoder cross attention: the ``reformer`` variant.

Angular LSH (Sec. 2, after Andoni et al. 2015): with a random rotation ``R`` of shape ``(d, b/2)``,
``h(x) = argmax([x R ; -x R])``, one of ``b`` buckets. Reformer shares queries and keys (``K = Q / ||Q||``) so a
query and its nearby keys land in the same bucket; cross attention has distinct decoder queries and encoder
keys, so both are hashed with the **same** rotations, after scaling each to unit length (the paper's
normalisation; ``argmax`` is invariant to a positive scale, so the bucket depends only on the direction). A
query attends, with the model's softmax and scale over the unnormalised queries and keys, the real keys of
its bucket; with ``hash_rounds`` ``R > 1`` independent rotations, the union of its buckets over the rounds,
each key once (Sec. 2.3 multi-round hashing). A query whose buckets hold no real key attends every real key
(:mod:`srformer.attention.content`).

The rotations are drawn once from ``content_seed`` (``torch.Generator``, standard normal entries, as the
paper's random rotation matrix) and kept as a persistent buffer ``rotations`` (R, d, b/2), shared by the
heads and not trained, so a saved and reloaded model hashes, and generates, the same. Reformer draws fresh
rotations for each forward pass; fixed ones make training and generation hash alike.
"""

from __future__ import annotations

from typing import TYPE_CHECKING

import torch
from transformers import initialization as init

from srformer.attention.content import ContentSparseCrossAttention, unit_rows

if TYPE_CHECKING:  # srformer.config imports the attention registry
    from srformer.config import SRformerConfig


def random_rotations(rounds: int, head_dim: int, buckets: int, seed: int) -> torch.Tensor:
    """``R`` for each round: (rounds, head_dim, buckets / 2) float32 standard normal entries drawn from ``seed``
    (Kitaev et al. 2020, Sec. 2: ``R`` of size ``[d_k, b/2]``), the same on every machine (CPU generator)."""
    generator = torch.Generator().manual_seed(seed)
    return torch.randn(rounds, head_dim, buckets // 2, generator=generator, dtype=torch.float32)


def lsh_buckets(vectors: torch.Tensor, rotations: torch.Tensor) -> torch.Tensor:
    """Angular LSH ``h(x) = argmax([x R ; -x R])`` of unit-length ``x``, for every round.

    Args:
        vectors: (B, H, n, d) queries or keys.
        rotations: (R, d, b/2).

    Returns:
        (B, H, R, n) long buckets in ``[0, b)``: bucket ``c < b/2`` for ``(x R)_c`` largest, ``b/2 + c`` for
        ``-(x R)_c`` largest (ties: the first).
    """
    projected = torch.einsum("bhnd,rdc->bhrnc", unit_rows(vectors), rotations.to(vectors.dtype))
    return torch.cat([projected, -projected], dim=-1).argmax(dim=-1)


class ReformerCrossAttention(ContentSparseCrossAttention):
    """The ``reformer`` variant for one decoder layer (see the module docstring and
    :class:`~srformer.attention.content.ContentSparseCrossAttention`).

    Args:
        config: SRformer settings with ``variant='reformer'`` (``num_buckets``, ``hash_rounds``, ``content_seed``).
        head_dim: ``d``, size of one attention head.
        scale: the wrapped model's attention scale, used by the softmax.

    Attributes:
        rotations: (R, d, b/2) persistent buffer, the random rotations of every hash round.
    """

    variants = ("reformer",)

    def __init__(self, config: SRformerConfig, head_dim: int, scale: float = 1.0) -> None:
        super().__init__(config, head_dim, scale)
        self.num_buckets = config.resolved_num_buckets()
        self.hash_rounds = config.resolved_hash_rounds()
        self.rotations: torch.Tensor
        self.register_buffer("rotations", self._draw(), persistent=True)

    def _draw(self) -> torch.Tensor:
        seed = self.settings.resolved_content_seed()
        return random_rotations(self.hash_rounds, self.head_dim, self.num_buckets, seed)

    def reset_parameters(self) -> None:
        """The rotations drawn from ``content_seed`` again (transformers' guarded copy: a loaded buffer stays)."""
        with torch.no_grad():
            init.copy_(self.rotations, self._draw().to(self.rotations))

    def codes(self, vectors: torch.Tensor) -> torch.Tensor:
        """The LSH buckets of ``vectors`` (B, H, n, d) in every round: (B, H, R, n) long (:func:`lsh_buckets`)."""
        return lsh_buckets(vectors, self.rotations)
