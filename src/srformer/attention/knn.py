"""Unlimiformer's top-k cross attention (Bertsch, Alon, Neubig & Gormley 2023, Unlimiformer: Long-Range
Transformers with Unlimited Length Input, Sec. 2): the ``knn`` variant.

Unlimiformer keeps every encoder key and lets each decoder query, in every cross-attention head, attend only the
``K`` keys with the highest scores ``Q_t . K_j`` (``K = top_keys``), retrieved from a k-nearest-neighbour index
over all the input's keys; the attention over them is the model's own softmax:

    S_t = the K real encoder positions j with the largest Q_t . K_j
    O_t = sum_{j in S_t} softmax_j(scale * Q_t . K_j | j in S_t) V_j

By default the retrieval is exact: every real key is scored and the top ``K`` are taken (``torch.topk`` and the tie
rule). With ``knn_index="flat"`` or ``"ivf"``, generation from an input of at least ``index_min_keys`` real tokens
searches Unlimiformer's index instead (Sec. 2.3; :mod:`srformer.attention.knn_index`): one faiss index over the
encoder output, shared by every layer and head, queried with ``W_k^T Q_t``; no layer keeps its keys or values, and a
step projects only the ``K`` rows each head retrieves. ``"flat"`` is exhaustive (the exact top ``K`` up to float32
rounding of the scores; among equal scores faiss's order, not the earlier position); ``"ivf"`` is approximate.
``knn_index="rows"`` searches the encoder output's rows the same way without faiss, exhaustively, in torch on their
own device and without a host sync (:mod:`srformer.attention.knn_rows`): the exact search's keys up to the rounding
of the scores, and no per-layer keys or values. The parallel path (training, teacher forcing, a multi-token chunk)
always searches exactly.

* **Ties**: the order is score descending, then encoder position ascending, a total order: among keys of equal
  score at the cut, the earlier positions are read. Selection scores are ``Q_t . K_j`` computed in float32 or wider
  with autocast off and without gradient (the model's scale is positive and does not change the order); a NaN
  score counts as the lowest finite score, so a real key always ranks before the padding.
* **Padding**: padded keys are never selected and an example's output depends on its own real keys only (left
  or right padding give the same output; the tie rule compares positions among the real keys, whose order does
  not depend on the padding).
* **Clamp**: when ``K >= n`` (the example's real keys) a query reads all ``n`` keys: full attention. A step
  holds ``min(K, k)`` slots for the padded encoder length ``k`` (a shape, never the data); when ``n < K`` the
  slots that hold padded positions are masked.
* **Empty memory**: an example without real keys has output 0, as in every mechanism.
* **Gradient**: the choice of keys is a hard top-k without gradient; the gradient flows through the softmax over
  the selected keys to the queries, those keys and their values.

Costs per head: a decoder step scores every key and selects, ``O(k·d + k·log K)``, then the softmax over ``K``
keys, ``O(K·d)``. The exact search has two decoder steps, chosen by device (:mod:`srformer.attention.step_choice`),
which read the same state and keys and give the same output: on an accelerator a fixed sequence of 13 operator calls
per layer whatever ``k``, without a host sync (one product for the scores, one ``topk`` of order keys that settles
ties by position, :func:`~srformer.attention.selection.ranked_top`, one indexing each of keys, values and masks, one
``scaled_dot_product_attention``; a GPU's eager step costs its launches); on the CPU, where that sequence costs more
time, the step of the parallel path (:func:`~srformer.attention.selection.top_positions` and ``index_select``
gathers). The parallel (training) path scores all ``q x k`` pairs, ``O(q·k·d)`` like full attention, so it saves
no training time; it then reads ``K`` keys per query. The state is the projected keys and values (``2·k·d`` numbers,
growing with the input, plus a float64 order-key term and a mask per position; no lean layout: the keys must all be
kept to be searched). With an index the layers keep nothing of the input's length; the index holds the encoder
output once (``k·D`` float32 numbers, ``D`` = d_model, plus ``sqrt(k)`` centroids for ``"ivf"``), and a step costs
the search (``O(k·D)`` per query and head flat; about ``(probes·k/lists + lists)·D`` ivf) plus ``O(K·D·d)`` to
project the retrieved rows.
"""

from __future__ import annotations

import weakref
from dataclasses import dataclass
from typing import TYPE_CHECKING, ClassVar

import torch
from torch.nn import functional as F

