"""The Routing Transformer's k-means routing attention (Roy, Saffar, Vaswani & Grangier 2021, Efficient
Content-Based Sparse Attention with Routing Transformers, Sec. 4), adapted to decoder cross attention: the
``routing`` variant.

``c`` centroids ``mu_1 .. mu_c`` (``num_clusters``) route queries and keys, each scaled to unit length first (the
paper normalises queries and keys so that they lie on a sphere; here ``u = x / ||x||``), by the distance
``||u - mu||^2``. Clusters are balanced, as in the paper's implementation (top-``w`` per centroid): once per
sequence, every centroid takes the ``w`` real encoder keys nearest to it (ties: the earlier position; all ``n``
real keys when ``n <= w``), so every cluster has exactly ``min(w, n)`` keys and a key may sit in several clusters
or in none. ``w = cluster_size`` when set; by default ``w = ceil(n / c)`` for an example with ``n`` real keys (the
paper's ``n / c``), in ``W = ceil(k / c)`` places for the padded length ``k`` (a shape, so no host sync; the
places past ``w`` are masked, so an example's output does not depend on its batch's padding).
A decoder query goes to its nearest centroid, ``argmin_c ||u - mu_c||^2`` (ties:
the first), and attends, with the model's softmax and scale over the unnormalised queries and keys, the keys of
that cluster. No cluster is empty while the example has a real key, so there is no fallback; an example without
real keys has output 0. Costs per head: build ``O(c·k·(d + log k))`` (distances, a sort per centroid), state
``c·W`` key positions besides the keys and values, step ``O(c·d + W·d)`` (route the query, attend ``W`` places:
``O((c + k/c)·d)`` by default, ``O(sqrt(k)·d)`` at the paper's ``c ≈ sqrt(k)``; ``O((c + w)·d)`` for a set
``cluster_size``).

The centroids are not trained by gradient: in training (``module.training``) every parallel forward pass moves
them by an exponential moving average of the normalised queries and real keys assigned to them (Sec. 4,
mini-batch k-means), a vector being assigned to its nearest centroid,

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

from dataclasses import dataclass
from typing import TYPE_CHECKING

import torch

from srformer.attention.content import (
    ContentSettings,
    ContentSparseCrossAttention,
    ContentState,
    content_base_state,
    unit_rows,
)
from srformer.attention.initialization import InitFunctions
from srformer.attention.state import CrossAttentionState, accumulation_dtype, autocast_off, extend
from srformer.core import require_integer

if TYPE_CHECKING:
    from srformer.core import SRformerConfig


@dataclass(frozen=True)
class RoutingSettings(ContentSettings):
    """The settings of the ``routing`` variant (``SRformerConfig(variant='routing', ...)``;
    None: the default named below).

    Attributes:
        num_clusters: ``c``, the number of k-means centroids of the ``routing`` variant (Roy et al. 2021, Sec. 4). At
            least 1. None (default): 8 (the paper uses about ``sqrt(n)`` clusters: 8 at 64 tokens, a few dozen at
            thousands; with the default ``cluster_size`` a step reads ``ceil(n / c)`` keys, so more clusters make a step
            cheaper).
        cluster_size: ``w``, the number of keys in every cluster of the ``routing`` variant (balanced clusters: each
            centroid takes its ``w`` nearest real keys; a query reads the ``w`` keys of its centroid). At least 1. None
            (default): ``ceil(n / c)`` for an example with ``n`` real encoder keys (the paper's balanced ``n / c``: as
            many cluster places as keys, so every key can be read), held in ``ceil(k / c)`` places for the padded length
            ``k``; an example's clusters depend on its own keys only, not on the padding of its batch.
        centroid_decay: ``lambda`` of the ``routing`` centroids' moving average (mini-batch k-means), in [0, 1). None
            (default): 0.999 (a slow average over about 1000 training steps).
    """

    num_clusters: int | None = None
    cluster_size: int | None = None
    centroid_decay: float | None = None

    def validate(self, config: SRformerConfig) -> None:
        """``num_clusters`` >= 1, ``cluster_size`` None or >= 1, ``centroid_decay`` in [0, 1), and the seed
        (:meth:`ContentSettings.validate`)."""
        require_integer("num_clusters", self.resolved_num_clusters(config), 1)
        size = self.cluster_size
        if size is not None and (isinstance(size, bool) or not isinstance(size, int) or size < 1):
            raise ValueError(f"`cluster_size` must be an integer >= 1 or None (ceil(n / c)), got {size!r}.")
        decay = self.resolved_centroid_decay(config)
        if isinstance(decay, bool) or not isinstance(decay, int | float) or not 0.0 <= decay < 1.0:
            raise ValueError(
                f"`centroid_decay` is the moving-average factor lambda and must lie in [0, 1), got {decay!r}."
            )
        super().validate(config)

    def resolved_num_clusters(self, config: SRformerConfig) -> int:
        """``c``: ``num_clusters``, or 8 when it is None."""
        return self.num_clusters if self.num_clusters is not None else 8

    def resolved_centroid_decay(self, config: SRformerConfig) -> float:
        """``lambda``: ``centroid_decay``, or 0.999 when it is None."""
        return self.centroid_decay if self.centroid_decay is not None else 0.999


@dataclass(kw_only=True)
class RoutingState(ContentState):
    """The ``routing`` state: the keys and values plus the members of every balanced cluster.

    Attributes:
        members: (B, H, c, W) long, ``W = min(cluster_size, k)`` (default ``ceil(k / c)``): the encoder positions
            of each centroid's keys, nearest first; the places from ``min(w, n)`` on are not attended.
    """

    members: torch.Tensor


def centroid_distances(vectors: torch.Tensor, centroids: torch.Tensor) -> torch.Tensor:
    """``||u - mu_c||^2 - 1`` for ``u = x / ||x||`` (a constant off for a zero ``x``), as ``||mu_c||^2 - 2 u . mu_c``.

    Args:
        vectors: (B, H, n, d). centroids: (c, d).

    Returns:
        (B, H, n, c) in the vectors' dtype.
    """
    centroids = centroids.to(vectors.dtype)
    return (centroids * centroids).sum(-1) - 2.0 * torch.matmul(unit_rows(vectors), centroids.transpose(0, 1))


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
    return centroid_distances(vectors, centroids).argmin(dim=-1)[:, :, None, :]


class RoutingCrossAttention(ContentSparseCrossAttention):
    """The ``routing`` variant for one decoder layer (see the module docstring and
    :class:`~srformer.attention.content.ContentSparseCrossAttention`).

    Args:
        config: SRformer settings with ``variant='routing'`` (``num_clusters``, ``cluster_size``, ``centroid_decay``,
            ``content_seed``).
        head_dim: ``d``, size of one attention head.
        scale: the wrapped model's attention scale, used by the softmax.

    Attributes:
        centroids: (c, d) persistent buffer, the k-means centroids (updated in training, fixed in eval).
        decay: ``lambda`` of the moving average.
    """

    def __init__(self, config: SRformerConfig, head_dim: int, scale: float = 1.0) -> None:
        super().__init__(config, head_dim, scale)
        self.num_clusters = config.resolved_num_clusters()
        self.cluster_size = config.cluster_size  # None: ceil(n / c) per example
        self.decay = config.resolved_centroid_decay()
        self.centroids: torch.Tensor
        self.register_buffer("centroids", self._draw(), persistent=True)

    def _draw(self) -> torch.Tensor:
        return initial_centroids(self.num_clusters, self.head_dim, self.settings.resolved_content_seed())

    def initialize_parameters(self, init: InitFunctions) -> None:
        """The initial centroids drawn from ``content_seed`` again (with transformers' guarded copy a loaded buffer
        stays)."""
        init.copy_(self.centroids, self._draw().to(self.centroids))

    def codes(self, vectors: torch.Tensor) -> torch.Tensor:
        """The cluster of every vector (B, H, n, d): (B, H, 1, n) long (:func:`nearest_centroid`)."""
        return nearest_centroid(vectors, self.centroids)

    @autocast_off
    def init_state(self, keys: torch.Tensor, values: torch.Tensor, key_valid: torch.Tensor | None) -> RoutingState:
        """Every centroid's ``W`` nearest real keys in order (module docstring), once per sequence.

        Args:
            keys: (B, H, k, d) projected encoder keys.
            values: (B, H, k, d) projected encoder values.
            key_valid: (B, k) bool, True at real encoder positions; None when nothing is padded.

        Returns:
            A :class:`RoutingState`; an empty document has no real key (its output is 0).
        """
        base = content_base_state(keys, values, key_valid)
        with torch.no_grad(), torch.autocast(device_type=keys.device.type, enabled=False):
            wide = keys.detach().to(accumulation_dtype(keys.dtype))
            distances = centroid_distances(wide, self.centroids).transpose(-1, -2)  # (B, H, c, k)
            distances = distances.masked_fill(~base.key_valid[:, None, None, :], float("inf"))
            # a stable sort: ties go to the earlier position, and left/right padding order the real keys alike
            order = torch.sort(distances, dim=-1, stable=True).indices
        return extend(RoutingState, base, members=order[..., : self.places(keys.shape[2])].contiguous())

    def places(self, k: int) -> int:
        """``W``, the places of a cluster for ``k`` padded encoder positions: ``min(cluster_size, k)``, or
        ``ceil(k / c)`` by default."""
        if self.cluster_size is None:
            return -(-k // self.num_clusters)
        return min(self.cluster_size, k)

    def cluster_width(self, lengths: torch.Tensor) -> torch.Tensor:
        """``min(w, n)`` per example, the places that count: (B,) long from the real lengths ``n`` (B,)."""
        if self.cluster_size is None:
            return torch.div(lengths + self.num_clusters - 1, self.num_clusters, rounding_mode="floor")
        return lengths.clamp_max(self.cluster_size)

    def slots(self, queries: torch.Tensor, state: CrossAttentionState) -> tuple[torch.Tensor, torch.Tensor]:
        """The members of the query's nearest centroid (module docstring).

        Args:
            queries: (B, H, q, d) projected decoder queries.
            state: a :class:`RoutingState`.

        Returns:
            ``(positions, mask)``: (B, H, q, W); the mask keeps the first ``min(w, n)`` places.

        Raises:
            ValueError: for a state of another class.
        """
        if not isinstance(state, RoutingState):
            raise ValueError(f"{type(self).__name__} needs a RoutingState, got a {type(state).__name__}.")
        width = state.members.shape[-1]
        clusters = self.wide_codes(queries)[:, :, 0]  # (B, H, q)
        positions = state.members.gather(2, clusters[..., None].expand(-1, -1, -1, width))
        mask = torch.arange(width, device=positions.device) < self.cluster_width(state.lengths).view(-1, 1, 1, 1)
        return positions, mask.expand(positions.shape)

    @autocast_off
    @torch.no_grad()
    def update_centroids(self, queries: torch.Tensor, state: ContentState) -> None:
        """One moving-average step of the centroids (module docstring) from a batch's queries and real keys.

        Args:
            queries: (B, H, q, d) projected decoder queries (every position is used).
            state: the batch's :class:`RoutingState` (its keys; the padding is left out).
        """
        wide = accumulation_dtype(torch.promote_types(queries.dtype, self.centroids.dtype))
        vectors = torch.cat([unit_rows(queries.to(wide)).flatten(0, 2), unit_rows(state.keys.to(wide)).flatten(0, 2)])
        key_clusters = self.wide_codes(state.keys.to(wide)).masked_fill(~state.key_valid[:, None, None, :], -1)
        clusters = torch.cat([self.wide_codes(queries.to(wide)).flatten(), key_clusters.flatten()])
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
