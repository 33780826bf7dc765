"""Query-aware block selection by key bounds (Tang, Zhao, Zhu, Xiao, Kasikci & Han 2024, Quest: Query-Aware Sparsity
for Efficient Long-Context LLM Inference, Sec. 3), as decoder cross attention, with a second level of blocks (the
hierarchical selection of Native Sparse Attention, Yuan et al. 2025, and of InfLLM, Xiao et al. 2024, by Quest's
bound instead of a pooled key): the ``quest`` variant.

Quest keeps, per block of keys (a "page"), the element-wise minimum and maximum of its keys, and scores a block for
query ``q`` by an upper bound of ``q . k`` over every key ``k`` of the block: a block holding one key that matches
the query scores at least that key's product, whatever its other keys are (a block's mean key, MoBA's and
``block-topk``'s gate, dilutes that key among the others). As cross attention the keys are fixed before decoding
starts, so the bounds are built once per input. Per example, over its ``n`` real encoder positions in order
(padding removed), per head and per decoder query ``Q_t``::

    leaf j      = positions j·b .. min((j + 1)·b, n) - 1                 (b = leaf_size)
    group G     = leaves π(G·g) .. π((G + 1)·g - 1)                      (g = group_size, π: leaves by similarity)
    u(Q_t, X)   = sum_c max(Q_tc · min_{x in X} K_xc, Q_tc · max_{x in X} K_xc)   >= Q_t . K_x for every x in X
    candidate   = a leaf with a real position outside segment i(t)
    groups(t)   = the p groups with a real leaf of largest u (ties: the earlier group)       (p = top_groups)
    leaves(t)   = the r candidate leaves of those groups of largest u (ties: the earlier in π)  (r = top_leaves)
    U           = S_{i(t)} ∪ (the positions of leaves(t))
    O_t         = softmax(scale · Q_t K_U^T) V_U

one softmax over segment ``i(t)`` (the schedule of Sec. 3.1, read exactly, as ``segmented`` and ``block-topk``
read it) and the chosen leaves' positions, each position once (a chosen leaf's positions inside ``S_{i(t)}`` are
read as part of the segment). With ``group_size`` None there is one level: the ``r`` candidate leaves of largest
``u`` among all of them (Quest itself).

**Groups of similar leaves.** A group's bound is the envelope of its leaves' boxes, so it is only as tight as its
leaves are alike: groups of consecutive leaves hold unrelated keys and their bounds say little (measured on the
recall probe). Since the keys are fixed before decoding, each head's leaves are ordered once per input by a
principal-direction tree over their box centres ``(min + max) / 2`` (a PCA tree; Sproull 1991, Verma, Kpotufe &
Dasgupta 2009): the leaves, padded to ``g·2^D`` slots, are split in halves ``D`` times, each node along its own
principal direction (4 power iterations from a fixed seeded vector, on the centres less the node's mean, over its
real leaves), each half keeping the leaves below or above the median projection (a stable sort; empty slots last).
``π`` is the resulting order and the groups are its consecutive runs of ``g``. An example's real leaves come first
and empty slots sort last, so an example batched with longer ones keeps all its leaves in the first node until the
nodes are the size of its own tree: its order depends on its own keys only (up to exact ties between projections).
The named setting ``quest-tree`` (leaves of 2, ``r = 64``, groups of 16, ``p = 64``) is the one chosen on the
recall probe (``docs/mechanisms.md``). The choice of groups is an
approximation (a group chosen first need not hold the leaf of largest bound); within the chosen groups, leaves are
ranked by their own bounds. ``r`` at least the number of candidate leaves (and ``p`` at least the
number of groups) reads every real position: full attention. Since ``m`` and ``n`` vary per example, that clamp is
the documented behaviour, not an error.

* **Selection**: bounds are computed in float32 or wider with autocast off from detached queries and keys; the
  choice is a hard top-k (:func:`~srformer.attention.selection.top_positions`) without gradient; the gradient flows
  through the softmax over the chosen positions. The model's scale is positive and does not change the order.
* **Padding**: positions are compacted (each example's real positions first, in order), so leaves and segments
  hold real positions only and an example's output depends on its own real keys only.
* **Empty memory**: an example without real keys has output 0.

Costs per head and decoder step, ``k`` keys, ``L = k/b`` leaves, ``G = L/g`` groups: the group bounds ``O(G·d)``,
the leaf bounds of the chosen groups ``O(p·g·d)``, the softmax over ``s + r·b`` keys ``O((s + r·b)·d)``; one level:
``O(L·d + (s + r·b)·d)``. Building: one pass over the keys for the bounds, ``O(k·d)``, and with groups the tree,
``O(L·d·log(L/g))``. The standard state keeps the
keys and values (compacted) plus ``2·(L + G)·d`` bounds.

**Two decoder steps** (:mod:`srformer.attention.step_choice`): the CPU step reads the costs above (``select``: the
chosen groups' leaves only, with a host-side tie check); the accelerator step
(:meth:`QuestCrossAttention.accelerator_step`) scores every slot, ``O(L·d)``, in a fixed sequence of operator calls
without a host sync, and reads the same rows. Its tables (each slot's leaf and segment, the order keys' position
terms) add ``O(H·L)`` to the state. With groups, from a large enough ratio of slots to ``p·g``, it scores the chosen
groups' leaves only (:meth:`QuestCrossAttention.group_leaf_step`'s gathered route): ``O(p·g·d)`` per step.

**Reading rows from the encoder output** (``rows_min_keys``): generation from an input of at least
``rows_min_keys`` real tokens keeps no keys or values per layer, only the bounds and the compaction order (the
layer's keys are projected once, chunk by chunk, for the bounds, and dropped). A step then reads the ``s + r·b``
chosen rows ``h_x`` of the encoder output, which ``generate()`` keeps anyway, through the layer's projections
without projecting them (the absorbed form, exact up to rounding)::

    Q_t . K_x = (W_k^T Q_t) . h_x + Q_t . b_k       (the second term is the same for every x: the softmax drops it)
    sum_x a_x V_x = W_v (sum_x a_x h_x) + b_v        (the a_x sum to 1)

``O((s + r·b)·D + D·d)`` per head and step (``D = d_model``) instead of projecting the rows, ``O((s + r·b)·D·d)``.
Memory per layer: ``2·(L + G)·d`` bounds per head instead of ``2·k·d`` keys and values; the leaves' bounds are
kept in bfloat16, each maximum rounded up and each minimum rounded down (:func:`outward_bfloat16`: still upper
bounds, half the memory), so a near-tie between two leaves may be settled otherwise than by the standard state's
float32 bounds.
"""

from __future__ import annotations

from dataclasses import dataclass, replace
from typing import TYPE_CHECKING, ClassVar, NamedTuple

import torch
from torch.nn import functional as F

from srformer.attention.base import CrossAttentionMechanism, ProjectRows
from srformer.attention.content import gather_rows, slot_softmax
from srformer.attention.projection import HeadProjection
from srformer.attention.schedule import (
    compaction_order,
    kept_per_shape,
    num_segments,
    real_lengths,
    segment_at,
    segment_index,
    tracing,
)
from srformer.attention.segmented import cast
from srformer.attention.selection import ORDER_FLOOR, position_order, ranked_top, top_positions
from srformer.attention.state import CrossAttentionState, accumulation_dtype, autocast_off, rows_in_encoder_order
from srformer.attention.step_choice import step_kind
from srformer.core import MechanismSettings, integer_setting

if TYPE_CHECKING:
    from srformer.core import SRformerConfig

#: ``b`` when ``leaf_size`` is None (Quest's page of 16 tokens).
DEFAULT_LEAF_SIZE = 16
#: ``r`` when ``top_leaves`` is None.
DEFAULT_TOP_LEAVES = 16
#: ``p`` when ``top_groups`` is None.
DEFAULT_TOP_GROUPS = 16
#: The shortest input (real tokens) whose generation reads rows of the encoder output, when ``rows_min_keys`` is
#: None.
DEFAULT_ROWS_MIN_KEYS = 16384
#: Encoder positions projected at a time when the bounds are built from the encoder output (on an accelerator at
#: least; see :data:`MAX_BOUNDS_CHUNKS`).
BOUNDS_CHUNK = 4096
#: The most chunks the bounds are built in on an accelerator, so that the build's operator calls do not grow with the
#: input: one, a layer's keys projected at once (transient: half of what full attention keeps per layer for the whole
#: generation), since each chunk costs about 40 calls per layer.
MAX_BOUNDS_CHUNKS = 1
#: Elements (``B·h·L·d``) of the leaves' centres per group of heads whose tree is built at once on an accelerator
#: (float32: 64 MiB per temporary); see ``QuestCrossAttention._stacked_bounds``.
TREE_BUDGET = 1 << 24
#: Elements of gathered leaf bounds per chunk of queries in the parallel path (bounds its memory).
_GATHER_BUDGET = 1 << 24
#: With groups, the accelerator's group leaf step scores only the slots of the ``p`` chosen groups (one indexing of
#: their bounds, :meth:`QuestCrossAttention.group_leaf_step`) where there are at least this many times ``p·g`` slots
#: in eager mode, and every slot (one product, no indexing) below. The gathered route makes 12 operator calls more per
#: layer and reads ``p·g`` leaves' bounds instead of ``Ls``: in eager mode on a GPU, where a call costs about 20 µs, it
#: pays from about this ratio (``quest-tree``: 65,536 slots, inputs of 131,072 tokens).
GATHER_SLOTS_RATIO_EAGER = 64
#: The same under ``torch.compile`` (the calls are fused and launched as one graph; the bounds' bytes remain).
GATHER_SLOTS_RATIO_COMPILED = 8