from srformer.attention.base import ProjectRows
from srformer.attention.content import (
    ContentSparseCrossAttention,
    ContentState,
    content_base_state,
    gather_rows,
    slot_softmax,
)
from srformer.attention.key_clusters import cluster_keys, cluster_sums, heads_side_by_side, tail_mix, tail_weights
from srformer.attention.knn_index import INDEX_KINDS, EncoderIndex, build_encoder_index, faiss_available, require_faiss
from srformer.attention.knn_loki import (
    LOKI_INDEX,
    LokiKNNState,
    LokiStepIndices,
    loki_basis,
    loki_indices,
    loki_positions,
    loki_state,
    loki_step,
    stored_channels,
)
from srformer.attention.knn_rows import ROWS_INDEX, RowsKNNState, rows_state, rows_step
from srformer.attention.projection import HeadProjection
from srformer.attention.schedule import kept_per_shape, real_lengths
from srformer.attention.segmented import cast
from srformer.attention.selection import position_order, ranked_top, top_positions
from srformer.attention.state import CrossAttentionState, accumulation_dtype, autocast_off, extend, tensor_version
from srformer.attention.step_choice import step_kind
from srformer.core import MechanismSettings, integer_setting

if TYPE_CHECKING:
    from srformer.core import SRformerConfig

#: ``K`` when ``top_keys`` is None.
DEFAULT_TOP_KEYS = 32
#: The shortest input searched through the index when ``index_min_keys`` is None (tokens).
DEFAULT_INDEX_MIN_KEYS = 16384
#: IVF cells scanned per query when ``index_probes`` is None.
DEFAULT_INDEX_PROBES = 32
#: ``r``, the principal channels ``knn_index="loki"`` reads per query and head, when ``index_rank`` is None.
DEFAULT_INDEX_RANK = 12
#: ``C``, the candidates ``knn_index="loki"`` scores exactly per head, when ``index_candidates`` is None.
DEFAULT_INDEX_CANDIDATES = 256
#: Pages read per head by ``knn_index="loki"`` with ``index_page`` when ``index_pages`` is None.
DEFAULT_INDEX_PAGES = 256
#: The values of ``knn_index`` besides None: faiss's index kinds and the rows of the encoder output.
KNN_INDEXES = (*INDEX_KINDS, ROWS_INDEX, LOKI_INDEX)


