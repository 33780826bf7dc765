"""Naive float64 references of every cross-attention mechanism, written straight from their equations.

One module per family (``common``: schedule and per-query driver; ``softmax``; ``linear``;
``srformer`` (and ``srformer-gated``); ``content``: the content-based sparse attentions (``reformer``,
``routing``, ``knn``);
``sparse``: ``bigbird``, ``compressive``, ``adaptive``, ``bp`` and ``block-topk``;
``summary``: the segment-free summaries of the encoder; ``quest``);
the shipped mechanisms' references are re-exported here. Every mechanism's reference lives in this package, where
the registry (:attr:`srformer.core.schema.Mechanism.reference_path`) names it by its module
(``tests/attention/test_registry.py`` checks it).

Each function here computes one mechanism's output one example, one head and one decoder query at
a time, in float64, with Python loops over segments where the equations have them: clarity over
speed. They import nothing from the optimised modules (the mechanisms' modules, ``raf``), so the tests
that compare those modules with these functions compare two independent computations
(``tests/attention/test_variants.py``, ``tests/attention/test_naive.py``).

Every reference has the same signature, so the registry (:mod:`srformer.core.registry`) can hold
one per mechanism::

    reference(queries, keys, values, key_valid, settings, *, scale=1.0, parameters=None, start_position=0)

Args (shared by every reference):
    queries: (B, H, q, d) decoder queries at positions ``start_position .. start_position + q - 1``.
    keys: (B, H, k, d) encoder keys.
    values: (B, H, k, d) encoder values.
    key_valid: (B, k) bool, True at real encoder positions; None when nothing is padded. Padding may
        sit anywhere: an example's real positions, in their order, are its encoder sequence
        (``docs/design.md``, "Padding"), so left and right padding give the same output.
    settings: the :class:`~srformer.config.SRformerConfig` of the mechanism (its variant, schedule
        ``segment_size``/``target_length``, ``norm_eps``, ``kv_clamp``, ``ablation``, ``recurrence``).
    scale: the model's attention scale (T5: 1.0, BART: head_dim^-0.5).
    parameters: the mechanism's learned tensors (and seeded buffers) by their state-dict names in the module
        (SRformer: ``raf.linear.weight`` (d, d), ``raf.leak``, ``raf.threshold``, ``mix_logit``; ``reformer``:
        ``rotations``; ``routing``: ``centroids``). ``raf.leak``, ``raf.threshold`` and ``mix_logit`` default to
        the settings' initial values; ``W`` has no deterministic initial value and must be given (except under
        ablation III, which has no ``W``), nor do ``reformer``'s rotations and ``routing``'s centroids.
    start_position: absolute decoder position ``t`` of the first query.

Returns (every reference): (B, H, q, d) float64.

Raises (every reference): ValueError for settings of another variant, a name in ``parameters`` the
mechanism does not have, or shapes that do not agree.

Notation (``docs/design.md``, "Notation"): one example has ``n`` real encoder positions, ``s`` is
``segment_size``, ``T`` is ``target_length``, ``m = ceil(n / s)`` segments, segment ``j`` holds real
positions ``j*s .. min((j + 1) * s, n) - 1`` and decoder position ``t`` attends segment
``i(t) = min(floor(t * m / T), m - 1)`` (paper Sec. 3.1, Algorithm 1, with the fixed ``T`` of the design).
An example without real positions (an empty document) attends an empty memory: its output is 0.
"""

from srformer.attention.naive.common import (
    QueryFunction,
    num_segments,
    per_query,
    segment_of,
    segment_rows,
    softmax_attention,
    visited_segments,
)
from srformer.attention.naive.content import (
    REFORMER_PARAMETERS,
    ROUTING_PARAMETERS,
    knn_attention,
    reformer_attention,
    routing_attention,
)
from srformer.attention.naive.linear import FASTFORMER_PARAMETERS, fastformer_attention, linear_attention
from srformer.attention.naive.quest import quest_attention
from srformer.attention.naive.softmax import (
    full_attention,
    longt5_attention,
    segmented_attention,
    star_attention,
    strided_attention,
    window_attention,
    xl_attention,
)
from srformer.attention.naive.sparse import (
    ADAPTIVE_PARAMETERS,
    adaptive_attention,
    bigbird_attention,
    bigbird_random_blocks,
    block_topk_attention,
    bp_attention,
    bp_partition,
    compressive_attention,
)
from srformer.attention.naive.srformer import SRFORMER_PARAMETERS, gated_attention, raf_fire, srformer_attention
from srformer.attention.naive.summary import (
    COMPRESSED_PARAMETERS,
    INDUCING_PARAMETERS,
    LINFORMER_PARAMETERS,
    PERFORMER_PARAMETERS,
    compressed_attention,
    inducing_attention,
    linformer_attention,
    performer_attention,
)

__all__ = [
    "ADAPTIVE_PARAMETERS",
    "COMPRESSED_PARAMETERS",
    "FASTFORMER_PARAMETERS",
    "INDUCING_PARAMETERS",
    "LINFORMER_PARAMETERS",
    "PERFORMER_PARAMETERS",
    "SRFORMER_PARAMETERS",
    "REFORMER_PARAMETERS",
    "ROUTING_PARAMETERS",
    "QueryFunction",
    "adaptive_attention",
    "bigbird_attention",
    "bigbird_random_blocks",
    "block_topk_attention",
    "bp_attention",
    "bp_partition",
    "compressive_attention",
    "compressed_attention",
    "fastformer_attention",
    "full_attention",
    "gated_attention",
    "inducing_attention",
    "knn_attention",
    "linear_attention",
    "linformer_attention",
    "longt5_attention",
    "num_segments",
    "per_query",
    "performer_attention",
    "quest_attention",
    "raf_fire",
    "reformer_attention",
    "routing_attention",
    "segment_of",
    "segment_rows",
    "segmented_attention",
    "softmax_attention",
    "srformer_attention",
    "star_attention",
    "strided_attention",
    "visited_segments",
    "window_attention",
    "xl_attention",
]