@dataclass(frozen=True)
class QuestSettings(MechanismSettings):
    """The settings of the ``quest`` variant (``SRformerConfig(variant='quest', ...)``; None: the default named).

    Attributes:
        leaf_size: ``b``, real encoder positions per leaf (Quest's page), the unit a query reads besides its
            segment. At least 1. None: 16.
        top_leaves: ``r``, the leaves each query reads per head besides its segment. At least 1. None: 16.
        group_size: ``g``, leaves per group, the first level of the selection (groups of ``g·b`` positions are
            scored first, then the leaves of the ``p`` best). At least 1. None (default): one level, every leaf
            scored (Quest itself).
        top_groups: ``p``, the groups whose leaves are scored. At least 1. None: 16. Unused without ``group_size``.
        rows_min_keys: the shortest input (tokens, the batch's padded length) whose generation keeps no keys or
            values per layer and reads the chosen rows of the encoder output (module docstring). None: 16,384. A
            runtime option; 1 reads rows for every input.
    """

    leaf_size: int | None = integer_setting(1, None, "encoder positions per leaf")
    top_leaves: int | None = integer_setting(1, None, "leaves read besides the scheduled segment")
    group_size: int | None = integer_setting(1, None, "leaves per group")
    top_groups: int | None = integer_setting(1, None, "groups whose leaves are scored")
    rows_min_keys: int | None = integer_setting(1, None, "the shortest input that reads encoder rows")

    runtime: ClassVar[tuple[str, ...]] = ("rows_min_keys",)

    def resolved_leaf_size(self, config: SRformerConfig) -> int:
        """``b``: ``leaf_size``, or 16."""
        return self.leaf_size if self.leaf_size is not None else DEFAULT_LEAF_SIZE

    def resolved_top_leaves(self, config: SRformerConfig) -> int:
        """``r``: ``top_leaves``, or 16."""
        return self.top_leaves if self.top_leaves is not None else DEFAULT_TOP_LEAVES

    def resolved_top_groups(self, config: SRformerConfig) -> int:
        """``p``: ``top_groups``, or 16."""
        return self.top_groups if self.top_groups is not None else DEFAULT_TOP_GROUPS

    def resolved_rows_min_keys(self, config: SRformerConfig) -> int:
        """``rows_min_keys``, or 16,384."""
        return self.rows_min_keys if self.rows_min_keys is not None else DEFAULT_ROWS_MIN_KEYS

    def whole_input_length(self, config: SRformerConfig) -> int:
        """``b r`` (with groups ``b min(r, p g)``): an input of at most that many real tokens has at most ``r``
        leaves (in at most ``p`` groups), so every leaf is chosen."""
        leaves = self.resolved_top_leaves(config)
        if self.group_size is not None:
            leaves = min(leaves, self.resolved_top_groups(config) * self.group_size)
        return self.resolved_leaf_size(config) * leaves


@dataclass(kw_only=True)
class QuestBoundsState(CrossAttentionState):
    """What both layouts of ``quest`` keep for the selection. ``num_segments`` is ``m = ceil(n / s)``.

    Shapes: B = batch (times beams), H = heads, d = head_dim, N = ``L·b`` compacted rows (the padded encoder length
    rounded up to whole leaves), L leaves, G groups (0 without ``group_size``).

    Attributes:
        positions: (B, N) long, the encoder position of each compacted row (an example's real positions first, in
            order; 0 past its length).
        leaf_bounds: (B, H, L, 2d): per leaf, the element-wise maximum then the element-wise minimum of its real
            keys (float32 or wider, detached; 0 for a leaf without real positions), so that a query's bound is one
            product with ``[max(Q, 0), min(Q, 0)]`` (:func:`bound_features`). Without groups it is stored as a
            transposed view of a (B, H, 2d, L) tensor (the leaves contiguous for the step's one matrix product);
            with groups, (B, H, G·g, 2d) rows in the groups' order ``π`` (a group's leaves one contiguous block;
            0 at empty slots).
        leaf_real: (B, L) bool, True for a leaf with a real position.
        leaf_order: (B, H, G·g) long, ``π``: the leaves of group ``G`` are ``leaf_order[..., G·g:(G + 1)·g]``;
            values ``>= L`` are empty slots. (B, H, 0) without groups.
        group_bounds: (B, H, G, 2d), the same as ``leaf_bounds`` per group, a transposed view of a (B, H, 2d, G)
            tensor.
        group_real: (B, H, G) bool, True for a group with a real leaf.

    The accelerator step's fields (:meth:`QuestCrossAttention.accelerator_step`; ``Ls`` slots: ``G·g`` with groups,
    ``L`` without; T = ``target_length``), ``O(H·Ls)`` memory, built once with the bounds:

    Attributes:
        step_segment: (B, T + 1) long, ``i(t)`` of decoder positions ``t = 0 .. T`` (later ones read ``i(T)``).
        slot_leaf: (B, H, Ls) long, the leaf of each slot (``π``; the last leaf at an empty slot); without groups
            (B, 1, L), an expanded view of the leaves' indices (this and the next two fields: the same for every
            head).
        slot_segment: (B, H, Ls) long, the segment whose positions hold every real position of the slot's leaf,
            -1 for a leaf that reaches past its segment or has no real position (and an empty slot): the slot is
            not a candidate at the steps that read that segment. Empty (B, H, 0) in a state of the whole-leaf
            steps (:meth:`QuestCrossAttention.uses_leaf_step`), which do not read it.
        slot_rank: (B, H, Ls) float64, each slot's term of the order keys its bound is ranked by
            (:func:`~srformer.attention.selection.position_order` of the slots, in ``π``'s order): ``-inf`` at a
            slot without a real leaf.
        group_rank: (B, H, G) float64, the same for the groups: ``-inf`` at a group without a real leaf.

    The whole-leaf steps' fields (:meth:`QuestCrossAttention.leaf_step` and
    :meth:`QuestCrossAttention.group_leaf_step`: segments of whole leaves, on an accelerator; ``N`` then a multiple
    of ``s``), (B, 0, b) elsewhere:

    Attributes:
        row_bias: (B, L, b), each compacted row's additive bias in the dtype its softmax runs in: 0 at a real row,
            the dtype's lowest value (float32's for a wider one) past the example's length. With groups (B, H, Ls, b),
            per slot of ``π``: its leaf's rows' bias, the lowest at an empty slot.
        row_index: (B, L, b) long, reading encoder rows: each compacted row's row of the flattened encoder output
            (``slot · k + position``); in the standard layout the compacted row itself (an expanded view), so that
            one indexing of the keys (and one of the values) reads a step's leaves. With groups (B, H, Ls, b), per
            slot of ``π`` (an empty slot: the last leaf's rows).
        segment_slots: (B, M, H, s/b) long, with groups: for each segment, the slots of ``π`` that hold its leaves
            (the group leaf step ranks them first; such a state keeps ``slot_segment`` empty); (B, 0, H, 0)
            elsewhere.
    """

    positions: torch.Tensor
    leaf_bounds: torch.Tensor
    leaf_real: torch.Tensor
    leaf_order: torch.Tensor
    group_bounds: torch.Tensor
    group_real: torch.Tensor
    step_segment: torch.Tensor
    slot_leaf: torch.Tensor
    slot_segment: torch.Tensor
    slot_rank: torch.Tensor
    group_rank: torch.Tensor
    row_bias: torch.Tensor
    row_index: torch.Tensor
    segment_slots: torch.Tensor

    def anchors(self) -> tuple[torch.Tensor, torch.Tensor]:  # noqa: D102 - see the base class
        return self.leaf_bounds, self.positions


@dataclass(kw_only=True)
class QuestState(QuestBoundsState):
    """The standard layout: the bounds plus every key and value, compacted.

    Attributes:
        keys, values: (B, H, N, d) projected keys and values in compacted order (zero past an example's length),
            contiguous.
    """

    keys: torch.Tensor
    values: torch.Tensor

    def anchors(self) -> tuple[torch.Tensor, torch.Tensor]:  # noqa: D102 - see the base class
        return self.keys, self.values

    def encoder_keys(self, encoder_length: int) -> torch.Tensor:
        """The keys in encoder order, (B, H, k, d), zero at padded positions (one scatter, at each call; rows past
        an example's length are zero and carry position 0)."""
        return rows_in_encoder_order(self.keys, self.positions, encoder_length)

    def encoder_values(self, encoder_length: int) -> torch.Tensor:
        """The values in encoder order, as :meth:`encoder_keys`."""
        return rows_in_encoder_order(self.values, self.positions, encoder_length)


class EncoderRows:
    """The encoder output a :class:`QuestRowsState` reads its rows from, and the layer's projections: shared by the
    layers (not a tensor field, so beam reordering never copies it; the state's ``slot`` maps its rows).

    Attributes:
        states: (B0, k, D) the encoder output of the batch the state was built for (held, not copied).
        flat: (B0·k, D) the same rows, one view made at the build (a step indexes it without a call to reshape).
        projection: the layer's key/value projections per head, their views made at the build
            (:meth:`~srformer.attention.projection.HeadProjection.kept`).
    """

    def __init__(self, states: torch.Tensor, projection: HeadProjection) -> None:
        self.states = states
        self.flat = states.reshape(-1, states.shape[-1])
        self.projection = projection.kept()


@dataclass(kw_only=True)
class QuestRowsState(QuestBoundsState):
    """The layout that reads rows of the encoder output (an input of at least ``rows_min_keys`` tokens): the bounds
    and the compaction order only, no keys or values.

    Attributes:
        slot: (B,) long, each row's example in :attr:`encoder` (reordered with the beams like every tensor field).
        value_weight: (B, H, d, D) the layer's ``W_v`` per head, 0 for an example without a real key, in the
            accumulation dtype of the encoder output (:func:`~srformer.attention.state.accumulation_dtype`;
            :meth:`~srformer.attention.projection.HeadProjection.example_values`).
        value_bias: (B, H, 1, d) ``b_v`` likewise, or None for a projection without a bias.
        encoder: the encoder output and the layer's projections (:class:`EncoderRows`).
    """

    slot: torch.Tensor
    value_weight: torch.Tensor
    value_bias: torch.Tensor | None = None
    encoder: EncoderRows

    is_lean: ClassVar[bool] = True
    reads_encoder_rows: ClassVar[bool] = True