@dataclass(frozen=True)
class KNNSettings(MechanismSettings):
    """The settings of the ``knn`` variant (``SRformerConfig(variant='knn', top_keys=...)``).

    Attributes:
        top_keys: ``K``, the encoder keys every decoder query reads in every head: those with the largest
            ``Q_t . K_j``. An integer >= 1; ``K >= n`` reads all ``n`` real keys (full attention). None (default):
            32, the number of neighbours Memorizing Transformers (Wu et al. 2022) retrieve per query and head.
            Unlimiformer's own default retrieves as many keys as the model's context window (1024 for BART), which
            is full attention on any input that fits that window; 32 keeps the read sparse on inputs of hundreds
            of tokens and more.

        knn_index: None (default): exact search in torch. ``"flat"`` (exhaustive) or ``"ivf"`` (approximate):
            generation from inputs of at least ``index_min_keys`` real tokens searches a faiss index of the encoder
            output (module docstring; ``pip install 'srformer[index]'``). ``"rows"``: generation from inputs
            padded to at least ``index_min_keys`` tokens searches the encoder output's rows exhaustively in torch,
            on their own device, keeping no keys or values (:mod:`srformer.attention.knn_rows`). ``"loki"``: the
            same, but each head first scores every key on a few channels of its keys' principal basis and reads only
            the ``index_candidates`` best rows (:mod:`srformer.attention.knn_loki`). A runtime option.
        index_min_keys: the shortest input searched through the index, in real tokens (the longest of the batch;
            ``"rows"``: the padded length, which needs no host read); shorter ones are searched exactly. None:
            16,384. A runtime option.
        index_lists: IVF cells per input; None: ``round(sqrt(n))`` for ``n`` real tokens. A runtime option.
        index_probes: IVF cells scanned per query (more: closer to exact, slower). None: 32. A runtime option.
        index_rank: ``knn_index="loki"``: ``r``, the channels of each head's principal basis its first stage reads
            per query (of the ``min(head_dim, 2r)`` kept; more: closer to exact, more bytes read). None: 12. A
            runtime option.
        index_candidates: ``knn_index="loki"``: ``C``, the keys per head scored exactly in its second stage, of
            which the top ``K`` are read (``C >= k``: the exact search). None: 256. A runtime option.
        index_page: ``knn_index="loki"``: ``b``, keys per page (:mod:`srformer.attention.loki_pages`): each head's
            keys sorted once into pages of ``b``, and the first stage reads the ``index_pages`` pages of best bound
            only. None (default): no pages, the first stage reads every key. A runtime option.
        index_pages: with ``index_page``: ``P``, the pages per head whose keys the first stage scores (``P·b >= k``:
            every key, as without pages). None: 256. A runtime option.
        index_key_rank: with ``index_page``: ``r'``, the channels the keys of the pages read are scored on, the
            query's largest first (capped at the ``min(d, 2r)`` kept); the pages' bounds keep ``index_rank``'s
            ``r``. More channels rank the candidates closer to their exact scores, so fewer candidates
            (``index_candidates``) find the same top ``K`` (:mod:`srformer.attention.loki_pages`). None: ``r``. A
            runtime option.
        tail_clusters: ``knn_index="loki"``: ``C``, clusters of the encoder positions built once per input and
            layer, shared by its heads; every key a query does not read enters its softmax at the score of the mean
            of its cluster's keys not read (:mod:`srformer.attention.key_clusters`). None (default): the keys not
            read are dropped. Applies where the two-stage search does (at least ``index_min_keys`` keys). A runtime
            option.
    """

    top_keys: int | None = integer_setting(1, None, "the keys each decoder query reads")
    knn_index: str | None = None
    index_min_keys: int | None = integer_setting(1, None, "the shortest input searched through the index")
    index_lists: int | None = integer_setting(1, None, "the IVF cells per input")
    index_probes: int | None = integer_setting(1, None, "the IVF cells scanned per query")
    index_rank: int | None = integer_setting(1, None, "the principal channels read per query")
    index_candidates: int | None = integer_setting(1, None, "the candidates scored exactly per head")
    index_page: int | None = integer_setting(1, None, "the keys per page of the first stage")
    index_pages: int | None = integer_setting(1, None, "the pages per head the first stage reads")
    index_key_rank: int | None = integer_setting(1, None, "the channels the keys of the pages read are scored on")
    tail_clusters: int | None = integer_setting(1, None, "the clusters of keys that stand for the keys not read")

    runtime: ClassVar[tuple[str, ...]] = (
        "knn_index", "index_min_keys", "index_lists", "index_probes", "index_rank", "index_candidates", "index_page",
        "index_pages", "index_key_rank", "tail_clusters",
    )

    def validate(self, config: SRformerConfig) -> None:
        """The integer settings' ranges, and ``knn_index`` one of None, ``"flat"``, ``"ivf"``, ``"rows"``, ``"loki"``.

        Raises:
            ValueError: naming the setting.
        """
        super().validate(config)
        if self.knn_index is not None and self.knn_index not in KNN_INDEXES:
            raise ValueError(
                f"`knn_index` must be None (exact search) or one of {KNN_INDEXES}, got {self.knn_index!r}."
            )
        if self.tail_clusters is not None and self.knn_index != LOKI_INDEX:
            raise ValueError(
                f"`tail_clusters` needs `knn_index={LOKI_INDEX!r}` (the two-stage search whose keys not read it "
                f"estimates), got `knn_index={self.knn_index!r}`. Set knn_index='loki' or drop tail_clusters."
            )
        if self.index_key_rank is not None and self.index_page is None:
            raise ValueError(
                f"`index_key_rank` ({self.index_key_rank}) scores the keys of the pages read: it needs `index_page`. "
                f"Set index_page (for example 16) or drop index_key_rank."
            )
        if self.index_page is not None:
            pages, top = self.resolved_index_pages(config), self.resolved_top_keys(config)
            if (pages - 1) * self.index_page < top:
                raise ValueError(
                    f"`index_pages` ({pages}) less one, times `index_page` ({self.index_page}), must be at least "
                    f"`top_keys` ({top}): the pages read must hold the keys a query reads even when one of them is "
                    f"the last, partly empty page. Read more pages or make them larger."
                )

    def resolved_top_keys(self, config: SRformerConfig) -> int:
        """``K``: ``top_keys``, or 32 when it is None."""
        return self.top_keys if self.top_keys is not None else DEFAULT_TOP_KEYS

    def resolved_index_min_keys(self, config: SRformerConfig) -> int:
        """``index_min_keys``, or 16,384 when it is None."""
        return self.index_min_keys if self.index_min_keys is not None else DEFAULT_INDEX_MIN_KEYS

    def resolved_index_probes(self, config: SRformerConfig) -> int:
        """``index_probes``, or 32 when it is None."""
        return self.index_probes if self.index_probes is not None else DEFAULT_INDEX_PROBES

    def resolved_index_rank(self, config: SRformerConfig) -> int:
        """``index_rank``, or 12 when it is None."""
        return self.index_rank if self.index_rank is not None else DEFAULT_INDEX_RANK

    def resolved_index_candidates(self, config: SRformerConfig) -> int:
        """``index_candidates``, or 256 when it is None."""
        return self.index_candidates if self.index_candidates is not None else DEFAULT_INDEX_CANDIDATES

    def resolved_index_pages(self, config: SRformerConfig) -> int:
        """``index_pages``, or 256 when it is None."""
        return self.index_pages if self.index_pages is not None else DEFAULT_INDEX_PAGES

    def resolved_index_key_rank(self, config: SRformerConfig) -> int:
        """``index_key_rank``, or ``index_rank`` (resolved) when it is None."""
        return self.index_key_rank if self.index_key_rank is not None else self.resolved_index_rank(config)

    def whole_input_length(self, config: SRformerConfig) -> int:
        """``K``: an input of at most ``K`` real tokens is read whole (with ``knn_index="ivf"``, whose search is
        approximate, also shorter than ``index_min_keys``)."""
        top = self.resolved_top_keys(config)
        return min(top, self.resolved_index_min_keys(config) - 1) if self.knn_index == "ivf" else top


