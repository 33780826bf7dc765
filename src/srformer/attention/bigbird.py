"""BigBird's sparse pattern (Zaheer, Guruganesh, Dubey, Ainslie, Alberti, Ontanon, Pham, Ravula, Wang, Yang &
Ahmed 2020, Big Bird: Transformers for Longer Sequences, Sec. 2 and its BigBird-ITC form), as decoder cross
attention: the ``bigbird`` variant.

BigBird's attention graph has three parts: a sliding window, ``g`` global tokens that attend and are
attended by everything, and ``r`` random blocks per query block. As cross attention (the encoder is not
modified, so only "attended by everything" applies to the global tokens), decoder position ``t`` attends
with one softmax to the union of

* the window part: its scheduled segment ``i(t)`` (:mod:`srformer.attention.schedule`), the block of
  ``s`` positions the schedule gives it;
* the global part: the first ``g`` real (compacted) positions, as in BigBird-ITC, where existing tokens
  are made global (``SRformerConfig.num_global_tokens``, default ``2s``: ITC's two global blocks);
* the random part: ``r`` segment blocks (``num_random_blocks``, default 3 as in the paper), chosen per
  segment, not per example: the blocks of segment ``i`` of an input of ``m`` segments are the ``r``
  candidates ``j`` in ``floor(g / s) .. m - 1``, ``j != i`` (blocks wholly inside the global tokens and the
  scheduled block itself are not candidates, as BigBird draws its random blocks outside the window and
  global blocks), with the smallest priority ``(h(seed, i, j), j)``, where ``h`` is the fixed 32-bit integer
  hash :func:`block_priority` and ``seed`` is ``random_blocks_seed`` (saved in the config). Fewer than ``r``
  candidates: all of them.

each position once (a global position inside an attended block is masked out of the block, so it is
counted once). The random choice is a function of ``(seed, i, m)`` alone: the same for every example of
``m`` segments, whatever the batch, the padding, the device or the dtype, and the same after a reload.

The schedule, compaction and both paths are those of :class:`~srformer.attention.segmented.SegmentedCrossAttention`:
the random blocks are further :meth:`~BigBirdCrossAttention.state_context_blocks` (read from a per-example table
built once per sequence, since the candidates depend on ``m``), the global positions its
:meth:`~BigBirdCrossAttention.global_tokens`. There is no lean layout. Cost per head: one step
``O((s + g + r·s)·d)``; building the state ``O(k·d + m²)`` (the priority table of ``m x m`` hashes).
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import TYPE_CHECKING

import torch

from srformer.attention.segmented import SegmentedCrossAttention, SegmentState
from srformer.attention.state import CrossAttentionState, accumulation_dtype, autocast_off, extend
from srformer.core import MechanismSettings, integer_setting

if TYPE_CHECKING:
    from srformer.core import SRformerConfig

_MASK32 = 0xFFFFFFFF
_MULTIPLIER = 0x45D9F3B


@dataclass(frozen=True)
class BigBirdSettings(MechanismSettings):
    """The settings of the ``bigbird`` variant (``SRformerConfig(variant='bigbird', ...)``;
    None: the default named below).

    Attributes:
        num_global_tokens: ``g``, the global tokens of the ``bigbird`` variant (Zaheer et al. 2020, Sec. 2, BigBird-
            ITC): the first ``g`` real encoder positions, attended by every decoder position. At least 1. None
            (default): ``2 * segment_size`` (BigBird-ITC's two global blocks).
        num_random_blocks: ``r``, the random segment blocks each scheduled segment attends in ``bigbird``. At least 0
            (0: segment plus global tokens, ITC without its random part). None (default): 3 (the paper's ``r = 3``).
        random_blocks_seed: the seed of ``bigbird``'s random blocks: the blocks of segment ``i`` of an input of ``m``
            segments are a fixed function of ``(seed, i, m)`` (``docs/design.md``, "BigBird"), so a saved and reloaded
            model attends the same blocks. A non-negative integer below ``2**32``. None (default): 0.
    """

    num_global_tokens: int | None = integer_setting(1, None, "BigBird's global tokens")
    num_random_blocks: int | None = integer_setting(0, None, "BigBird's random blocks per segment")
    random_blocks_seed: int | None = integer_setting(0, 2**32 - 1, "the seed of BigBird's random blocks")

    def resolved_global_tokens(self, config: SRformerConfig) -> int:
        """``g``: ``num_global_tokens``, or ``2 * segment_size`` when it is None."""
        return self.num_global_tokens if self.num_global_tokens is not None else 2 * config.resolved_segment_size()

    def resolved_random_blocks(self, config: SRformerConfig) -> int:
        """``r``: ``num_random_blocks``, or 3 when it is None."""
        return self.num_random_blocks if self.num_random_blocks is not None else 3

    def resolved_random_blocks_seed(self, config: SRformerConfig) -> int:
        """The seed of the random blocks: ``random_blocks_seed``, or 0 when it is None."""
        return self.random_blocks_seed if self.random_blocks_seed is not None else 0


@dataclass(kw_only=True)
class BigBirdState(SegmentState):
    """The ``bigbird`` state: :class:`~srformer.attention.segmented.SegmentState` plus the global tokens and
    the random-block table.

    Shapes: G = ``min(g, M*s)`` global positions, R = ``min(r, M)`` random blocks per segment.

    Attributes:
        global_keys: (B, H, G, d) keys of the first G compacted positions (zero beyond an example's length).
        global_values: (B, H, G, d) their values.
        global_valid: (B, G) bool, the global positions that are real; for an empty document position 0
            (a zero key and value: its output stays 0).
        random_blocks: (B, M, R) long, the random blocks of each segment of each example (0 where unused).
        random_valid: (B, M, R) bool, which entries of ``random_blocks`` are blocks to attend.
    """

    global_keys: torch.Tensor
    global_values: torch.Tensor
    global_valid: torch.Tensor
    random_blocks: torch.Tensor
    random_valid: torch.Tensor


def mix32(x: torch.Tensor) -> torch.Tensor:
    """A 32-bit integer hash of each entry of an int64 tensor (its low 32 bits are hashed): two rounds of
    ``x = ((x >> 16) ^ x) * 0x45d9f3b mod 2**32`` and a final ``(x >> 16) ^ x``. Exact in int64 (every product
    is below ``2**59``), so the same on every device. Returns int64 values in ``[0, 2**32)``."""
    x = x & _MASK32
    x = (((x >> 16) ^ x) * _MULTIPLIER) & _MASK32
    x = (((x >> 16) ^ x) * _MULTIPLIER) & _MASK32
    return (x >> 16) ^ x


def block_priority(seed: int, segments: torch.Tensor, candidates: torch.Tensor) -> torch.Tensor:
    """``h(seed, i, j) = mix32(mix32(mix32(seed) + i) + j)``: the priority of block ``j`` as a random block
    of segment ``i`` (smaller first); int64 tensors ``segments`` and ``candidates`` broadcast together."""
    base = mix32(torch.full((), seed, dtype=torch.long, device=segments.device))
    return mix32(mix32(base + segments) + candidates)


def random_block_table(
    num_segments: torch.Tensor, max_segments: int, global_tokens: int, segment_size: int, random_blocks: int, seed: int
) -> tuple[torch.Tensor, torch.Tensor]:
    """Each segment's random blocks (module docstring), for every example at once.

    Args:
        num_segments: (B,) long, ``m`` of each example (>= 1).
        max_segments: ``M`` (>= every ``m``).
        global_tokens: ``g``. segment_size: ``s``. random_blocks: ``r`` (>= 0). seed: the blocks' seed.

    Returns:
        ``(blocks, valid)``: (B, M, R) long and (B, M, R) bool, ``R = min(r, M)``; row ``i`` lists the blocks of
        segment ``i`` in increasing priority (unused entries: block 0, invalid).
    """
    device = num_segments.device
    count = min(random_blocks, max_segments)
    segment = torch.arange(max_segments, device=device)[:, None]  # i
    candidate = torch.arange(max_segments, device=device)[None, :]  # j
    allowed = (candidate >= global_tokens // segment_size) & (candidate != segment)  # (M, M)
    allowed = allowed[None] & (candidate[None] < num_segments[:, None, None])  # (B, M, M): j < m
    # (h, j) ordered as one integer (h < 2**32, j < M): ties broken by j; excluded blocks after every candidate
    key = block_priority(seed, segment, candidate) * max_segments + candidate
    key = torch.where(allowed, key[None], torch.iinfo(torch.long).max)
    order = torch.topk(key, count, dim=-1, largest=False, sorted=True).indices  # (B, M, R)
    return order, allowed.gather(2, order)


class BigBirdCrossAttention(SegmentedCrossAttention):
    """The ``bigbird`` variant for one decoder layer; arguments as :class:`SegmentedCrossAttention`
    (``config.resolved_global_tokens()``, ``resolved_random_blocks()`` and ``resolved_random_blocks_seed()``
    are ``g``, ``r`` and the seed)."""

    @autocast_off
    def init_state(self, keys: torch.Tensor, values: torch.Tensor, key_valid: torch.Tensor | None) -> BigBirdState:
        """:meth:`SegmentedCrossAttention.init_state` plus the global tokens (a slice of the compacted keys and
        values, ``O(g·d)`` per head) and the random-block table (``O(m²)`` hashes); arguments, errors and
        empty documents as there (an empty document attends zero keys only: output 0)."""
        state = super().init_state(keys, values, key_valid)
        batch, max_segments, heads, s, d = state.keys.shape
        settings = self.settings
        count = min(settings.resolved_global_tokens(), max_segments * s)

        def first(tensor: torch.Tensor) -> torch.Tensor:  # (B, M, H, s, d) -> (B, H, G, d)
            return tensor.transpose(1, 2).reshape(batch, heads, max_segments * s, d)[:, :, :count].contiguous()

        position = torch.arange(count, device=state.keys.device)[None, :]
        empty = (state.lengths == 0)[:, None]
        blocks, valid = random_block_table(
            state.num_segments, max_segments, settings.resolved_global_tokens(), s,
            settings.resolved_random_blocks(), settings.resolved_random_blocks_seed(),
        )
        return extend(
            BigBirdState, state, global_keys=first(state.keys), global_values=first(state.values),
            global_valid=(position < state.lengths[:, None]) | (empty & (position == 0)),
            random_blocks=blocks, random_valid=valid,
        )

    def state_context_blocks(
        self, state: CrossAttentionState, segments: torch.Tensor, index: torch.Tensor, max_segments: int
    ) -> list[tuple[torch.Tensor, torch.Tensor | None, bool]]:
        """The scheduled block, then the segment's random blocks from the state's table, each as an (N, s)
        mask without the global positions (``p < g``: :meth:`global_tokens` holds them); arguments and result
        as :meth:`SegmentedCrossAttention.state_context_blocks`."""
        assert isinstance(state, BigBirdState), type(state)
        s, g = self.settings.resolved_segment_size(), self.settings.resolved_global_tokens()
        offsets = torch.arange(s, device=segments.device)[None, :]
        result: list[tuple[torch.Tensor, torch.Tensor | None, bool]] = [
            (index, segments[:, None] * s + offsets >= g, False)
        ]
        count = state.random_blocks.shape[2]
        blocks = state.random_blocks.flatten(0, 1).index_select(0, index)  # (N, R)
        valid = state.random_valid.flatten(0, 1).index_select(0, index)
        for slot in range(count):
            block = blocks[:, slot]
            result.append((index - segments + block, valid[:, slot, None] & (block[:, None] * s + offsets >= g), False))
        return result

    def global_tokens(self, state: CrossAttentionState) -> tuple[torch.Tensor, torch.Tensor, torch.Tensor] | None:
        """The global positions' keys, values and validity: (B, H, G, d) twice and (B, G) bool."""
        assert isinstance(state, BigBirdState), type(state)
        return state.global_keys, state.global_values, state.global_valid

    def global_token_spread(self, state: CrossAttentionState) -> torch.Tensor:
        """(B, G, M*s): global token ``p`` is compacted position ``p`` itself (weight 1 when real)."""
        assert isinstance(state, BigBirdState), type(state)
        batch, max_segments, _, s, _ = state.keys.shape
        count = state.global_valid.shape[1]
        device = state.keys.device
        one_hot = torch.arange(count, device=device)[:, None] == torch.arange(max_segments * s, device=device)[None, :]
        wide = accumulation_dtype(state.keys.dtype)
        return one_hot[None].to(wide) * state.global_valid[:, :, None].to(wide)