def key_bounds(
    keys: torch.Tensor, real: torch.Tensor, size: int
) -> tuple[torch.Tensor, torch.Tensor, torch.Tensor]:
    """The element-wise minimum and maximum of the real keys of each block of ``size`` consecutive rows.

    Args:
        keys: (B, H, n, d) in compacted order, ``n`` a multiple of ``size``.
        real: (B, n) bool, True at real rows.
        size: rows per block.

    Returns:
        ``(low, high, block_real)``: (B, H, n / size, d) each, 0 for a block without real rows; (B, n / size) bool.
    """
    batch, heads, n, d = keys.shape
    mask = ~real[:, None, :, None]
    low = keys.masked_fill(mask, float("inf")).view(batch, heads, n // size, size, d).amin(dim=3)
    high = keys.masked_fill(mask, float("-inf")).view(batch, heads, n // size, size, d).amax(dim=3)
    block_real = real.view(batch, n // size, size).any(dim=-1)
    empty = ~block_real[:, None, :, None]
    return low.masked_fill(empty, 0.0), high.masked_fill(empty, 0.0), block_real


#: Power iterations per node of the leaves' tree.
_POWER_ITERATIONS = 4


def bounds_chunk(rows: int, leaf_size: int) -> int:
    """Positions projected at a time when the bounds of ``rows`` compacted positions are built from the encoder
    output: ``max(BOUNDS_CHUNK, ceil(rows / MAX_BOUNDS_CHUNKS))`` rounded up to a multiple of ``leaf_size``."""
    return -(-max(BOUNDS_CHUNK, -(-rows // MAX_BOUNDS_CHUNKS)) // leaf_size) * leaf_size


def tree_group_elements(batch: int, heads: int, leaves: int, dim: int) -> int:
    """Elements of one group of heads' leaf centres (``B·h·L·d``) when the tree is built for ``heads`` heads of
    ``leaves`` leaves: as many heads at once as :data:`TREE_BUDGET` allows, at least one."""
    per_head = max(1, batch * leaves * dim)
    return per_head * max(1, min(heads, TREE_BUDGET // per_head))


def start_direction(dim: int, dtype: torch.dtype, device: torch.device) -> torch.Tensor:
    """The fixed start of every power iteration: a seeded standard normal vector (d,)."""
    return torch.randn(dim, generator=torch.Generator().manual_seed(0), dtype=torch.float64).to(dtype=dtype,
                                                                                              device=device)


def _principal_projection(centred: torch.Tensor, start: torch.Tensor, lean: bool) -> torch.Tensor:
    """Each node's members projected on its top principal direction: the direction ``C^P s`` of the node's
    covariance ``C`` applied ``P = _POWER_ITERATIONS`` times to ``start`` (``s``), i.e. ``P`` power iterations.

    Args:
        centred: (B, H, N, S, d), the members of N nodes minus their mean (0 for empty slots).
        start: (d,) the first direction.
        lean: on an accelerator, in a number of operator calls that does not depend on ``P`` (12 per level): ``C``
            by one batched product, scaled by its largest entry (its eigenvalues then lie in ``[1, d]``: no
            overflow), squared ``log2 P`` times, applied to ``s``. On the CPU ``P`` rounds of two ``einsum`` over
            the members, each direction normalised (about 10 calls each, but 2-3x faster there at nodes of 16-32
            members). Both give the same direction up to rounding: a projection's scale does not change the order.

    Returns:
        (B, H, N, S).
    """
    batch, heads, nodes, size, d = centred.shape
    tiny = torch.finfo(centred.dtype).tiny
    if not lean:
        direction = start.expand(batch, heads, nodes, d)
        for _ in range(_POWER_ITERATIONS):
            direction = torch.einsum("bhnsd,bhns->bhnd", centred, torch.einsum("bhnsd,bhnd->bhns", centred, direction))
            direction = direction / direction.norm(dim=-1, keepdim=True).clamp(min=tiny)
        return torch.einsum("bhnsd,bhnd->bhns", centred, direction)
    flat = centred.view(batch * heads * nodes, size, d)
    covariance = torch.bmm(flat.transpose(1, 2), flat)  # (N', d, d)
    power = covariance / covariance.amax(dim=(1, 2), keepdim=True).clamp(min=tiny)
    for _ in range(_POWER_ITERATIONS.bit_length() - 1):  # _POWER_ITERATIONS is a power of 2
        power = torch.bmm(power, power)
    column = (power * start).sum(dim=-1, keepdim=True)  # (N', d, 1): C^P s up to scale
    return torch.bmm(flat, column).view(batch, heads, nodes, size)


def rows_at(index: torch.Tensor, *tensors: torch.Tensor) -> tuple[torch.Tensor, ...]:
    """Each of ``tensors`` (B, H, N, e) at ``index`` (B, H, M) long along the third axis: (B, H, M, e) each. On an
    accelerator one ``gather`` each, by one expanded index (:func:`~srformer.attention.step_choice.step_kind`); on the
    CPU one ``index_select`` each of whole rows of the flattened tensor, which copies a row at once where ``gather``
    reads it element by element (several times faster there at rows of 64-128 numbers).

    Raises:
        IndexError: for an index outside ``[0, N)``.
    """
    batch, heads, count, width = tensors[0].shape
    if step_kind(index.device) == "accelerator":
        expanded = index[..., None].expand(-1, -1, -1, width)
        return tuple(tensor.gather(2, expanded) for tensor in tensors)
    flat = index if batch * heads == 1 else index + (torch.arange(batch * heads, device=index.device) * count).view(
        batch, heads, 1)
    flat = flat.reshape(-1)
    return tuple(tensor.reshape(-1, width).index_select(0, flat).view(batch, heads, -1, width) for tensor in tensors)


def similarity_order(centres: torch.Tensor, real: torch.Tensor, group: int) -> torch.Tensor:
    """``π``: each head's leaves ordered by a principal-direction tree over their centres (module docstring).

    Args:
        centres: (B, H, L, d) the leaves' box centres (float32 or wider).
        real: (B, L) bool, True for a leaf with a real position (the others are empty slots).
        group: ``g``, leaves per group: the tree splits until its nodes hold ``g`` slots.

    Returns:
        (B, H, g·2^D) long, leaf indices (values ``>= L`` are empty slots), ``2^D`` the groups.
    """
    batch, heads, leaves, d = centres.shape
    depth = max(0, -(-leaves // group) - 1).bit_length()
    slots = group << depth
    lean = step_kind(centres.device) == "accelerator"
    # each slot's centre (0 where empty) packed with a last coordinate of 1 (0 where empty): one gather a level
    # reads both, and one sum gives a node's members' sum and count; centred, that coordinate is 0 and adds nothing
    # to the covariance (on the CPU the wider rows cost about 6% of the tree's time: 32,768 leaves, one head)
    weight = F.pad(real, (0, slots - leaves)).to(centres.dtype)[:, None, :, None].expand(batch, heads, slots, 1)
    points = torch.cat([F.pad(centres, (0, 0, 0, slots - leaves)) * weight, weight], dim=-1)  # (B, H, g·2^D, d + 1)
    order = torch.arange(slots, device=centres.device).expand(batch, heads, slots)
    start = F.pad(start_direction(d, centres.dtype, centres.device), (0, 1))
    for level in range(depth):
        nodes, size = 1 << level, slots >> level
        (members,) = rows_at(order, points)
        members = members.view(batch, heads, nodes, size, d + 1)
        total = members.sum(dim=3, keepdim=True)  # the members' sum and, last, their count
        centred = members - total / total[..., d:].clamp(min=1) * members[..., d:]
        projection = _principal_projection(centred, start, lean).masked_fill(members[..., d] == 0, float("inf"))
        ranks = torch.argsort(projection, dim=-1, stable=True)
        order = order.reshape(batch, heads, nodes, size).gather(-1, ranks).view(batch, heads, slots)
    return order


def group_bounds(
    low: torch.Tensor, high: torch.Tensor, leaf_real: torch.Tensor, group: int | None
) -> tuple[torch.Tensor, torch.Tensor, torch.Tensor, torch.Tensor]:
    """The leaves' order ``π`` and the bounds of groups of ``group`` consecutive leaves in it, from the leaves'
    bounds ((B, H, L, d) each, (B, L) bool).

    Returns:
        ``(order, low, high, real)``: (B, H, G·g) long; (B, H, G, d) each, 0 for a group without a real leaf;
        (B, H, G) bool. Empty (G = 0) tensors when ``group`` is None.
    """
    batch, heads, leaves, d = low.shape
    if group is None:
        empty = low.new_zeros(batch, heads, 0, d)
        return (torch.zeros(batch, heads, 0, dtype=torch.long, device=low.device), empty, empty,
                leaf_real.new_zeros(batch, heads, 0))
    order = similarity_order((low + high) / 2, leaf_real, group)
    slots = order.shape[-1]
    groups = slots // group
    index = order.clamp(max=leaves - 1)
    present = (order < leaves) & leaf_real[:, None, :].expand(-1, heads, -1).gather(2, index)
    absent = ~present[..., None]
    slot_low, slot_high = rows_at(index, low, high)
    group_low = slot_low.masked_fill(absent, float("inf")).view(batch, heads, groups, group, d)
    group_high = slot_high.masked_fill(absent, float("-inf")).view(batch, heads, groups, group, d)
    group_real = present.view(batch, heads, groups, group).any(dim=-1)
    none = ~group_real[..., None]
    return (order, group_low.amin(dim=3).masked_fill(none, 0.0), group_high.amax(dim=3).masked_fill(none, 0.0),
            group_real)


def bound_features(queries: torch.Tensor) -> torch.Tensor:
    """``[max(Q, 0), min(Q, 0)]``: (B, H, q, d) -> (B, H, q, 2d), whose product with a block's ``[high, low]`` is
    Quest's bound ``sum_c max(q_c·low_c, q_c·high_c)`` (``high >= low``)."""
    return torch.cat([queries.clamp(min=0), queries.clamp(max=0)], dim=-1)


def upper_bound(queries: torch.Tensor, low: torch.Tensor, high: torch.Tensor) -> torch.Tensor:
    """Quest's bound ``sum_c max(q_c·low_c, q_c·high_c)`` of every query against every block.

    Args:
        queries: (B, H, q, d). low, high: (B, H, n, d) each.

    Returns:
        (B, H, q, n).
    """
    return bound_features(queries) @ torch.cat([high, low], dim=-1).transpose(-1, -2)


def outward_bfloat16(bounds: torch.Tensor) -> torch.Tensor:
    """``[high, low]`` bounds (..., 2d) in bfloat16, each maximum rounded up and each minimum rounded down, so that
    they still bound every key (half the memory of float32). bfloat16 has float32's range, so no value needs a
    check (float16's 65,504 would need one, a host sync on an accelerator); a value beyond it becomes infinite and
    the state's NaN/inf check reports it.

    From float32, bfloat16 is the upper half of the bits, so the rounding is integer arithmetic on them: the
    upper half is the value rounded toward zero, and one more unit in its last place (the next value away from
    zero) rounds a maximum above 0 up and a minimum below 0 down where the lower half is not zero (a quarter of
    the CPU time of rounding to nearest and stepping with ``nextafter``, which a wider dtype takes; the same
    result).

    Args:
        bounds: (..., 2d) float32 or wider, the maxima in the first ``d`` columns and the minima in the last ``d``.

    Returns:
        (..., 2d) bfloat16, contiguous.
    """
    d = bounds.shape[-1] // 2
    is_high = torch.arange(2 * d, device=bounds.device) < d
    if bounds.dtype != torch.float32:  # rounded to nearest, then one step outward where that went inward
        half = bounds.to(torch.bfloat16)
        up = torch.nextafter(half, torch.full_like(half, float("inf")))
        down = torch.nextafter(half, torch.full_like(half, float("-inf")))
        raised = torch.where(half.to(bounds.dtype) < bounds, up, half)
        lowered = torch.where(half.to(bounds.dtype) > bounds, down, half)
        return torch.where(is_high, raised, lowered).contiguous()
    bits = bounds.contiguous().view(torch.int32)
    # a float32 bit pattern read as int32 is at least 0 for a value of at least +0 and negative below: away from
    # zero is the bound's direction for a maximum at or above 0 and a minimum below 0 (0 itself is exact)
    away = ((bits & 0xFFFF) != 0) & ((bits >= 0) == is_high)
    return ((bits >> 16).to(torch.int16) + away).view(torch.bfloat16)


def _group_rows(bounds: torch.Tensor, groups: torch.Tensor, size: int) -> torch.Tensor:
    """The rows of whole groups: ``bounds`` (B, H, G·g, e) in the groups' order, ``groups`` (B, H, q, P) long ->
    (B, H, q, P·g, e), one ``index_select`` of ``g·e``-wide rows (far faster on the CPU than one per leaf)."""
    batch, heads, slots, width = bounds.shape
    count = slots // size
    flat = bounds.reshape(batch * heads * count, size * width)
    base = (torch.arange(batch * heads, device=groups.device) * count).view(batch, heads, 1, 1)
    picked = flat.index_select(0, (base + groups).reshape(-1))
    return picked.view(*groups.shape[:3], groups.shape[3] * size, width)


def _transposed(rows: torch.Tensor) -> torch.Tensor:
    """``rows`` (..., n, e) as a transposed view of a contiguous (..., e, n) tensor."""
    return rows.transpose(-1, -2).contiguous().transpose(-1, -2)


class _StepTables(NamedTuple):
    """The constant tensors of :meth:`QuestCrossAttention.accelerator_step` for ``B`` examples, ``H`` heads of
    ``d``, segments of ``s``, leaves of ``b`` positions and ``R`` leaves read."""

    example: torch.Tensor  # (B, 1, 1) long, b
    examples: torch.Tensor  # (B,) long, b
    head: torch.Tensor  # (1, H, 1) long, h
    low: torch.Tensor  # (2d,) [0, -inf]: clamping [Q, Q] gives bound_features' [max(Q, 0), min(Q, 0)]
    high: torch.Tensor  # (2d,) [inf, 0]
    segment_offsets: torch.Tensor  # (s,) long, 0 .. s - 1 (the segment's rows from its start)
    leaf_offsets: torch.Tensor  # (b,) long, 0 .. b - 1 (a leaf's rows from its start)
    leaf_column: torch.Tensor  # (s + R·b,) bool, False for the s segment rows, True for the leaves' rows
    slot_group: torch.Tensor  # (B, H, Ls) long, the group of each slot (j // g; 0 without groups), expanded
    left_out: torch.Tensor  # (B, H, G) float32 +inf (G = Ls // g): scattered with ranked_top's floor at the chosen
    # groups, its ``floor`` of every slot then ranks a slot of a group left out after all others
    group_slots: torch.Tensor  # (G, g) long, the slots of each group (G·g + 0 .. g - 1)
    leaf_segment: torch.Tensor  # (Ls,) long, the segment of each leaf (j // (s / b); -1 where b does not divide s)
    zero: torch.Tensor  # () 0 in the queries' dtype: the bias of a row read
    lowest: torch.Tensor  # () that dtype's lowest value (float32's for a wider one): the bias of a row not read


def _bounds_matrix(leaf_bounds: torch.Tensor) -> torch.Tensor:
    """One level's leaf bounds (B, H, L, 2d), stored as a transposed view of a (B, H, 2d, L) tensor, as the
    (B·H, 2d, L) operand of the leaf step's batched product: one ``as_strided`` call where the strides are that
    layout's (beam reordering keeps them), a transpose and a reshape otherwise."""
    batch, heads, leaves, width = leaf_bounds.shape
    if leaf_bounds.stride() == (heads * width * leaves, width * leaves, 1, leaves):
        return leaf_bounds.as_strided((batch * heads, width, leaves), (width * leaves, leaves, 1))
    return leaf_bounds.transpose(-1, -2).reshape(batch * heads, width, leaves)


def _lowest_bias(dtype: torch.dtype) -> float:
    """The additive bias of a row not read, in a softmax of ``dtype``: that dtype's lowest value, float32's for a
    wider one (finite: an example without a row read still gets a finite, uniform softmax)."""
    return max(torch.finfo(dtype).min, torch.finfo(torch.float32).min)


def _make_step_tables(
    batch: int, heads: int, dim: int, dtype: torch.dtype, device: torch.device, width: int, bias_dtype: torch.dtype,
    slots: int, group: int, s: int, b: int,
) -> _StepTables:
    """The :class:`_StepTables` of these sizes, on ``device``."""
    inf = torch.full((dim,), float("inf"), dtype=dtype, device=device)
    zero = torch.zeros(dim, dtype=dtype, device=device)
    return _StepTables(
        example=torch.arange(batch, device=device).view(batch, 1, 1), examples=torch.arange(batch, device=device),
        head=torch.arange(heads, device=device).view(1, heads, 1),
        low=torch.cat([zero, -inf]), high=torch.cat([inf, zero]),
        segment_offsets=torch.arange(s, device=device), leaf_offsets=torch.arange(b, device=device),
        leaf_column=torch.arange(s + width * b, device=device) >= s,
        slot_group=torch.div(torch.arange(slots, device=device), group, rounding_mode="floor").expand(batch, heads, -1),
        left_out=torch.full((batch, heads, slots // group), float("inf"), dtype=torch.float32, device=device),
        group_slots=torch.arange(slots, device=device).view(slots // group, group),
        leaf_segment=(torch.div(torch.arange(slots, device=device), s // b, rounding_mode="floor") if s % b == 0
                      else torch.full((slots,), -1, device=device)),
        zero=torch.zeros((), dtype=bias_dtype, device=device),
        lowest=torch.tensor(_lowest_bias(bias_dtype), dtype=bias_dtype, device=device),
    )


class QuestCrossAttention(CrossAttentionMechanism):
    """The ``quest`` variant for one decoder layer (module docstring); arguments as
    :class:`~srformer.attention.base.CrossAttentionMechanism`."""

    # ------------------------------------------------------------------ state
    def _leaf_bounds(
        self, keys: torch.Tensor, lengths: torch.Tensor, start: int = 0
    ) -> tuple[torch.Tensor, torch.Tensor, torch.Tensor]:
        """:func:`key_bounds` of compacted ``keys`` (B, H, n, d) holding rows ``start .. start + n - 1`` (``n`` a
        multiple of ``b``), in float32 or wider and detached."""
        rows = torch.arange(start, start + keys.shape[2], device=keys.device)
        real = rows[None, :] < lengths[:, None]
        return key_bounds(keys.detach().to(accumulation_dtype(keys.dtype)), real, self.settings.resolved_leaf_size())

    def _stacked_bounds(
        self, low: torch.Tensor, high: torch.Tensor, leaf_real: torch.Tensor, compact: bool = False
    ) -> dict[str, torch.Tensor]:
        """The state's bound fields from the leaves' minimum and maximum keys ((B, H, L, d) each, (B, L) bool);
        ``compact``: the leaves' bounds in bfloat16 rounded outward (:func:`outward_bfloat16`).
        Heads are independent. On an accelerator they are built together, in as few groups of heads as keep each
        group's tree temporaries within :data:`TREE_BUDGET` elements (one group up to ``B·H·L·d = 2^24``: t5-small's
        8 heads at 65,536 tokens and batch 1), so the build's operator calls do not depend on the input below that
        size. On the CPU (:func:`~srformer.attention.step_choice.step_kind`) one head at a time: a head's
        temporaries stay in cache, 1.6x faster at 32,768 leaves of 64 dimensions than all 8 heads at once."""
        group = self.settings.group_size
        batch, count, leaves, d = low.shape
        per_head = max(1, batch * leaves * d)
        together = step_kind(low.device) == "accelerator"
        step = tree_group_elements(batch, count, leaves, d) // per_head if together else 1
        heads = [self._head_bounds(low[:, h:h + step], high[:, h:h + step], leaf_real, compact)
                 for h in range(0, count, step)]
        fields = {name: torch.cat([head[name] for head in heads], dim=1) for name in heads[0]}
        # the leaves contiguous along the last axis where a step multiplies every one of them (see QuestBoundsState)
        fields["group_bounds"] = _transposed(fields["group_bounds"])
        if group is None:
            fields["leaf_bounds"] = _transposed(fields["leaf_bounds"])
        return {**fields, "leaf_real": leaf_real}

    def _head_bounds(
        self, low: torch.Tensor, high: torch.Tensor, leaf_real: torch.Tensor, compact: bool
    ) -> dict[str, torch.Tensor]:
        """:meth:`_stacked_bounds` of a group of heads' ``low``/``high`` ((B, h, L, d) each), as rows."""
        group = self.settings.group_size
        order, group_low, group_high, group_real = group_bounds(low, high, leaf_real, group)
        leaf_bounds = torch.cat([high, low], dim=-1)
        if group is not None:  # in the groups' order: a chosen group's leaves are one contiguous block
            index = order.clamp(max=low.shape[2] - 1)
            leaf_bounds = rows_at(index, leaf_bounds)[0].masked_fill((order >= low.shape[2])[..., None], 0.0)
        if compact:
            leaf_bounds = outward_bfloat16(leaf_bounds)
        return {"leaf_bounds": leaf_bounds, "leaf_order": order,
                "group_bounds": torch.cat([group_high, group_low], dim=-1), "group_real": group_real}

    def _schedule(self, key_valid: torch.Tensor | None, batch: int, length: int,
                  device: torch.device) -> tuple[torch.Tensor, torch.Tensor, int]:
        """``(lengths, order, N)``: real lengths (B,), the compaction order (B, k) and the compacted rows ``N``."""
        lengths, padded = real_lengths(key_valid, batch, length, device)
        if padded and key_valid is not None:
            order = compaction_order(key_valid.to(device=device, dtype=torch.bool))
        else:
            order = torch.arange(length, device=device).expand(batch, -1)
        settings = self.settings
        unit = settings.resolved_segment_size() if self.uses_leaf_step(device) else settings.resolved_leaf_size()
        return lengths, order, max(1, -(-length // unit)) * unit

    def uses_leaf_step(self, device: torch.device) -> bool:
        """Whether decoder steps on ``device`` run a whole-leaf step, :meth:`leaf_step` (one level) or
        :meth:`group_leaf_step` (groups): an accelerator (:func:`~srformer.attention.step_choice.step_kind`),
        segments of whole leaves (``s`` a multiple of ``b``), and with groups ``(p - 1)·g + 1 - s/b >= r``, so that
        the ``p`` chosen groups always hold ``r`` candidate leaves when a group is left out (at most one chosen
        group is partly empty: :func:`similarity_order` puts empty slots last). The states then hold ``N``
        compacted rows, a multiple of ``s``, so that every segment is ``s / b`` whole leaves."""
        s, b = self.settings.resolved_segment_size(), self.settings.resolved_leaf_size()
        if s % b or step_kind(device) != "accelerator":
            return False
        group = self.settings.group_size
        if group is None:
            return True
        return (self.settings.resolved_top_groups() - 1) * group + 1 - s // b >= self.settings.resolved_top_leaves()

    def _leaf_step_fields(
        self, lengths: torch.Tensor, rows: int, dtype: torch.dtype, leaf_order: torch.Tensor,
        encoder_rows: torch.Tensor | None = None,
    ) -> dict[str, torch.Tensor]:
        """``row_bias`` and ``row_index`` (:class:`QuestBoundsState`) for ``rows`` compacted rows: ``dtype`` the
        softmax's, ``leaf_order`` the bounds' ``π`` (B, H, Ls) (groups: both are kept per slot), ``encoder_rows``
        (B, N) long the flattened encoder output's row of each compacted row where the state reads encoder rows
        (else the index holds the compacted rows themselves). Empty unless :meth:`uses_leaf_step`."""
        b = self.settings.resolved_leaf_size()
        batch, device = lengths.shape[0], lengths.device
        empty = torch.zeros(batch, 0, b, dtype=torch.long, device=device)
        if not self.uses_leaf_step(device):
            return {"row_bias": empty.to(dtype), "row_index": empty}
        lowest = _lowest_bias(dtype)
        real = torch.arange(rows, device=device)[None, :] < lengths[:, None]
        bias = torch.zeros(batch, rows, dtype=dtype, device=device).masked_fill(~real, lowest).view(batch, -1, b)
        if encoder_rows is None:  # the standard layout: the rows of the compacted keys and values
            index = torch.arange(rows, device=device).view(1, -1, b).expand(batch, -1, b)
        else:
            index = encoder_rows.reshape(batch, -1, b).contiguous()
        if self.settings.group_size is not None:  # per slot of π: an empty slot's rows (the last leaf's) not read
            leaves = bias.shape[1]
            example = torch.arange(batch, device=device).view(batch, 1, 1)
            slot_leaf = leaf_order.clamp(max=leaves - 1)
            bias = bias[example, slot_leaf].masked_fill((leaf_order >= leaves)[..., None], lowest)
            index = index[example, slot_leaf]
        return {"row_bias": bias, "row_index": index}

    def _base_fields(self, lengths: torch.Tensor, order: torch.Tensor, rows: int) -> dict[str, torch.Tensor]:
        s = self.settings.resolved_segment_size()
        inside = torch.arange(order.shape[1], device=order.device)[None, :] < lengths[:, None]
        positions = F.pad(order.masked_fill(~inside, 0), (0, rows - order.shape[1]))
        return {"lengths": lengths, "num_segments": num_segments(lengths, s).clamp(min=1),
                "last_segment": torch.full_like(lengths, -1), "positions": positions.contiguous()}

    def _step_fields(self, base: dict[str, torch.Tensor], bounds: dict[str, torch.Tensor]) -> dict[str, torch.Tensor]:
        """The accelerator step's fields (:class:`QuestBoundsState`) from the base fields (:meth:`_base_fields`) and
        the bound fields (:meth:`_stacked_bounds`): ``O(B·H·Ls)`` work, a few dozen calls, no host sync. Empty (a last
        axis of 0) where the CPU step runs (:func:`~srformer.attention.step_choice.step_kind`), which never reads
        them: beam search then reorders nothing more on the CPU."""
        s, b = self.settings.resolved_segment_size(), self.settings.resolved_leaf_size()
        target = self.settings.target_length
        lengths, leaf_real, order = base["lengths"], bounds["leaf_real"], bounds["leaf_order"]
        batch, leaves = leaf_real.shape
        heads = bounds["group_bounds"].shape[1]
        device = lengths.device
        index = torch.zeros(batch, heads, 0, dtype=torch.long, device=device)
        no_slots = {"segment_slots": torch.zeros(batch, 0, heads, 0, dtype=torch.long, device=device)}
        if step_kind(device) != "accelerator":
            rank = torch.zeros(batch, heads, 0, dtype=torch.float64, device=device)
            return {"step_segment": torch.zeros(batch, 0, dtype=torch.long, device=device), "slot_leaf": index,
                    "slot_segment": index, "slot_rank": rank, "group_rank": rank, **no_slots}
        step_segment = segment_index(torch.arange(target + 1, device=device), base["num_segments"], target)
        # slot_segment serves the general accelerator step only: the whole-leaf steps do not read it (the group
        # leaf step reads segment_slots)
        whole_leaves = self.uses_leaf_step(device)
        if not whole_leaves:
            # leaf j holds positions j·b .. min(j·b + b, n) - 1: inside segment k = j·b // s when they end by its end
            start = torch.arange(leaves, device=device) * b
            segment = torch.div(start, s, rounding_mode="floor")
            inside = torch.minimum(start + b, lengths[:, None]) <= torch.minimum((segment + 1) * s, lengths[:, None])
            leaf_segment = torch.where(inside & leaf_real, segment, -1)  # (B, L)
        if self.settings.group_size is None:  # the same for every head: kept once
            slot_leaf = torch.arange(leaves, device=device).expand(batch, 1, leaves)
            slot_segment = index if whole_leaves else leaf_segment[:, None, :]
            slot_real = leaf_real[:, None, :]
        else:
            slot_leaf = order.clamp(max=max(leaves - 1, 0))
            present = order < leaves
            slot_real = present & leaf_real[:, None, :].expand(batch, heads, leaves).gather(2, slot_leaf)
            if whole_leaves:
                no_slots = {"segment_slots": self._segment_slots(order, leaves)}
                slot_segment = index
            else:
                slot_segment = leaf_segment[:, None, :].expand(batch, heads, leaves).gather(2, slot_leaf)
                slot_segment = slot_segment.masked_fill(~present, -1)
        return {"step_segment": step_segment, "slot_leaf": slot_leaf, "slot_segment": slot_segment,
                "slot_rank": position_order(slot_real), "group_rank": position_order(bounds["group_real"]),
                **no_slots}

    def _segment_slots(self, order: torch.Tensor, leaves: int) -> torch.Tensor:
        """(B, M, H, s/b) long: for each head, the slots of ``π`` (``order`` (B, H, Ls)) that hold each segment's
        ``s/b`` leaves (``L = M·s/b`` leaves, every segment whole): ``π``'s inverse, one ``scatter``."""
        batch, heads, slots = order.shape
        per_segment = self.settings.resolved_segment_size() // self.settings.resolved_leaf_size()
        place = torch.arange(slots, device=order.device).expand(batch, heads, slots)
        inverse = torch.zeros(batch, heads, leaves + 1, dtype=torch.long, device=order.device)
        inverse = inverse.scatter(2, order.clamp(max=leaves), place)[..., :leaves]  # empty slots land on column L
        return inverse.view(batch, heads, -1, per_segment).transpose(1, 2).contiguous()

    def finite_check_fields(self, state: CrossAttentionState) -> tuple[str, ...]:
        """The base's fields less ``slot_rank`` and ``group_rank``, built from masks alone (``-inf`` on purpose), and
        the rows layout's ``value_weight`` and ``value_bias``, the model's own weights."""
        skipped = ("slot_rank", "group_rank", "value_weight", "value_bias")
        return tuple(name for name in super().finite_check_fields(state) if name not in skipped)

    @autocast_off
    def init_state(self, keys: torch.Tensor, values: torch.Tensor, key_valid: torch.Tensor | None) -> QuestState:
        """The standard state: keys and values compacted, and the leaves' and groups' bounds (``O(k·d)``).

        Args:
            keys, values: (B, H, k, d) projected encoder keys and values.
            key_valid: (B, k) bool, True at real positions; None when nothing is padded.

        Returns:
            A :class:`QuestState`; an example without real keys has output 0.
        """
        batch, heads, length, d = keys.shape
        lengths, order, rows = self._schedule(key_valid, batch, length, keys.device)
        base = self._base_fields(lengths, order, rows)
        index = order[:, None, :, None].expand(-1, heads, -1, d)
        real = (torch.arange(length, device=keys.device)[None, :] < lengths[:, None])[:, None, :, None]
        spare = rows - length
        compact_keys = F.pad(torch.gather(keys, 2, index) * real.to(keys.dtype), (0, 0, 0, spare)).contiguous()
        compact_values = F.pad(torch.gather(values, 2, index) * real.to(values.dtype), (0, 0, 0, spare)).contiguous()
        bounds = self._stacked_bounds(*self._leaf_bounds(compact_keys, lengths))
        return QuestState(**base, **bounds, **self._step_fields(base, bounds),
                          **self._leaf_step_fields(lengths, rows, keys.dtype, bounds["leaf_order"]), keys=compact_keys,
                          values=compact_values)

    @autocast_off
    def indexed_state(
        self, encoder_states: torch.Tensor, key_valid: torch.Tensor | None, projection: HeadProjection
    ) -> QuestRowsState | None:
        """The state that reads rows of the encoder output, for a batch padded to at least ``rows_min_keys`` tokens
        (the padded length decides, without a host sync); None otherwise (the standard state is built). The keys
        are projected a chunk of compacted positions at a time for the bounds and dropped, ``O(chunk·H·d)``
        transient memory: on an accelerator :func:`bounds_chunk` positions (at most :data:`MAX_BOUNDS_CHUNKS` chunks,
        so the calls do not grow with the input), on the CPU :data:`BOUNDS_CHUNK`.

        Args:
            encoder_states: (B, k, D) the encoder output.
            key_valid: (B, k) bool, True at real positions, or None.
            projection: the layer's key/value projections per head.
        """
        batch, length, width = encoder_states.shape
        lengths, order, rows = self._schedule(key_valid, batch, length, encoder_states.device)
        if batch == 0 or length < self.settings.resolved_rows_min_keys():  # the padded length: no host sync
            return None
        b = self.settings.resolved_leaf_size()
        accelerator = step_kind(encoder_states.device) == "accelerator"
        chunk = bounds_chunk(rows, b) if accelerator else -(-BOUNDS_CHUNK // b) * b
        padded_order = F.pad(order, (0, rows - length))
        parts: list[tuple[torch.Tensor, torch.Tensor, torch.Tensor]] = []
        with torch.no_grad():
            for start in range(0, rows, chunk):
                stop = min(rows, start + chunk)
                index = padded_order[:, start:stop]
                hidden = torch.gather(encoder_states.detach(), 1, index[:, :, None].expand(-1, -1, width))
                parts.append(self._leaf_bounds(projection.keys(hidden), lengths, start))
        lows, highs, reals = zip(*parts, strict=True)
        low, high, leaf_real = torch.cat(lows, dim=2), torch.cat(highs, dim=2), torch.cat(reals, dim=1)
        del parts, lows, highs
        base = self._base_fields(lengths, order, rows)
        bounds = self._stacked_bounds(low, high, leaf_real, compact=True)
        slot = torch.arange(batch, device=encoder_states.device)
        encoder_rows = base["positions"] + (slot * length)[:, None]
        wide = accumulation_dtype(encoder_states.dtype)
        encoder = EncoderRows(encoder_states, projection)
        value_weight, value_bias = encoder.projection.example_values((lengths > 0).to(wide).view(batch, 1, 1, 1))
        return QuestRowsState(
            **base, **bounds, **self._step_fields(base, bounds),
            **self._leaf_step_fields(lengths, rows, wide, bounds["leaf_order"], encoder_rows), slot=slot,
            value_weight=value_weight, value_bias=value_bias, encoder=encoder,
        )

    def lean(self, state: CrossAttentionState) -> CrossAttentionState:
        """No lean layout (long inputs read encoder rows instead: ``rows_min_keys``).

        Raises:
            ValueError: always.
        """
        raise ValueError("The lean cache layout is not implemented for variant 'quest'; long inputs read rows of "
                         "the encoder output instead (the `rows_min_keys` setting).")

    # ------------------------------------------------------------------ selection
    def _segments(self, state: QuestBoundsState, start_position: int | torch.Tensor, count: int) -> torch.Tensor:
        """``i(t)`` of ``count`` positions from ``start_position``: (B, q) long."""
        positions = torch.arange(count, device=state.lengths.device) + start_position
        return segment_index(positions, state.num_segments, self.settings.target_length)

    def select(
        self, queries: torch.Tensor, state: QuestBoundsState, segments: torch.Tensor
    ) -> tuple[torch.Tensor, torch.Tensor]:
        """The compacted rows each query reads per head: its segment's ``s`` rows, then the ``r·b`` rows of its
        chosen leaves (module docstring).

        Args:
            queries: (B, H, q, d) projected decoder queries.
            state: either layout.
            segments: (B, q) long, ``i(t)`` of each query.

        Returns:
            ``(rows, allowed)``: (B, H, q, s + R·b) long compacted rows and bool, False at a row that is not read
            (past the example's length, a chosen leaf's row inside the segment, an empty slot); ``R = min(r, ...)``.
        """
        s, b = self.settings.resolved_segment_size(), self.settings.resolved_leaf_size()
        leaves = state.leaf_real.shape[1]
        lengths = state.lengths[:, None]  # (B, 1)
        segment_start = segments * s  # (B, q)
        segment_stop = torch.minimum(segment_start + s, lengths)
        # candidates: leaves with a real row outside the segment
        leaf_start = torch.arange(leaves, device=segments.device) * b
        leaf_stop = torch.minimum(leaf_start + b, lengths)  # (B, L)
        within = (leaf_start >= segment_start[..., None]) & (leaf_stop[:, None, :] <= segment_stop[..., None])
        candidate = state.leaf_real[:, None, :] & ~within  # (B, q, L)
        chosen, valid = self._choose_leaves(queries, state, candidate)
        heads = queries.shape[1]
        segment_rows = segment_start[..., None] + torch.arange(s, device=segments.device)  # (B, q, s)
        segment_ok = segment_rows < segment_stop[..., None]
        leaf_rows = chosen[..., None] * b + torch.arange(b, device=segments.device)  # (B, H, q, R, b)
        start = segment_start[:, None, :, None, None]
        in_segment = (leaf_rows >= start) & (leaf_rows < start + s)
        leaf_ok = valid[..., None] & (leaf_rows < lengths[:, None, :, None, None]) & ~in_segment
        rows = torch.cat([segment_rows[:, None].expand(-1, heads, -1, -1), leaf_rows.flatten(-2)], dim=-1)
        allowed = torch.cat([segment_ok[:, None].expand(-1, heads, -1, -1), leaf_ok.flatten(-2)], dim=-1)
        limit = state.positions.shape[1] - 1
        return rows.clamp(max=limit), allowed & (rows <= limit)

    def _choose_leaves(
        self, queries: torch.Tensor, state: QuestBoundsState, candidate: torch.Tensor
    ) -> tuple[torch.Tensor, torch.Tensor]:
        """The ``R`` leaves of each query and head ((B, H, q, R) long, ascending) and which of them count (bool),
        given the candidate leaves (B, q, L) bool."""
        r, group = self.settings.resolved_top_leaves(), self.settings.group_size
        batch, heads, count, _ = queries.shape
        leaves = state.leaf_real.shape[1]
        with torch.no_grad(), torch.autocast(device_type=queries.device.type, enabled=False):
            wide = (state.leaf_bounds if group is None else state.group_bounds).dtype  # leaves may be bfloat16
            features = bound_features(queries.detach().to(wide))  # (B, H, q, 2d)
            expanded = candidate[:, None].expand(batch, heads, count, leaves)
            if group is None:
                bounds = features @ state.leaf_bounds.transpose(-1, -2)  # (B, H, q, L)
                chosen = top_positions(bounds, expanded, min(r, leaves))
                return chosen, expanded.gather(-1, chosen)
            groups = state.group_bounds.shape[2]
            group_scores = features @ state.group_bounds.transpose(-1, -2)  # (B, H, q, G)
            group_real = state.group_real[:, :, None, :].expand(batch, heads, count, groups)
            chosen_groups = min(self.settings.resolved_top_groups(), groups)
            top = top_positions(group_scores, group_real, chosen_groups)
            top_valid = group_real.gather(-1, top)  # (B, H, q, P)
            order = state.leaf_order[:, :, None, :].expand(batch, heads, count, -1)
            if 2 * chosen_groups >= groups:
                # half the groups or more: every leaf's bound in one product (in the groups' order, as the
                # gathered path ranks them), those outside the chosen groups masked; the same choice, cheaper
                chosen = torch.zeros_like(group_real).scatter_(-1, top, top_valid)
                slot_valid = chosen[..., None].expand(-1, -1, -1, -1, group).flatten(-2)  # (B, H, q, G·g)
                leaf, width = order, order.shape[-1]
                scores = features @ state.leaf_bounds.to(features.dtype).transpose(-1, -2)  # (B, H, q, G·g)
            else:
                slot = (top[..., None] * group + torch.arange(group, device=top.device)).flatten(-2)  # (B, H, q, P·g)
                leaf = order.gather(-1, slot)
                slot_valid = top_valid[..., None].expand(*top.shape, group).flatten(-2)
                # the chosen groups' leaf bounds, whole groups gathered per query: chunks of queries bound the memory
                width = leaf.shape[-1]
                step = max(1, _GATHER_BUDGET // max(1, batch * heads * width * features.shape[-1]))
                scores = torch.cat([
                    torch.einsum("bhqe,bhqne->bhqn", features[:, :, i:i + step],
                                 _group_rows(state.leaf_bounds, top[:, :, i:i + step], group).to(features.dtype))
                    for i in range(0, count, step)
                ], dim=2)
            leaf_valid = slot_valid & (leaf < leaves)
            leaf = leaf.clamp(max=leaves - 1)
            leaf_valid = leaf_valid & expanded.gather(-1, leaf)
            pick = top_positions(scores, leaf_valid, min(r, width))
            return leaf.gather(-1, pick), leaf_valid.gather(-1, pick)

    # ------------------------------------------------------------------ reading
    def _probabilities(
        self, queries: torch.Tensor, state: QuestState, segments: torch.Tensor
    ) -> tuple[torch.Tensor, torch.Tensor]:
        """``(rows, probabilities)``: the compacted rows read (B, H, q, S) and their softmax weights (B, H, q, S)
        in the queries' dtype, zero at rows not read."""
        rows, allowed = self.select(queries, state, segments)
        keys = gather_rows(state.keys, rows).to(queries.dtype)  # (B, H, q, S, d)
        return rows, slot_softmax(queries, keys, allowed, self.scale)

    def _read(
        self, queries: torch.Tensor, state: QuestState, segments: torch.Tensor, dropout: float
    ) -> torch.Tensor:
        rows, probabilities = self._probabilities(queries, state, segments)
        if dropout > 0.0:
            probabilities = F.dropout(probabilities, p=dropout, training=True)
        values = gather_rows(state.values, rows).to(queries.dtype)
        return torch.einsum("bhqs,bhqsd->bhqd", probabilities, values)

    def forward(
        self, queries: torch.Tensor, state: CrossAttentionState, *, start_position: int | torch.Tensor = 0,
        dropout: float = 0.0,
    ) -> tuple[torch.Tensor, CrossAttentionState]:
        """Cross attention for ``q`` consecutive decoder positions (training, teacher forcing).

        Args:
            queries: (B, H, q, d) projected decoder queries at positions ``start_position ..``.
            state: a :class:`QuestState` from :meth:`init_state`.
            start_position: absolute decoder position of the first query (an int or a 0-d long tensor).
            dropout: attention-probability dropout (training only).

        Returns:
            ``(output, state)``: (B, H, q, d) in the queries' dtype, and the state after the last position.

        Raises:
            ValueError: for a state of another class.
        """
        state = self._standard(state)
        segments = self._segments(state, start_position, queries.shape[2])
        output = self._read(queries, state, segments, dropout)
        return output, replace(state, last_segment=segments[:, -1] if queries.shape[2] else state.last_segment)

    def step(
        self, queries: torch.Tensor, state: CrossAttentionState, *, position: int | torch.Tensor,
        project_rows: ProjectRows | None = None,
    ) -> tuple[torch.Tensor, CrossAttentionState]:
        """One decoder position: the same output as :meth:`forward` there. From a :class:`QuestRowsState` the chosen
        rows are read from the encoder output in the absorbed form (module docstring). The step of the queries'
        device (:func:`~srformer.attention.step_choice.step_kind`): on an accelerator :meth:`accelerator_step`, a
        fixed sequence of calls without a host sync; on the CPU :meth:`select` and its gathers, which take less time
        there.

        Args:
            queries: (B, H, 1, d) projected decoder query at ``position``.
            state: either layout. position: absolute decoder position ``t``. project_rows: unused.

        Returns:
            ``(output, state)``: (B, H, 1, d) in the queries' dtype, and the updated state.

        Raises:
            ValueError: for a state of another class.
        """
        if not isinstance(state, QuestBoundsState):
            raise ValueError(f"{type(self).__name__} cannot step a {type(state).__name__}; build it with init_state().")
        if queries.shape[2] == 1 and step_kind(queries.device) == "accelerator":
            segment = self._segment_at(state, position)
            if not state.row_bias.shape[1]:
                step = self.accelerator_step
            else:
                step = self.leaf_step if self.settings.group_size is None else self.group_leaf_step
            return step(queries, state, segment), replace(state, last_segment=segment)
        segments = self._segments(state, position, 1)
        if isinstance(state, QuestRowsState):
            output = self._read_encoder_rows(queries, state, segments)
        else:
            output = self._read(queries, self._standard(state), segments, 0.0)
        return output, replace(state, last_segment=segments[:, -1])

    def _segment_at(self, state: QuestBoundsState, position: int | torch.Tensor) -> torch.Tensor:
        """(B,) long ``i(t)`` read from ``step_segment`` (:func:`~srformer.attention.schedule.segment_at`).

        Raises:
            ValueError: for a state built where the CPU step runs (its step fields are empty): build the state under
                the same step choice as the steps.
        """
        if state.step_segment.shape[1] == 0:
            raise ValueError("This quest state was built for the CPU step (its accelerator fields are empty): build "
                             "the state under the step choice the decoder steps run with (step_choice.step_kind).")
        return segment_at(state.step_segment, position, self.settings.target_length)

    def _step_tables(
        self, batch: int, heads: int, dim: int, dtype: torch.dtype, device: torch.device, width: int,
        bias_dtype: torch.dtype, slots: int,
    ) -> _StepTables:
        """The accelerator step's constant tensors (``dtype``: the bounds', ``width``: ``R``, ``bias_dtype``: the
        queries', ``slots``: ``Ls``): made once per shape, dtype and device in eager
        mode and kept on the module (no operator call per step), made in the graph when traced."""
        key = (batch, heads, dim, dtype, device, width, bias_dtype, slots, self.settings.group_size or slots)
        s, b = self.settings.resolved_segment_size(), self.settings.resolved_leaf_size()
        cache: dict[tuple[int, int, int, torch.dtype, torch.device, int, torch.dtype, int, int], _StepTables]
        cache = self.__dict__.setdefault("_quest_step_tables", {})
        return kept_per_shape(cache, key, lambda: _make_step_tables(*key, s, b))

    def accelerator_step(self, queries: torch.Tensor, state: QuestBoundsState, segment: torch.Tensor) -> torch.Tensor:
        """One decoder position in a fixed sequence of operator calls whatever the input length, without a host
        sync: the accelerator's step (:func:`~srformer.attention.step_choice.step_kind`). The same rows and output as
        :meth:`select` (the CPU step), by another route: every slot's bound is computed (one product and one sum,
        ``O(Ls·d)`` per head where the CPU step scores only the chosen groups' leaves), the ``p`` groups of largest
        bound are found by one ``topk`` of order keys (:func:`~srformer.attention.selection.ranked_top`: ties to the
        earlier group, groups without a real leaf last), the slots of the other groups and of leaves inside segment
        ``i(t)`` are ranked last, and the ``R`` candidate slots of largest bound by a second ``topk`` (ties to the
        earlier in ``π``). One indexing each reads the ``s`` rows of the segment and the ``R·b`` rows of the chosen
        leaves (keys and values, or encoder rows), and one ``scaled_dot_product_attention`` mixes them, rows not read
        carrying the dtype's lowest additive bias (an example without real keys: output 0).

        Args:
            queries: (B, H, 1, d) projected decoder query.
            state: either layout.
            segment: (B,) long, ``i(t)``.

        Returns:
            (B, H, 1, d) in the queries' dtype.
        """
        s, b = self.settings.resolved_segment_size(), self.settings.resolved_leaf_size()
        group = self.settings.group_size
        batch, heads, _, d = queries.shape
        leaves, slots = state.leaf_real.shape[1], state.slot_rank.shape[-1]
        wide = (state.leaf_bounds if group is None else state.group_bounds).dtype  # leaves may be bfloat16
        groups = state.group_bounds.shape[2]
        top = min(self.settings.resolved_top_groups(), groups)
        width = min(self.settings.resolved_top_leaves(), slots if group is None else top * group)  # R
        tables = self._step_tables(batch, heads, d, wide, queries.device, width, queries.dtype, slots)
        with torch.no_grad(), torch.autocast(device_type=queries.device.type, enabled=False):
            features = cast(torch.cat([queries, queries], dim=-1), wide).clamp(tables.low, tables.high)  # (B, H, 1, 2d)
            now = segment.view(batch, 1, 1)
            skip = state.slot_segment == now  # leaves inside segment i(t): read as the segment's
            if group is not None:  # every group ranked even when all are chosen: the calls do not depend on G
                group_scores = (features * state.group_bounds).sum(dim=-1)  # (B, H, G)
                chosen_groups = ranked_top(group_scores, state.group_rank, top)  # (B, H, P)
                left_out = torch.ones_like(state.group_real).scatter(-1, chosen_groups, False)
                skip = skip | left_out.gather(-1, tables.slot_group)  # the slots of the groups left out
            rank = state.slot_rank.masked_fill(skip, float("-inf"))
            scores = (features * state.leaf_bounds).sum(dim=-1)  # (B, H, Ls), float32 or wider
            chosen = ranked_top(scores, rank, width)  # (B, H, R) slots
            # a slot ranked last (fewer candidates than R) reads leaf L: rows past every example's length
            leaf = state.slot_leaf.masked_fill(rank == float("-inf"), leaves).expand(batch, heads, -1)
            leaf = leaf.gather(-1, chosen)
        rows = torch.cat([torch.add(tables.segment_offsets, now, alpha=s).expand(batch, heads, s),
                          torch.add(tables.leaf_offsets, leaf[..., None], alpha=b).view(batch, heads, -1)],
                         dim=-1)  # (B, H, S): the segment's s rows, then each chosen leaf's b
        read = rows < state.lengths.view(batch, 1, 1)
        if s % b:  # a candidate leaf may reach into the segment: its rows there are read as the segment's
            start = now * s
            read = read & ~((rows >= start) & (rows < start + s) & tables.leaf_column)
        read = read.view(batch, heads, 1, -1)
        rows = rows.clamp(max=state.positions.shape[1] - 1)
        bias = torch.where(read, tables.zero, tables.lowest)
        if isinstance(state, QuestRowsState):
            length = state.encoder.states.shape[1]
            flat = state.positions.gather(1, rows.view(batch, -1)) + (state.slot * length).view(batch, 1)
            return self._attend_encoder_rows(queries, state, flat.view(batch, heads, -1), bias)
        assert isinstance(state, QuestState)
        return F.scaled_dot_product_attention(
            queries, cast(state.keys[tables.example, tables.head, rows], queries.dtype),
            cast(state.values[tables.example, tables.head, rows], queries.dtype),
            attn_mask=bias, scale=self.scale,
        )

    def leaf_step(self, queries: torch.Tensor, state: QuestBoundsState, segment: torch.Tensor) -> torch.Tensor:
        """:meth:`accelerator_step` in fewer operator calls where every segment is ``e = s / b`` whole leaves and
        there is one level (:meth:`uses_leaf_step`; 19 calls per layer in the standard layout whatever the input
        length, no host sync). The same rows and output, by a shorter route: the ``e`` leaves of segment ``i(t)`` are
        ranked before every other (they are read whether or not they hold real rows: those that do not carry the
        lowest bias), so one ``topk`` of order keys over every leaf's bound
        (:func:`~srformer.attention.selection.ranked_top` with ``first``) returns them and the ``R`` candidate
        leaves of largest bound (ties to the earlier leaf), and the keys and values, or the encoder rows, are read
        by whole leaves through ``row_index`` (the leaves' rows), one indexing each. The bounds are multiplied by one
        batched matrix product (``O(L·d)`` per head, no ``(L, 2d)`` temporary).

        Args:
            queries: (B, H, 1, d) projected decoder query.
            state: either layout, built where this step runs (its ``row_bias`` is not empty).
            segment: (B,) long, ``i(t)``.

        Returns:
            (B, H, 1, d) in the queries' dtype.
        """
        s, b = self.settings.resolved_segment_size(), self.settings.resolved_leaf_size()
        batch, heads, _, d = queries.shape
        leaves = state.leaf_real.shape[1]
        width = min(s // b + self.settings.resolved_top_leaves(), leaves)  # e + R
        bounds = _bounds_matrix(state.leaf_bounds)  # (B·H, 2d, L)
        tables = self._step_tables(batch, heads, d, bounds.dtype, queries.device, width, queries.dtype, leaves)
        with torch.no_grad(), torch.autocast(device_type=queries.device.type, enabled=False):
            features = cast(torch.cat([queries, queries], dim=-1), bounds.dtype).clamp(tables.low, tables.high)
            scores = torch.bmm(features.view(batch * heads, 1, 2 * d), bounds)
            first = tables.leaf_segment == segment.view(batch, 1, 1)  # (B, 1, L): the leaves of segment i(t)
            # the bounds are finite (the state's finite check), so a score is finite unless the query times a bound
            # passes float32's range; ranked_top then skips its nan_to_num, and such a leaf is ranked first
            chosen = ranked_top(scores.view(batch, heads, leaves), state.slot_rank, width, first, finite=True)
        bias = state.row_bias[tables.example, chosen].view(batch, heads, 1, width * b)
        if isinstance(state, QuestRowsState):
            return self._attend_encoder_rows(queries, state, state.row_index[tables.example, chosen], bias)
        assert isinstance(state, QuestState)
        return self._attend_whole_leaves(queries, state, tables, state.row_index[tables.example, chosen], bias)

    def group_leaf_step(self, queries: torch.Tensor, state: QuestBoundsState, segment: torch.Tensor) -> torch.Tensor:
        """:meth:`accelerator_step` in fewer operator calls with groups, where every segment is ``e = s / b`` whole
        leaves and the chosen groups always hold ``r`` candidates (:meth:`uses_leaf_step`; no host sync, the same
        calls whatever the input length). The same rows and output, by a shorter route: the ``p`` groups of largest
        bound as there; every slot of the groups left out gets a floor of ``+inf`` in its order key, which ranks it
        after all others (one ``scatter`` and one ``gather``; :func:`~srformer.attention.selection.ranked_top`'s
        ``floor``); the ``e`` slots holding segment ``i(t)``'s leaves (``segment_slots``, one indexing) get an order
        term of ``+inf`` (one ``scatter``): ranked before every other and read whether or not they hold real rows
        (those that do not with the lowest bias), so one ``topk`` of order keys returns them and the ``r`` candidates
        of largest bound (ties to the earlier in ``π``). Because at least
        ``r`` candidates are finite whenever a group is left out, no slot of a group left out is read. The keys and
        values, or the encoder rows, are read by whole leaves, with each slot's bias (``row_bias``, per slot).

        That route scores every slot, ``O(Ls·d)`` bytes a step. From :data:`GATHER_SLOTS_RATIO_EAGER` times ``p·g``
        slots (:data:`GATHER_SLOTS_RATIO_COMPILED` under ``torch.compile``) the **gathered route** scores only the
        ``p·g`` slots of the chosen groups (one indexing of their bounds, ``O(p·g·d)`` whatever the input length):
        the slots of segment ``i(t)`` among them ranked last, the ``r`` best of the others chosen by one ``topk`` of
        order keys and put after the segment's ``e`` slots, and a segment slot picked again (an example with fewer
        than ``r`` real candidates) masked. The same rows, 12 operator calls more per layer.

        Args:
            queries: (B, H, 1, d) projected decoder query.
            state: either layout, built where this step runs (its ``row_bias`` is not empty).
            segment: (B,) long, ``i(t)``.

        Returns:
            (B, H, 1, d) in the queries' dtype.
        """
        s, b = self.settings.resolved_segment_size(), self.settings.resolved_leaf_size()
        batch, heads, _, d = queries.shape
        slots = state.slot_rank.shape[-1]
        wide = state.group_bounds.dtype  # the leaves' bounds may be bfloat16
        top = min(self.settings.resolved_top_groups(), state.group_bounds.shape[2])
        width = min(s // b + self.settings.resolved_top_leaves(), slots)  # e + r
        tables = self._step_tables(batch, heads, d, wide, queries.device, width, queries.dtype, slots)
        ratio = GATHER_SLOTS_RATIO_COMPILED if tracing() else GATHER_SLOTS_RATIO_EAGER
        gathered = slots >= ratio * top * (self.settings.group_size or 1)
        with torch.no_grad(), torch.autocast(device_type=queries.device.type, enabled=False):
            features = cast(torch.cat([queries, queries], dim=-1), wide).clamp(tables.low, tables.high)  # (B, H, 1, 2d)
            # the bounds are finite (the state's finite check): ranked_top skips its nan_to_num (leaf_step's reason)
            group_scores = (features * state.group_bounds).sum(dim=-1)  # (B, H, G)
            chosen_groups = ranked_top(group_scores, state.group_rank, top, finite=True)  # (B, H, p)
            own = state.segment_slots[tables.examples, segment]  # (B, H, e): segment i(t)'s slots
            if gathered:  # the chosen groups' slots only, those of segment i(t) ranked last; the segment's put first
                candidates = tables.group_slots[chosen_groups].view(batch, heads, -1)  # (B, H, p·g)
                scores = (features * state.leaf_bounds[tables.example, tables.head, candidates]).sum(dim=-1)
                inside = (candidates[..., None] == own[:, :, None, :]).any(dim=-1)
                order = state.slot_rank[tables.example, tables.head, candidates].masked_fill(inside, float("-inf"))
                picked = ranked_top(scores, order, width - own.shape[-1], finite=True)  # (B, H, r)
                chosen = torch.cat([own, candidates.gather(-1, picked)], dim=-1)  # (B, H, e + r) slots
                # fewer than r real candidates (a short example batched with long ones): a slot of segment i(t) may
                # be picked again among those ranked last; its second reading is masked
                again = F.pad(inside.gather(-1, picked), (own.shape[-1], 0))[..., None]  # (B, H, e + r, 1)
            else:
                # the slots of the groups left out after all others: a floor of +inf in their order keys
                floor = tables.left_out.scatter(-1, chosen_groups, ORDER_FLOOR).gather(-1, tables.slot_group)
                # the e slots of segment i(t)'s leaves first: an order term of +inf makes a finite score's key +inf
                order = state.slot_rank.scatter(-1, own, float("inf"))
                scores = (features * state.leaf_bounds).sum(dim=-1)  # (B, H, Ls)
                chosen = ranked_top(scores, order, width, finite=True, floor=floor)  # (B, H, e + r) slots
        bias = state.row_bias[tables.example, tables.head, chosen]  # (B, H, e + r, b)
        if gathered:
            bias = bias.masked_fill(again, tables.lowest)
        bias = bias.view(batch, heads, 1, width * b)
        if isinstance(state, QuestRowsState):
            return self._attend_encoder_rows(queries, state, state.row_index[tables.example, tables.head, chosen],
                                             bias)
        assert isinstance(state, QuestState)
        return self._attend_whole_leaves(queries, state, tables, state.row_index[tables.example, tables.head, chosen],
                                         bias)

    def _attend_whole_leaves(
        self, queries: torch.Tensor, state: QuestState, tables: _StepTables, rows: torch.Tensor, bias: torch.Tensor
    ) -> torch.Tensor:
        """The whole-leaf steps' read of the standard layout: the keys and values at compacted ``rows`` (B, H, W, b)
        long (``row_index`` of the chosen leaves), one indexing each, mixed by one ``scaled_dot_product_attention``
        with additive ``bias`` (B, H, 1, W·b). (B, H, 1, d) in the queries' dtype."""
        batch, heads = rows.shape[:2]
        rows = rows.view(batch, heads, -1)
        keys = state.keys[tables.example, tables.head, rows]
        values = state.values[tables.example, tables.head, rows]
        return F.scaled_dot_product_attention(
            queries, cast(keys, queries.dtype), cast(values, queries.dtype), attn_mask=cast(bias, queries.dtype),
            scale=self.scale,
        )

    def _attend_encoder_rows(
        self, queries: torch.Tensor, state: QuestRowsState, flat: torch.Tensor, bias: torch.Tensor
    ) -> torch.Tensor:
        """The accelerator steps' read of the encoder-rows layout: the rows ``flat`` (B, H, ...) long of the flattened
        encoder output, ``S`` per head, by one indexing, then :meth:`_absorbed` with additive ``bias`` (B, H, 1, S).
        (B, H, 1, d)."""
        batch, heads = flat.shape[:2]
        return self._absorbed(queries, state, state.encoder.flat[flat].view(batch, heads, bias.shape[-1], -1), bias)

    def _read_encoder_rows(
        self, queries: torch.Tensor, state: QuestRowsState, segments: torch.Tensor
    ) -> torch.Tensor:
        """The CPU step's output from rows of the encoder output, for one decoder position: the rows :meth:`select`
        chooses, one ``index_select`` of the flattened encoder output (whole rows: faster there than an indexing),
        then :meth:`_absorbed`, as the accelerator steps do.

        Args:
            queries: (B, H, 1, d) projected decoder query.
            state: the encoder-rows layout.
            segments: (B, 1) long, ``i(t)``.

        Returns:
            (B, H, 1, d) in the queries' dtype; 0 for an example without a real key.
        """
        rows, allowed = self.select(queries, state, segments)  # (B, H, 1, S)
        batch, heads, _, width = rows.shape
        length = state.encoder.states.shape[1]
        flat = state.positions.gather(1, rows.view(batch, -1)) + (state.slot * length).view(batch, 1)
        hidden = state.encoder.flat.index_select(0, flat.view(-1)).view(batch, heads, width, -1)
        lowest = _lowest_bias(torch.float32)  # a wider softmax takes float32's lowest too
        bias = torch.full(allowed.shape, lowest, device=rows.device).masked_fill(allowed, 0.0)
        return self._absorbed(queries, state, hidden, bias)

    def _absorbed(
        self, queries: torch.Tensor, state: QuestRowsState, hidden: torch.Tensor, bias: torch.Tensor
    ) -> torch.Tensor:
        """The absorbed form (module docstring) over encoder rows ``hidden`` (B, H, S, D) with additive ``bias``
        (B, H, 1, S): ``W_k^T Q_t``, one ``scaled_dot_product_attention`` in the hidden space, the value projection
        (:meth:`~srformer.attention.projection.HeadProjection.attend_rows`), in float32 or wider; an example without
        real keys outputs 0 (its ``value_weight``). (B, H, 1, d) in the queries' dtype."""
        projection = state.encoder.projection
        # accumulation_dtype(promote_types(...)) without its two dispatched calls: float64 if either is, else float32
        wide = torch.float64 if torch.float64 in (queries.dtype, state.encoder.flat.dtype) else torch.float32
        output = projection.attend_rows(projection.step_hidden_queries(queries, wide), cast(hidden, wide),
                                        cast(bias, wide), self.scale,
                                        example_values=(state.value_weight, state.value_bias))
        return cast(output, queries.dtype)

    def _standard(self, state: CrossAttentionState) -> QuestState:
        if not isinstance(state, QuestState):
            raise ValueError(
                f"{type(self).__name__} needs a QuestState (from init_state) here, got a {type(state).__name__}."
            )
        return state

    def attention_weights(
        self, queries: torch.Tensor, keys: torch.Tensor, state: CrossAttentionState, key_valid: torch.Tensor | None,
        *, start_position: int | torch.Tensor = 0,
    ) -> torch.Tensor:
        """The softmax weights at the encoder positions, for ``output_attentions``: ``O = A V`` exactly.

        Args:
            queries: (B, H, q, d) projected decoder queries at positions ``start_position ..``.
            keys: (B, H, k, d) projected keys in encoder order (only ``k`` is read).
            state: a :class:`QuestState`. key_valid: unused (the state holds the real positions).
            start_position: absolute decoder position of the first query.

        Returns:
            (B, H, q, k) in the queries' dtype; rows sum to 1 over the read positions, all-zero rows for an empty
            document.
        """
        state = self._standard(state)
        segments = self._segments(state, start_position, queries.shape[2])
        rows, probabilities = self._probabilities(queries, state, segments)
        batch, heads, count, width = rows.shape
        positions = state.positions.gather(1, rows.reshape(batch, -1)).view(batch, heads, count, width)
        weights = queries.new_zeros(batch, heads, count, keys.shape[2])
        return weights.scatter_add_(3, positions, probabilities)
