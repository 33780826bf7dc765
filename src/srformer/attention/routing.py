"""The Routing Transformer's k-means routing attention (Roy, Saffar, Vaswani & Grangier 2021, Efficient
Content-Based Sparse Attention with Routing Transformers, Sec. 4), adapted to decoder cross attention: the
``routing`` variant.

``c`` centroids ``mu_1 .. mu_c`` (``num_clusters``) route queries and keys: each is scaled to unit length (the
paper normalises queries and keys so that they lie on a sphere; here ``u = x / ||x||``) and assigned to its
nearest centroid, ``cluster(x) = argmin_c ||u - mu_c||^2``. A decoder query attends, with the model's softmax and
scale over the unnormalised queries and keys, the real encoder keys of its cluster; a query whose cluster holds no
real key attends every real key (:mod:`srformer.attention.content`).

The centroids are not trained by gradient: in training (``module.training``) every parallel forward pass moves
them by an exponential moving average of the normalised queries and real keys assigned to them (Sec. 4,
mini-batch k-means),

    mu_c <- lambda * mu_c + (1 - lambda) * mean{u : u a normalised query or real key of the batch in cluster c}

with ``lambda = centroid_decay``; a cluster without assignments keeps its centroid. The paper adds the
(halved) sums of the assigned queries and keys; the mean keeps a centroid's scale independent of the batch
size and sequence lengths (a departure, ``docs/design.md``). The update runs after the output is computed,
so a forward pass reads the centroids it started with; in eval mode and in generation (``step``) they are
fixed. The centroids (c, d), one set per layer shared by the heads (the module is built per layer and does not
know the number of heads), start as unit-length standard normal draws from ``content_seed`` and are a
persistent buffer ``centroids``: a saved model stores them, and a reloaded one routes, and generates, the same.
"""

from __future__ import annotations

from typing import TYPE_CHECKING

import torch
from transformers import initialization as init

from srformer.attention.content import ContentSparseCrossAttention, ContentState, unit_rows
from srformer.attention.state import CrossAttentionState, accumulation_dtype, autocast_off

if TYPE_CHECKING:  # srformer.config imports the attention registry
    from srformer.config import SRformerConfig


def initial_centroids(clusters: int, head_dim: int, seed: int) -> torch.Tensor:
    """(clusters, head_dim) float32 unit-length rows: standard normal draws from ``seed`` (CPU generator), scaled."""
    generator = torch.Generator().manual_seed(seed)
    return unit_rows(torch.randn(clusters, head_dim, generator=generator, dtype=torch.float32))


def nearest_centroid(vectors: torch.Tensor, centroids: torch.Tensor) -> torch.Tensor:
    """``argmin_c ||u - mu_c||^2`` for ``u = x / ||x||`` (ties: the first), via ``||mu_c||^2 - 2 u . mu_c``.

    Args:
        vectors: (B, H, n, d). centroids: (c, d).

    Returns:
        (B, H, 1, n) long clusters (one routing round).
    """
    centroids = centroids.to(vectors.dtype)
    distances = (centroids * centroids).sum(-1) - 2.0 * torch.matmul(unit_rows(vectors), centroids.transpose(0, 1))
    return distances.argmin(dim=-1)[:, :, None, :]


class RoutingCrossAttention(ContentSparseCrossAttention):
    """The ``routing`` variant for one decoder layer (see the module docstring and
    :class:`~srformer.attention.content.ContentSparseCrossAttention`).

    Args:
        config: SRformer settings with ``variant='routing'`` (``num_clusters``, ``centroid_decay``, ``content_seed``).
        head_dim: ``d``, size of one attention head.
        scale: the wrapped model's attention scale, used by the softmax.

    Attributes:
        centroids: (c, d) persistent buffer, the k-means centroids (updated in training, fixed in eval).
        decay: ``lambda`` of the moving average.
    """

    variants = ("routing",)

    def __init__(self, config: SRformerConfig, head_dim: int, scale: float = 1.0) -> None:
        super().__init__(config, head_dim, scale)
        self.num_clusters = config.resolved_num_clusters()
        self.decay = config.resolved_centroid_decay()
        self.centroids: torch.Tensor
        self.register_buffer("centroids", self._draw(), persistent=True)

    def _draw(self) -> torch.Tensor:
        return initial_centroids(self.num_clusters, self.head_dim, self.settings.resolved_content_seed())

    def reset_parameters(self) -> None:
        """The initial centroids drawn from ``content_seed`` again (transformers' guarded copy: a loaded buffer
        stays)."""
        with torch.no_grad():
            init.copy_(self.centroids, self._draw().to(self.centroids))

    def codes(self, vectors: torch.Tensor) -> torch.Tensor:
        """The cluster of every vector (B, H, n, d): (B, H, 1, n) long (:func:`nearest_centroid`)."""
        return nearest_centroid(vectors, self.centroids)

    @autocast_off
    @torch.no_grad()
    def update_centroids(self, queries: torch.Tensor, state: ContentState) -> None:
        """One moving-average step of the centroids (module docstring) from a batch's queries and real keys.

        Args:
            queries: (B, H, q, d) projected decoder queries (every position is used).
            state: the batch's :class:`~srformer.attention.content.ContentState` (its keys and their clusters,
                -1 at padding, computed with the current centroids).
        """
        wide = accumulation_dtype(torch.promote_types(queries.dtype, self.centroids.dtype))
        vectors = torch.cat([unit_rows(queries.to(wide)).flatten(0, 2), unit_rows(state.keys.to(wide)).flatten(0, 2)])
        clusters = torch.cat([self.wide_codes(queries.to(wide)).flatten(), state.key_codes.flatten()])
        real = clusters >= 0
        vectors, clusters = vectors[real], clusters[real]
        sums = torch.zeros(self.num_clusters, vectors.shape[-1], dtype=wide, device=vectors.device)
        sums.index_add_(0, clusters, vectors)
        counts = torch.bincount(clusters, minlength=self.num_clusters).to(wide)[:, None]
        moved = self.decay * self.centroids.to(wide) + (1.0 - self.decay) * sums / counts.clamp_min(1.0)
        self.centroids.copy_(torch.where(counts > 0, moved, self.centroids.to(wide)).to(self.centroids.dtype))

    def forward(
        self,
        queries: torch.Tensor,
        state: CrossAttentionState,
        *,
        start_position: int | torch.Tensor = 0,
        dropout: float = 0.0,
    ) -> tuple[torch.Tensor, CrossAttentionState]:
        """Routing attention for ``q`` decoder positions at once; in training mode the centroids then take one
        moving-average step (:meth:`update_centroids`). See
        :meth:`~srformer.attention.content.ContentSparseCrossAttention.forward`."""
        output, state = super().forward(queries, state, start_position=start_position, dropout=dropout)
        if self.training:
            assert isinstance(state, ContentState)
            self.update_centroids(queries.detach(), state)
        return output, state