@dataclass(kw_only=True)
class KNNState(ContentState):
    """The exact search's state: :class:`~srformer.attention.content.ContentState` (keys, and values zero at padded
    positions) plus what the accelerator step reads besides them (:meth:`KNNCrossAttention.accelerator_step`); the
    CPU step and the parallel path read the base's fields only.

    Attributes:
        rank_order: (B, 1, k) float64, each position's term of the order keys
            (:func:`~srformer.attention.selection.position_order`): ``-inf`` at padding.
        key_bias: (B, k) in the keys' dtype, each key's additive attention mask: 0 at real positions, the dtype's
            lowest number at padding.
    """

    rank_order: torch.Tensor
    key_bias: torch.Tensor


@dataclass(kw_only=True)
class IndexedKNNState(CrossAttentionState):
    """The generation state of ``knn`` searching an index (``knn_index`` set, a long input): nothing of the input's
    length. ``num_segments`` is 1.

    Attributes:
        slot: (B,) long, each row's entry in :attr:`index` (reordered with the beams like every tensor field).
        index: the batch's :class:`~srformer.attention.knn_index.EncoderIndex`, shared by every layer.
        projection: the layer's key/value projections per head (views of its weights).
    """

    slot: torch.Tensor
    index: EncoderIndex
    projection: HeadProjection

    is_lean: ClassVar[bool] = True
    reads_encoder_rows: ClassVar[bool] = True

    def anchors(self) -> tuple[torch.Tensor, torch.Tensor]:  # noqa: D102 - see the base class
        return self.lengths, self.slot

    def shared(self) -> tuple[object, int]:
        """The index, shared by every layer, and its bytes."""
        return self.index, self.index.nbytes


class _SharedIndex:
    """The index of the last encoder output it was asked for, found again by the other layers of the same forward
    pass (one index per input, not per layer). It holds the encoder output and the index weakly: the index lives
    as long as a layer's state holds it."""

    def __init__(self) -> None:
        self._entry: tuple[weakref.ref, int, tuple, torch.Tensor | None, weakref.ref] | None = None

    def get(
        self, encoder_states: torch.Tensor, key_valid: torch.Tensor | None, settings: tuple[str, int | None, int]
    ) -> EncoderIndex:
        """The index of ``encoder_states`` (B, k, D) with ``key_valid`` and ``(kind, lists, probes)``."""
        entry = self._entry
        if entry is not None:
            states_ref, version, known, mask, index_ref = entry
            index = index_ref()
            if (
                index is not None and states_ref() is encoder_states and version == tensor_version(encoder_states)
                and known == settings and _same_mask(mask, key_valid)
            ):
                return index
        index = build_encoder_index(encoder_states, key_valid, *settings)
        mask_copy = None if key_valid is None else key_valid.detach().clone()
        built = tensor_version(encoder_states)
        self._entry = (weakref.ref(encoder_states), built, settings, mask_copy, weakref.ref(index))
        return index


def _same_mask(known: torch.Tensor | None, key_valid: torch.Tensor | None) -> bool:
    """Whether two key masks (None: every key real) are the same mask."""
    if known is None or key_valid is None:
        return known is key_valid
    return known.shape == key_valid.shape and torch.equal(known, key_valid)


_SHARED_INDEX = _SharedIndex()


