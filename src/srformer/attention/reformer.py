"""Reformer's LSH attention (Kitaev, Kaiser & Levskaya 2020, Reformer: The Efficient Transformer, Sec. 2,
"Locality sensitive hashing attention", with its "sorting and chunking" and "multi-round LSH attention"), adapted
to decoder cross attention: the ``reformer`` variant.

Angular LSH (Sec. 2, after Andoni et al. 2015): with a random rotation ``R`` of shape ``(d, b/2)``,
``h(x) = argmax([x R ; -x R])``, one of ``b`` buckets. Reformer shares queries and keys (``K = Q / ||Q||``) so a
query and its nearby keys land in the same bucket; cross attention has distinct decoder queries and encoder
keys, so both are hashed with the **same** rotations, after scaling each to unit length (the paper's
normalisation; ``argmax`` is invariant to a positive scale, so the bucket depends only on the direction). The
softmax uses the unnormalised queries and keys and the model's scale.

Sorting and chunking, per example, head and round ``r`` (``w = chunk_size``), once per sequence: the ``n`` real
keys are sorted by (bucket, position among the real keys), giving the order ``o_0 .. o_{n-1}`` and sorted buckets
``b_0 <= .. <= b_{n-1}``; chunk ``c`` holds sorted places ``c*w .. c*w + w - 1``. A decoder query (not part of
the sort: it is not an encoder position) with bucket ``h`` is located at ``start = #{i : b_i < h}`` (its bucket's
first place, ``torch.searchsorted``) and reads the chunk holding that place and the next one, i.e. the places
``P = {c*w .. c*w + 2w - 1} ∩ [0, n)`` with ``c = floor(min(start, n - 1) / w)``:

* if the bucket holds a real key (``start < n`` and ``b_start = h``), the keys of ``P`` in bucket ``h`` (the paper
  masks keys of other buckets inside the chunks): the first keys of the bucket in sort order, at least
  ``min(w + 1, bucket size)`` and at most ``2w`` of them. A bucket larger than that is cut, as in the paper,
  where a bucket spread over more than two chunks is cut for a query in its first chunk;
* if it holds none, every key of ``P`` (fallback: the chunk at the bucket's insertion point and the next one, the
  keys of the neighbouring buckets in sort order), so the query still reads up to ``2w`` keys at a fixed cost.

This is "the chunk where the bucket starts plus the next": the paper's "own chunk plus the previous one" is
a rule for queries sorted among the keys, which decoder queries are not; starting at the bucket covers the
bucket's first ``w + 1`` keys or more, looking back would read the previous bucket's keys, which the mask drops.

Multi-round (``hash_rounds`` ``R > 1`` independent rotations): each round gives its set ``P_r`` and the rounds
are combined as the paper does, ``O = sum_r exp(L_r - logsumexp_r L_r) O_r`` with ``O_r`` the softmax attention
over ``P_r`` and ``L_r`` its log-normaliser (the logsumexp of its scores): one softmax over the concatenated
slots, in which a key found in several rounds counts once per round (the paper's version without its
duplicate-count correction). A step reads ``S = R·min(2w, k)`` slots: ``O(R·w·d)`` per head, plus hashing the
query ``O(R·d·b)`` and the binary search ``O(R·log k)``.

The rotations are drawn once from ``content_seed`` (``torch.Generator``, standard normal entries, as the
paper's random rotation matrix) and kept as a persistent buffer ``rotations`` (R, d, b/2), shared by the
heads and not trained, so a saved and reloaded model hashes, and generates, the same. Reformer draws fresh
rotations for each forward pass; fixed ones make training and generation hash alike.
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
from srformer.attention.state import CrossAttentionState, autocast_off, extend
from srformer.core import require_integer

if TYPE_CHECKING:
    from srformer.core import SRformerConfig


@dataclass(frozen=True)
class ReformerSettings(ContentSettings):
    """The settings of the ``reformer`` variant (``SRformerConfig(variant='reformer', ...)``;
    None: the default named below).

    Attributes:
        num_buckets: ``b``, the number of LSH buckets of the ``reformer`` variant (Kitaev et al. 2020, Sec. 2: ``h(x) =
            argmax([xR; -xR])`` with ``R`` of shape ``(d, b/2)``). Even, at least 2. None (default): 8 (Reformer sizes
            ``b`` so that a bucket holds about 64 keys, ``b = 8`` at 512 encoder tokens).
        hash_rounds: the number of independent hash rounds of the ``reformer`` variant (Sec. 2 "multi-round LSH
            attention"); a query's rounds are combined as one softmax over the keys each round gives it
            (``srformer.attention.reformer``). At least 1. None (default): 1.
        chunk_size: ``w``, the chunk length of the ``reformer`` variant (Sec. 2 "sorting and chunking"): a query reads,
            per round, at most the ``2w`` keys of two consecutive chunks of the bucket-sorted keys. At least 1. None
            (default): 64 (Reformer's chunk length; with ``b = 8`` at 512 encoder tokens a bucket holds about one
            chunk).
    """

    num_buckets: int | None = None
    hash_rounds: int | None = None
    chunk_size: int | None = None

    def validate(self, config: SRformerConfig) -> None:
        """``num_buckets`` even and >= 2, ``hash_rounds`` and ``chunk_size`` >= 1, and the seed
        (:meth:`ContentSettings.validate`)."""
        buckets = self.resolved_num_buckets(config)
        if isinstance(buckets, bool) or not isinstance(buckets, int) or buckets < 2 or buckets % 2:
            raise ValueError(
                f"`num_buckets` must be an even integer >= 2 (angular LSH uses b/2 rotation columns), got {buckets!r}."
            )
        require_integer("hash_rounds", self.resolved_hash_rounds(config), 1)
        require_integer("chunk_size", self.resolved_chunk_size(config), 1)
        super().validate(config)

    def resolved_num_buckets(self, config: SRformerConfig) -> int:
        """``b``: ``num_buckets``, or 8 when it is None."""
        return self.num_buckets if self.num_buckets is not None else 8

    def resolved_hash_rounds(self, config: SRformerConfig) -> int:
        """The hash rounds: ``hash_rounds``, or 1 when it is None."""
        return self.hash_rounds if self.hash_rounds is not None else 1

    def resolved_chunk_size(self, config: SRformerConfig) -> int:
        """``w``: ``chunk_size``, or 64 when it is None."""
        return self.chunk_size if self.chunk_size is not None else 64


@dataclass(kw_only=True)
class LSHState(ContentState):
    """The ``reformer`` state: the keys and values plus the bucket-sorted order of the real keys in every round.

    Attributes:
        sorted_buckets: (B, H, R, k) long, the buckets of the keys in sorted order, ascending; padding sorts last
            with bucket ``b`` (no query has it).
        order: (B, H, R, k) long, the encoder position of each sorted place (real keys sorted by (bucket,
            position), then the padding).
    """

    sorted_buckets: torch.Tensor
    order: torch.Tensor


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
        config: SRformer settings with ``variant='reformer'`` (``num_buckets``, ``hash_rounds``, ``chunk_size``,
            ``content_seed``).
        head_dim: ``d``, size of one attention head.
        scale: the wrapped model's attention scale, used by the softmax.

    Attributes:
        rotations: (R, d, b/2) persistent buffer, the random rotations of every hash round.
    """

    def __init__(self, config: SRformerConfig, head_dim: int, scale: float = 1.0) -> None:
        super().__init__(config, head_dim, scale)
        self.num_buckets = config.resolved_num_buckets()
        self.hash_rounds = config.resolved_hash_rounds()
        self.chunk_size = config.resolved_chunk_size()
        self.rotations: torch.Tensor
        self.register_buffer("rotations", self._draw(), persistent=True)

    def _draw(self) -> torch.Tensor:
        seed = self.settings.resolved_content_seed()
        return random_rotations(self.hash_rounds, self.head_dim, self.num_buckets, seed)

    def initialize_parameters(self, init: InitFunctions) -> None:
        """The rotations drawn from ``content_seed`` again (with transformers' guarded copy a loaded buffer
        stays)."""
        init.copy_(self.rotations, self._draw().to(self.rotations))

    def codes(self, vectors: torch.Tensor) -> torch.Tensor:
        """The LSH buckets of ``vectors`` (B, H, n, d) in every round: (B, H, R, n) long (:func:`lsh_buckets`)."""
        return lsh_buckets(vectors, self.rotations)

    @autocast_off
    def init_state(self, keys: torch.Tensor, values: torch.Tensor, key_valid: torch.Tensor | None) -> LSHState:
        """Hash every key and sort the real keys by (bucket, position) in every round (module docstring), once per
        sequence: ``O(R·k·(d·b + log k))`` per head.

        Args:
            keys: (B, H, k, d) projected encoder keys.
            values: (B, H, k, d) projected encoder values.
            key_valid: (B, k) bool, True at real encoder positions; None when nothing is padded.

        Returns:
            An :class:`LSHState`; an empty document has no real key (its output is 0).
        """
        base = content_base_state(keys, values, key_valid)
        buckets = self.wide_codes(keys).masked_fill(~base.key_valid[:, None, None, :], self.num_buckets)
        # a stable sort keeps the encoder order inside a bucket, so left and right padding sort the real keys alike
        sorted_buckets, order = torch.sort(buckets, dim=-1, stable=True)
        return extend(LSHState, base, sorted_buckets=sorted_buckets, order=order)

    def slots(self, queries: torch.Tensor, state: CrossAttentionState) -> tuple[torch.Tensor, torch.Tensor]:
        """The places of the chunk where the query's bucket starts and the next chunk, in every round, masked to
        the query's bucket unless it holds no real key (module docstring).

        Args:
            queries: (B, H, q, d) projected decoder queries.
            state: an :class:`LSHState`.

        Returns:
            ``(positions, mask)``: (B, H, q, R·S) with ``S = min(2w, k)``, round-major.

        Raises:
            ValueError: for a state of another class.
        """
        if not isinstance(state, LSHState):
            raise ValueError(f"{type(self).__name__} needs an LSHState, got a {type(state).__name__}.")
        batch, heads, rounds, k = state.order.shape
        length = queries.shape[2]
        width = min(2 * self.chunk_size, k)
        buckets = self.wide_codes(queries)  # (B, H, R, q)
        start = torch.searchsorted(state.sorted_buckets, buckets.contiguous())  # (B, H, R, q) in [0, n]
        real = state.lengths.view(batch, 1, 1, 1)
        chunk = torch.minimum(start, (real - 1).clamp_min(0)) // self.chunk_size
        places = chunk[..., None] * self.chunk_size + torch.arange(width, device=start.device)  # (B, H, R, q, S)
        inside = places < real[..., None]
        places = places.clamp_max(k - 1).view(batch, heads, rounds, length * width)
        place_buckets = state.sorted_buckets.gather(-1, places).view(batch, heads, rounds, length, width)
        first = state.sorted_buckets.gather(-1, start.clamp_max(k - 1))
        found = (start < real) & (first == buckets)  # the bucket holds a real key
        mask = inside & (~found[..., None] | (place_buckets == buckets[..., None]))
        positions = state.order.gather(-1, places).view(batch, heads, rounds, length, width)
        flat = (batch, heads, length, rounds * width)
        return positions.transpose(2, 3).reshape(flat), mask.transpose(2, 3).reshape(flat)