class KNNCrossAttention(ContentSparseCrossAttention):
    """The ``knn`` variant for one decoder layer (see the module docstring and
    :class:`~srformer.attention.content.ContentSparseCrossAttention`).

    Args:
        config: SRformer settings with ``variant='knn'`` (``top_keys``).
        head_dim: ``d``, size of one attention head.
        scale: the wrapped model's attention scale, used by the softmax.

    Attributes:
        top_keys: ``K``, the keys a query reads.
    """

    def __init__(self, config: SRformerConfig, head_dim: int, scale: float = 1.0) -> None:
        super().__init__(config, head_dim, scale)
        self.top_keys = config.resolved_top_keys()
        self._indices: dict[tuple[int, int, torch.device], tuple[torch.Tensor, torch.Tensor]] = {}  # _step_indices
        self._loki: dict[tuple, LokiStepIndices] = {}  # _loki_indices

    def configure(self, config: SRformerConfig) -> None:
        """Use ``config`` (see the base class); with ``knn_index`` set, faiss must be installed.

        Raises:
            ImportError: for ``knn_index="flat"``/``"ivf"`` without faiss, naming the extra to install (``"rows"``
                needs none).
        """
        if config.knn_index in INDEX_KINDS and not faiss_available():
            require_faiss()
        super().configure(config)

    def indexed_state(
        self, encoder_states: torch.Tensor, key_valid: torch.Tensor | None, projection: HeadProjection
    ) -> IndexedKNNState | RowsKNNState | LokiKNNState | None:
        """The generation state that searches the encoder output's index, when ``knn_index`` is set and the batch's
        longest input has at least ``index_min_keys`` real tokens; None otherwise (the exact state is built). The
        index is built once per input, for the first layer that asks, and shared by the others.

        Args:
            encoder_states: (B, k, D) the encoder output.
            key_valid: (B, k) bool, True at real positions, or None.
            projection: the layer's key/value projections per head.
        """
        settings = self.settings
        if settings.knn_index is None:
            return None
        batch, length, _ = encoder_states.shape
        if settings.knn_index in (ROWS_INDEX, LOKI_INDEX):  # chosen by the padded length: no host read
            if batch == 0 or length < settings.resolved_index_min_keys():
                return None
            if settings.knn_index == LOKI_INDEX:
                return loki_state(encoder_states, key_valid, projection, settings.resolved_index_rank(),
                                  settings.index_page, settings.tail_clusters, scale=self.scale)
            return rows_state(encoder_states, key_valid, projection)
        lengths, _ = real_lengths(key_valid, batch, length, encoder_states.device)
        if batch == 0 or int(lengths.max()) < settings.resolved_index_min_keys():
            return None
        index = _SHARED_INDEX.get(
            encoder_states, key_valid, (settings.knn_index, settings.index_lists, settings.resolved_index_probes())
        )
        return IndexedKNNState(
            lengths=lengths, num_segments=torch.ones_like(lengths), last_segment=torch.full_like(lengths, -1),
            slot=index.slot, index=index, projection=projection.kept(),
        )

    def step(
        self, queries: torch.Tensor, state: CrossAttentionState, *, position: int | torch.Tensor,
        project_rows: ProjectRows | None = None,
    ) -> tuple[torch.Tensor, CrossAttentionState]:
        """One decoder position. From a :class:`KNNState` (the exact search), the step of the queries' device
        (:func:`~srformer.attention.step_choice.step_kind`): on an accelerator :meth:`accelerator_step`, a fixed
        sequence of kernels without a host sync (a GPU's eager step costs its launches); on the CPU the base class's
        step (:meth:`slots`: :func:`~srformer.attention.selection.top_positions`, whose tie check is a free host
        read there, and ``index_select`` gathers), which takes less time there. Both read the same keys and give
        the same output. From an :class:`IndexedKNNState`: each head's top ``K`` positions from the index, their
        keys and values projected from the encoder output (``project_rows`` with (B, H, n) positions), the softmax
        over them. From a :class:`~srformer.attention.knn_rows.RowsKNNState` (``knn_index="rows"``), on every device:
        :func:`~srformer.attention.knn_rows.rows_step`, the exhaustive search of the encoder rows in torch.

        Args:
            queries: (B, H, 1, d) projected decoder query (several positions take the base class's path).
            state: from :meth:`init_state` or :meth:`indexed_state`.
            position: absolute decoder position (unused: the output does not depend on it).
            project_rows: for an indexed state: maps (B, H, n) encoder positions to the projected (keys, values).

        Returns:
            ``(output, state)``: (B, H, 1, d) in the queries' dtype, and the state (unchanged).

        Raises:
            ValueError: for an indexed state without ``project_rows``; for a rows state given several positions;
                for a state of another class.
        """
        if isinstance(state, RowsKNNState):  # LokiKNNState is one too
            if queries.shape[2] != 1:
                raise ValueError("A knn state that reads encoder rows steps one position at a time.")
            if isinstance(state, LokiKNNState):
                settings = self.settings
                rank = settings.resolved_index_rank()
                pages = settings.resolved_index_pages()
                key_rank = settings.resolved_index_key_rank()
                indices = self._loki_indices(queries.shape[0], queries.shape[1], state, rank, pages, key_rank,
                                             queries.device)
                return loki_step(queries, state, self.top_keys, rank, settings.resolved_index_candidates(),
                                 self.scale, indices, pages, key_rank), state
            example, _ = self._step_indices(queries.shape[0], queries.shape[1], queries.device)
            return rows_step(queries, state, self.top_keys, self.scale, example), state
        if not isinstance(state, IndexedKNNState):
            if isinstance(state, KNNState) and queries.shape[2] == 1 and step_kind(queries.device) == "accelerator":
                return self.accelerator_step(queries, state), state
            return super().step(queries, state, position=position, project_rows=project_rows)
        if project_rows is None:
            raise ValueError("An indexed knn state needs `project_rows` to project the retrieved encoder rows.")
        batch, heads, length, head_dim = queries.shape
        hidden = state.projection.hidden_queries(queries).reshape(batch, heads * length, -1)
        positions, found = state.index.search(hidden, state.slot, self.top_keys)
        top = positions.shape[-1]
        keys, values = project_rows(positions.view(batch, heads, length * top))
        keys = keys.view(batch, heads, length, top, head_dim).to(queries.dtype)
        values = values.view(batch, heads, length, top, head_dim).to(queries.dtype)
        probabilities = slot_softmax(queries, keys, found.view(batch, heads, length, top), self.scale)
        return torch.einsum("bhqs,bhqsd->bhqd", probabilities, values), state

    def accelerator_step(self, queries: torch.Tensor, state: KNNState) -> torch.Tensor:
        """One decoder position from an exact state in 13 operator calls whatever ``k``, without a host sync: the
        scores of all ``k`` keys (one batched matrix-vector product), their top ``min(K, k)`` by order key
        (:func:`~srformer.attention.selection.ranked_top`: the tie rule in one ``topk``, padding last), one indexing
        each of the chosen keys, values and masks, and one ``scaled_dot_product_attention``. The same keys and
        output as :meth:`slots` and the parallel path. An example without real keys reads padded slots only, all
        masked alike: the softmax spreads over their values, which the state holds as zero, so its output is 0.

        Args:
            queries: (B, H, 1, d) projected decoder queries.
            state: from :meth:`init_state`.

        Returns:
            (B, H, 1, d) in the queries' dtype.
        """
        keys, values = state.keys, state.values  # (B, H, k, d)
        batch, heads, k, d = keys.shape
        width = min(self.top_keys, k)
        with torch.no_grad(), torch.autocast(device_type=queries.device.type, enabled=False):
            wide = torch.float64 if torch.float64 in (queries.dtype, keys.dtype) else torch.float32
            scores = torch.bmm(cast(keys, wide).reshape(batch * heads, k, d), cast(queries, wide).reshape(-1, d, 1))
            chosen = ranked_top(scores.view(batch, heads, k), state.rank_order, width)  # (B, H, S)
        example, head = self._step_indices(batch, heads, queries.device)
        mask = state.key_bias[example, chosen].view(batch, heads, 1, width)
        dtype = queries.dtype
        return F.scaled_dot_product_attention(
            queries, cast(keys[example, head, chosen], dtype), cast(values[example, head, chosen], dtype),
            attn_mask=cast(mask, dtype), scale=self.scale,
        )

    def _loki_indices(
        self, batch: int, heads: int, state: LokiKNNState, rank: int, pages: int, key_rank: int,
        device: torch.device,
    ) -> LokiStepIndices:
        """The index tensors of :func:`~srformer.attention.knn_loki.loki_step`
        (:func:`~srformer.attention.knn_loki.loki_indices`), made once per shape and device in eager mode and kept
        on the module, made in the graph when traced."""
        doubled, rank, key_rank = state.signed_channels, state.channels_read(rank), state.channels_read(key_rank)
        read = min(pages, state.pages)
        return kept_per_shape(self._loki, (batch, heads, doubled, rank, read, key_rank, state.pages, device),
                              lambda: loki_indices(batch, heads, doubled, rank, read, device, key_rank, state.pages))

    def _step_indices(self, batch: int, heads: int, device: torch.device) -> tuple[torch.Tensor, torch.Tensor]:
        """(B, 1, 1) and (1, H, 1) long, the example and head of each chosen slot (the first two index tensors of the
        accelerator step's indexing): made once per batch size, head count and device in eager mode and kept on the
        module (no operator call per step), made in the graph when traced."""
        return kept_per_shape(self._indices, (batch, heads, device), lambda: (
            torch.arange(batch, device=device).view(batch, 1, 1), torch.arange(heads, device=device).view(1, heads, 1)))

    @autocast_off
    def init_state(self, keys: torch.Tensor, values: torch.Tensor, key_valid: torch.Tensor | None) -> KNNState:
        """The keys and values in encoder order and the real positions (the search runs per query), plus each
        position's order-key term and additive mask, which the accelerator step reads. Both steps read this state.
        The values are zero at padded positions: no softmax gives them weight, except an empty document's
        accelerator step, which averages them.

        Args:
            keys: (B, H, k, d) projected encoder keys.
            values: (B, H, k, d) projected encoder values.
            key_valid: (B, k) bool, True at real encoder positions; None when nothing is padded.

        Returns:
            A :class:`KNNState`; an empty document has no real key (output 0).

        Raises:
            ValueError: for more than ``2^25`` encoder positions (what the order keys keep apart).
        """
        if key_valid is not None:
            real = key_valid.to(device=values.device, dtype=values.dtype)[:, None, :, None]
            if torch.is_grad_enabled() and values.requires_grad:  # mul's out= form has no derivative
                values = values.contiguous() * real
            else:  # written contiguous: one pass over the values, as content_base_state's copy would be
                values = torch.mul(values, real, out=values.new_empty(values.shape))
        base = content_base_state(keys, values, key_valid)
        real = base.key_valid
        bias = torch.zeros(real.shape, dtype=base.keys.dtype, device=real.device)
        return extend(KNNState, base, rank_order=position_order(real[:, None, :]),
                      key_bias=bias.masked_fill_(~real, torch.finfo(bias.dtype).min))

    def finite_check_fields(self, state: CrossAttentionState) -> tuple[str, ...]:
        """Every field but ``rank_order`` (and ``knn_index="loki"``'s view of it, ``flat_order``) and ``key_bias``:
        built from the mask alone (``-inf`` and the lowest number at padding on purpose)."""
        built_from_mask = ("rank_order", "flat_order", "key_bias")
        return tuple(name for name in super().finite_check_fields(state) if name not in built_from_mask)

    def _tail_applies(self, state: CrossAttentionState) -> bool:
        """Whether the parallel path adds the clusters' estimate of the keys not read (``tail_clusters`` set and the
        two-stage search in use, as :meth:`slots` decides)."""
        settings = self.settings
        return (settings.tail_clusters is not None and settings.knn_index == LOKI_INDEX
                and isinstance(state, ContentState) and state.keys.shape[2] >= settings.resolved_index_min_keys())

    def _tail_parts(self, queries: torch.Tensor, state: CrossAttentionState) -> tuple[torch.Tensor, ...]:
        """The parallel path's :func:`~srformer.attention.key_clusters.tail_weights` and what combines them, per
        query: the clusters of the positions, shared by the heads (those of the step's state: the same keys on the
        same principal directions), each head's mean keys and values (differentiable in the keys and values), the
        keys read (:meth:`slots`) and their exact scores. Returns ``(positions, read, unread, assigned,
        cluster_values, counts, read_clusters, read_real)``, flat over examples and heads where
        :func:`~srformer.attention.key_clusters.tail_mix` takes it (N = B·H)."""
        content = self._state(state)
        clusters = self.settings.tail_clusters
        assert clusters is not None
        keys, values, valid = content.keys, content.values, content.key_valid
        batch, heads, length, d = keys.shape
        positions, mask = self.slots(queries, content)  # (B, H, q, S)
        count = positions.shape[2]
        wide = accumulation_dtype(torch.promote_types(queries.dtype, keys.dtype))
        with torch.no_grad(), torch.autocast(device_type=queries.device.type, enabled=False):
            exact_keys = cast(keys.detach(), wide)
            vectors, _ = loki_basis(exact_keys, valid, stored_channels(self.settings.resolved_index_rank(), d))
            # one clustering of the positions for all heads (the step's), each head's keys on its own directions
            assigned = cluster_keys(heads_side_by_side(exact_keys @ vectors), valid, clusters).expand(
                -1, heads, -1)  # (B, H, k), C at padding
        key_sums, counts = cluster_sums(keys.to(queries.dtype), assigned, clusters)
        value_sums, _ = cluster_sums(values.to(queries.dtype), assigned, clusters)
        denominator = counts.clamp_min(1.0)[..., None]
        mean_keys, mean_values = key_sums / denominator, value_sums / denominator  # (B, H, C, d)
        read_keys = gather_rows(keys, positions).to(queries.dtype)  # (B, H, q, S, d)
        lowest = torch.finfo(queries.dtype).min
        scores = (read_keys @ queries.unsqueeze(-1)).squeeze(-1) * self.scale
        scores = scores.masked_fill(~mask, lowest).flatten(0, 1)
        cluster_scores = (queries @ mean_keys.mT * self.scale).flatten(0, 1)  # (N, q, C)
        flat_counts = counts.to(queries.dtype).flatten(0, 1).unsqueeze(1)  # (N, 1, C)
        read_clusters = assigned.masked_fill(assigned == clusters, 0)[:, :, None, :].expand(-1, -1, count, -1)
        read_clusters = read_clusters.gather(-1, positions).flatten(0, 1)
        read_real = mask.to(queries.dtype).flatten(0, 1)
        read, unread = tail_weights(scores, read_clusters, read_real, cluster_scores, flat_counts)
        return (positions, read, unread, assigned, mean_values.flatten(0, 1), flat_counts, read_clusters,
                read_real)

    def _read(self, queries: torch.Tensor, state: CrossAttentionState, dropout: float) -> torch.Tensor:
        """The base class's softmax over the keys read; with ``tail_clusters`` (where it applies), plus the
        clusters' estimate of the keys not read (:mod:`srformer.attention.key_clusters`), whose weights take
        ``dropout`` as the keys read do."""
        if not self._tail_applies(state):
            return super()._read(queries, state, dropout)
        positions, read, unread, _, mean_values, counts, read_clusters, read_real = self._tail_parts(queries, state)
        if dropout > 0.0:
            read, unread = F.dropout(read, p=dropout, training=True), F.dropout(unread, p=dropout, training=True)
        batch, heads, length, count = positions.shape
        values = gather_rows(self._state(state).values, positions).flatten(0, 1)  # (N, q, S, d)
        output = tail_mix(read, unread, read_clusters, read_real, values, mean_values, counts)
        return output.view(batch, heads, length, -1).to(queries.dtype)

    def probabilities(self, queries: torch.Tensor, state: CrossAttentionState) -> torch.Tensor:
        """The base class's attention weights; with ``tail_clusters`` (where it applies), each key not read weighs
        its cluster's estimate and each key read its exact share, so that ``O = A V`` exactly."""
        if not self._tail_applies(state):
            return super().probabilities(queries, state)
        positions, read, unread, assigned, _, _, _, read_real = self._tail_parts(queries, state)
        batch, heads, length, _ = positions.shape
        clusters = unread.shape[-1]
        padded = assigned == clusters
        index = assigned.masked_fill(padded, 0)[:, :, None, :].expand(-1, -1, length, -1)
        weights = unread.view(batch, heads, length, clusters).gather(-1, index).masked_fill(padded[:, :, None, :], 0.0)
        read_weights = (read * read_real).view(positions.shape)
        return weights.scatter(-1, positions, read_weights).to(queries.dtype)

    def slots(self, queries: torch.Tensor, state: CrossAttentionState) -> tuple[torch.Tensor, torch.Tensor]:
        """The top ``K`` real keys of every query by ``Q_t . K_j`` (ties: the earlier position); with
        ``knn_index="loki"`` and at least ``index_min_keys`` keys, the top ``K`` of the ``index_candidates`` best by
        low-rank score (:func:`~srformer.attention.knn_loki.loki_positions`), the keys generation reads.

        Args:
            queries: (B, H, q, d) projected decoder queries.
            state: a :class:`~srformer.attention.content.ContentState`.

        Returns:
            ``(positions, mask)``: (B, H, q, min(K, k)), positions ascending; the mask keeps the ``min(K, n)`` real
            ones.
        """
        content = self._state(state)
        width = min(self.top_keys, content.keys.shape[2])
        settings = self.settings
        if settings.knn_index == LOKI_INDEX and content.keys.shape[2] >= settings.resolved_index_min_keys():
            # the two stages of the generation step, so that teacher forcing and training read what it reads
            wide = accumulation_dtype(torch.promote_types(queries.dtype, content.keys.dtype))
            positions = loki_positions(queries, cast(content.keys, wide), content.key_valid,
                                       settings.resolved_index_rank(), settings.resolved_index_candidates(),
                                       self.top_keys, settings.index_page, settings.resolved_index_pages(),
                                       settings.resolved_index_key_rank())
            batch, heads, length, _ = positions.shape
            valid = content.key_valid[:, None, None, :].expand(batch, heads, length, -1)
            return positions, valid.gather(-1, positions)
        with torch.no_grad(), torch.autocast(device_type=queries.device.type, enabled=False):
            wide = accumulation_dtype(torch.promote_types(queries.dtype, content.keys.dtype))
            scores = torch.matmul(queries.detach().to(wide), content.keys.detach().to(wide).transpose(-1, -2))
            positions = top_positions(scores, content.key_valid[:, None, None, :], width)
        batch, heads, length, _ = positions.shape
        valid = content.key_valid[:, None, None, :].expand(batch, heads, length, -1)
        return positions, valid.gather(-1, positions)
