"""SRformer settings: which cross-attention variant to use and its hyper-parameters.

The settings are stored inside the Hugging Face model config (``config.srformer``) so that
``model.save_pretrained(dir)`` followed by :func:`srformer.from_pretrained` rebuilds the same
converted model.
"""

from __future__ import annotations

from collections.abc import Callable, Iterable, Mapping, Sequence
from dataclasses import asdict, dataclass, fields, replace

from srformer.attention.raf import NEURONS
from srformer.attention.registry import (
    ABLATIONS,
    LEAN_VARIANTS,
    NAMED_SETTINGS,
    REGISTRY,
    SEGMENT_FREE_VARIANTS,
    VARIANTS,
    ablation_owner,
)

# The variant names and their capabilities live in the registry (srformer.attention.registry, one entry
# per mechanism with its paper, module, float64 reference and costs); these names are re-exported here:
#: ``VARIANTS``: every cross-attention variant (``full``, ``segmented``, ``srformer``, the paper's
#: baselines ``xl``, ``longt5``, ``linear``; docs/design.md, "Baselines and ablations"; and the mechanisms
#: of the efficient-transformer literature, docs/design.md, "Mechanisms of the efficient-transformer literature").
#: ``ABLATIONS``: the ablations of ``srformer`` (paper Table 3): ``recurrent_only`` (I), ``no_norm`` (II),
#: ``no_raf`` (III), ``segment_products`` (IV).
#: ``SEGMENT_FREE_VARIANTS``: variants without segments (``segment_size`` does not change them).
#: ``LEAN_VARIANTS``: variants whose generation state may use the lean layout (``lean_cache=True``).
#: ``NAMED_SETTINGS``: names for comparisons (``srformer compare --variants``): every variant, the
#: ablations (``ablation-I`` ... ``ablation-IV``) and the learnable mix of Eq. 10 (``srformer-sigma``).
__all__ = [
    "ABLATIONS", "LEAN_VARIANTS", "NAMED_SETTINGS", "SEGMENT_FREE", "SEGMENT_FREE_VARIANTS", "VARIANTS",
    "SRformerConfig", "check_variant_settings", "named_config", "setting_label",
]


@dataclass(frozen=True)
class SRformerConfig:
    """Hyper-parameters of segmented recurrent cross attention.

    Args:
        variant: one of :data:`VARIANTS`.
        segment_size: ``s``, the number of encoder positions (tokens) in one segment. The number
            of segments of an example is ``m = ceil(k / s)`` where ``k`` is that example's real
            (unpadded) encoder length. A document shorter than ``s`` tokens is one segment, in
            which case ``segmented`` attention equals full attention.
        target_length: ``T``, the fixed decoder length (tokens) used by the segment schedule
            ``i(t) = min(floor(t * m / T), m - 1)`` (paper Sec. 3.1, Algorithm 1). The same value
            is used in training and in generation (see docs/design.md, "Segment schedule").
        raf_leak_init: initial value of the RAF leak (Appendix A.2 pseudo code: 1.0).
        raf_threshold_init: initial value of the RAF threshold (Appendix A.2: 0.1).
        raf_linear_init_scale: factor applied to PyTorch's default initialisation of the RAF linear
            layer ``W``. 1.0 is the pseudo code of Appendix A.2. The default, 1e-3, was chosen by
            measurement: ``P = K^T V - K_i^T V_i`` sums hundreds of positions, so with the default
            init the recurrent term is a large random perturbation right after conversion (a
            trained t5-tiny full-attention model on ACLSum validation: loss 5.92; converted to
            segmented: 6.04; to srformer with scale 1.0: 9.00; with 1e-3: 6.04, while 25% of the
            RAF units still fire, so ``W``, leak and threshold get gradients). See docs/design.md,
            "Initialisation".
        raf_neuron: ``"paper"`` (default: Appendix A.2's neuron, ``relu(mem / threshold - 1)``) or
            ``"two_sided"``, a change beyond the paper that also fires on negative membranes and keeps the sign
            (``sign(p) * relu(|p| - 1)``, ``p = mem / threshold``; reset ``mem -= threshold * sign(mem)``), so a
            signed memory can pass the neuron (:func:`srformer.attention.raf.update`; ``docs/design.md``,
            "Two-sided neuron"). ``srformer`` only.
        raf_surrogate_slope: None (default: the neuron's true derivative, zero wherever it does not fire) or
            the slope ``beta`` of a surrogate derivative ``sigmoid(beta * e)``, ``e`` the distance past the
            threshold, used in backward only (forward values unchanged; :func:`srformer.attention.raf.activation`;
            ``docs/design.md``, "Surrogate gradient"). A change beyond the paper. ``srformer`` only.
        norm_eps: epsilon added to ``norm(K)`` before dividing (Eq. 13).
        kv_clamp: if set, clamp ``K^T V`` and every ``K_j^T V_j`` to ``[-kv_clamp, kv_clamp]``
            (the BART authors used 2.0). ``None`` (default) disables the clamp: masking is exact.
        recurrence: if False, the ``srformer`` variant drops ``O_R`` (used by the reduction test
            and as an ablation switch).
        ablation: None, or one of :data:`ABLATIONS` (``srformer`` only): the ablations of Table 3.
        mix_init: None (default) for the plain sum ``O = O_S + O_R`` of Eq. 11; a value in (0, 1)
            turns on the learnable mix of Eq. 10, ``O = sigma * O_S + (1 - sigma) * O_R``, with one
            scalar ``sigma = sigmoid(a)`` per layer initialised to ``mix_init`` (``srformer`` only).
        window_size: ``w``, the number of encoder positions of the ``window`` variant's sliding window
            (Beltagy et al. 2020), centred on the centre of the scheduled segment: decoder position ``t``
            attends the real positions ``i(t)*s + floor(s/2) - floor(w/2) .. + w - 1`` (``docs/design.md``,
            "Sliding window"). At least ``segment_size`` (the window then holds the whole scheduled
            segment). None (default): ``3 * segment_size`` (the scheduled segment and one neighbour on each
            side). ``window`` only.
        stride: ``l``, the stride of the ``strided`` variant (Child et al. 2019): besides segment ``i(t)``
            a query attends every real position ``p`` with ``p mod l = l - 1``. At least 2. None
            (default): ``segment_size`` (the last position of every segment). ``strided`` only.
        num_buckets: ``b``, the number of LSH buckets of the ``reformer`` variant (Kitaev et al. 2020, Sec. 2:
            ``h(x) = argmax([xR; -xR])`` with ``R`` of shape ``(d, b/2)``). Even, at least 2. None (default): 8
            (Reformer sizes ``b`` so that a bucket holds about 64 keys, ``b = 8`` at 512 encoder tokens).
            ``reformer`` only.
        hash_rounds: the number of independent hash rounds of the ``reformer`` variant (Sec. 2 "multi-round LSH
            attention"); a query's rounds are combined as one softmax over the keys each round gives it
            (``srformer.attention.reformer``). At least 1. None (default): 1. ``reformer`` only.
        chunk_size: ``w``, the chunk length of the ``reformer`` variant (Sec. 2 "sorting and chunking"): a query
            reads, per round, at most the ``2w`` keys of two consecutive chunks of the bucket-sorted keys. At
            least 1. None (default): 64 (Reformer's chunk length; with ``b = 8`` at 512 encoder tokens a bucket
            holds about one chunk). ``reformer`` only.
        num_clusters: ``c``, the number of k-means centroids of the ``routing`` variant (Roy et al. 2021, Sec. 4).
            At least 1. None (default): 8 (the paper uses about ``sqrt(n)`` clusters: 8 at 64 tokens, a few
            dozen at thousands; with the default ``cluster_size`` a step reads ``ceil(n / c)`` keys, so more
            clusters make a step cheaper). ``routing`` only.
        cluster_size: ``w``, the number of keys in every cluster of the ``routing`` variant (balanced clusters:
            each centroid takes its ``w`` nearest real keys; a query reads the ``w`` keys of its centroid). At
            least 1. None (default): ``ceil(n / c)`` for an example with ``n`` real encoder keys (the paper's
            balanced ``n / c``: as many cluster places as keys, so every key can be read), held in
            ``ceil(k / c)`` places for the padded length ``k``; an example's clusters depend on its own keys only,
            not on the padding of its batch. ``routing`` only.
        centroid_decay: ``lambda`` of the ``routing`` centroids' moving average (mini-batch k-means), in [0, 1).
            None (default): 0.999 (a slow average over about 1000 training steps). ``routing`` only.
        content_seed: seed of the random draws of the content-based variants (``reformer``'s rotations,
            ``routing``'s initial centroids), stored with the model as a buffer. A non-negative integer. None
            (default): 0. ``reformer`` and ``routing`` only.
        num_global_tokens: ``g``, the global tokens of the ``bigbird`` variant (Zaheer et al. 2020, Sec. 2,
            BigBird-ITC): the first ``g`` real encoder positions, attended by every decoder position. At least
            1. None (default): ``2 * segment_size`` (BigBird-ITC's two global blocks). ``bigbird`` only.
        num_random_blocks: ``r``, the random segment blocks each scheduled segment attends in ``bigbird``. At
            least 0 (0: segment plus global tokens, ITC without its random part). None (default): 3 (the
            paper's ``r = 3``). ``bigbird`` only.
        random_blocks_seed: the seed of ``bigbird``'s random blocks: the blocks of segment ``i`` of an input
            of ``m`` segments are a fixed function of ``(seed, i, m)`` (``docs/design.md``, "BigBird"), so a
            saved and reloaded model attends the same blocks. A non-negative integer below ``2**32``. None
            (default): 0. ``bigbird`` only.
        compression_rate: ``c``, the compression rate of the ``compressive`` variant (Rae et al. 2020, Sec. 3):
            each segment before ``i(t) - 1`` is kept as ``ceil(s / c)`` compressed rows, the means of ``c``
            consecutive positions (the last window of a segment may be shorter). At least 1 (1: no
            compression). None (default): 4 (our choice: at ``s = 64`` an older segment keeps 16 rows).
            ``compressive`` only.
        max_span: ``S``, the largest span of the ``adaptive`` variant (Sukhbaatar et al. 2019, Sec. 3): a query
            reads the positions at most ``S`` positions outside its scheduled segment. At least 0. None
            (default): ``2 * segment_size``. ``adaptive`` only.
        span_ramp: ``R``, the length of the soft mask's ramp ``m_z(x) = min(max((R + z - x) / R, 0), 1)``. At
            least 1. None (default): ``segment_size``. ``adaptive`` only.
        span_init: the initial span of every head as a fraction of ``S``, ``z = span_init * S``, in [0, 1]. None
            (default): 0.5 (inside the range, so the ramp's keys give ``z`` a gradient from the first step).
            ``adaptive`` only.
        span_nodes: ``k``, the span nodes per level and side of the ``bp`` variant (Ye et al. 2019, Sec. 3): a query
            attends its segment token by token and ``k`` (or ``k + 1``, to align) nodes of each level of a binary
            partition tree over the segments on each side. At least 1. None (default): 2. ``bp`` only.
        projected_length: ``r``, the number of rows the ``linformer`` variant's learned projections ``E, F``
            (Wang et al. 2020, Sec. 4) map the encoder keys and values to. At least 1. None (default): 256, the
            largest projected length of the paper's experiments (Sec. 5: 128 and 256). ``linformer`` only.
        max_source_length: ``N``, the number of columns of ``E, F``: the most real encoder tokens a ``linformer``
            example may have (an example of ``n <= N`` tokens is projected by the first ``n`` columns; a longer
            one raises ``ValueError``). At least 1. None (default): 4096, the longest sequence of the paper's
            experiments (Sec. 5) and of common long-document summarisation inputs; the two projections then hold
            ``2 * 256 * 4096`` numbers per layer. ``linformer`` only.
        num_random_features: ``m``, the number of positive orthogonal random features of the ``performer``
            variant (Choromanski et al. 2021, FAVOR+). At least 1. None (default): ``d * ceil(ln d)`` for head
            size ``d`` (at least ``d``; Theorem 4's ``m = Theta(d log d)``: 320 at d = 64). ``performer`` only.
        random_feature_seed: the seed the ``performer`` features are drawn from (once, at construction; they
            are also kept in the model's state dict, so a reloaded model is the same). A non-negative integer.
            None (default): 0. ``performer`` only.
        compression_stride: ``c``, kernel size and stride of the ``compressed`` variant's convolutions over the
            keys and values (Liu et al. 2018, Sec. 4.2.3): ``n`` real encoder tokens become ``ceil(n / c)`` rows. At
            least 1 (1 keeps every position, each through the learned map). None (default): 3, the paper's.
            ``compressed`` only.
        num_inducing_points: ``I``, the number of learned inducing queries of the ``inducing`` variant (Lee et al.
            2019, Set Transformer): the encoder is summarised into ``I`` rows per head. At least 1. None (default):
            32, the largest number of the paper's experiments. ``inducing`` only.
        strict_schedule: if True, an input with more segments than ``target_length`` raises
            ``ValueError`` instead of warning (such segments are never attended by ``O_S``).
        lean_cache: generation memory mode (beyond the paper). False: each layer caches its
            projected keys/values and the RAF input of every segment. True: each layer keeps only
            ``K^T V``, ``norm(K)`` and the RAF state (about heads x d^2 numbers) and projects the
            current segment's keys/values from the encoder output at every step: less memory,
            more compute per step. Same outputs either way. ``strict_schedule`` and ``lean_cache``
            are runtime options: checkpoints that differ only in them are the same model. The lean
            layout exists for ``segmented``, ``srformer``, ``linear``, ``fastformer``, ``linformer``, ``performer`` and
            ``inducing`` (whose states are always O(heads * d^2), O(heads * d), O(heads * r * d), O(heads * m * d)
            and O(heads * I * d)); the others (``xl``, ``longt5``, ``window``, ...) reject it.

    Raises:
        ValueError: for an unknown ``variant`` or ``ablation``, a non-positive ``segment_size``,
            ``target_length``, ``raf_threshold_init`` or ``norm_eps``, an ablation or ``mix_init``
            with a variant other than ``srformer`` (or with ``recurrence=False``), ``mix_init``
            outside (0, 1) or with ablation I, ``lean_cache`` with a variant without a lean layout, or
            ``window_size`` below ``segment_size`` or with a variant other than ``window``, or ``stride``
            below 2 or with a variant other than ``strided``, or ``num_buckets``/``hash_rounds``/``chunk_size``/
            ``num_clusters``/``cluster_size``/``centroid_decay``/``content_seed`` out of range or with a variant
            that does not read them, or a ``bigbird`` or ``compressive`` setting out of its range or with
            another variant, or an ``adaptive`` setting (``max_span``, ``span_ramp``, ``span_init``) or ``bp``'s
            ``span_nodes`` out of its range or with another variant, or a variant's own setting
            (``projected_length``, ...) that is not a positive integer or is given with another variant.
    """

    variant: str = "srformer"
    segment_size: int = 64
    target_length: int = 128
    raf_leak_init: float = 1.0
    raf_threshold_init: float = 0.1
    raf_linear_init_scale: float = 1e-3
    raf_neuron: str = "paper"
    raf_surrogate_slope: float | None = None
    norm_eps: float = 1e-6
    kv_clamp: float | None = None
    recurrence: bool = True
    ablation: str | None = None
    mix_init: float | None = None
    window_size: int | None = None
    stride: int | None = None
    num_buckets: int | None = None
    hash_rounds: int | None = None
    chunk_size: int | None = None
    num_clusters: int | None = None
    cluster_size: int | None = None
    centroid_decay: float | None = None
    content_seed: int | None = None
    num_global_tokens: int | None = None
    num_random_blocks: int | None = None
    random_blocks_seed: int | None = None
    compression_rate: int | None = None
    max_span: int | None = None
    span_ramp: int | None = None
    span_init: float | None = None
    span_nodes: int | None = None
    projected_length: int | None = None
    max_source_length: int | None = None
    num_random_features: int | None = None
    random_feature_seed: int | None = None
    compression_stride: int | None = None
    num_inducing_points: int | None = None
    strict_schedule: bool = False
    lean_cache: bool = False

    def __post_init__(self) -> None:
        if self.variant not in VARIANTS:
            raise ValueError(
                f"Unknown SRformer variant {self.variant!r}: `variant` must be one of {', '.join(VARIANTS)}."
            )
        if isinstance(self.segment_size, bool) or not isinstance(self.segment_size, int) or self.segment_size < 1:
            raise ValueError(
                f"`segment_size` must be a positive integer number of encoder tokens, got {self.segment_size!r}."
            )
        if isinstance(self.target_length, bool) or not isinstance(self.target_length, int) or self.target_length < 1:
            raise ValueError(
                f"`target_length` must be a positive integer number of decoder tokens, got {self.target_length!r}; "
                "use the length of your longest summaries (e.g. 128)."
            )
        if not self.raf_threshold_init > 0:
            raise ValueError(f"`raf_threshold_init` must be > 0, got {self.raf_threshold_init!r}.")
        if not self.raf_linear_init_scale > 0:
            raise ValueError(f"`raf_linear_init_scale` must be > 0, got {self.raf_linear_init_scale!r}.")
        if self.raf_neuron not in NEURONS:
            raise ValueError(
                f"`raf_neuron` must be one of {', '.join(NEURONS)}, got {self.raf_neuron!r}."
            )
        if self.raf_surrogate_slope is not None and (
            isinstance(self.raf_surrogate_slope, bool) or not self.raf_surrogate_slope > 0
        ):
            raise ValueError(
                f"`raf_surrogate_slope` must be None (the true derivative) or > 0, got {self.raf_surrogate_slope!r}."
            )
        if (self.raf_neuron != "paper" or self.raf_surrogate_slope is not None) and self.variant != "srformer":
            raise ValueError(
                "`raf_neuron` and `raf_surrogate_slope` configure the RAF neuron of variant='srformer'; "
                f"got variant={self.variant!r}. Leave them at their defaults."
            )
        if not self.norm_eps > 0:
            raise ValueError(f"`norm_eps` must be > 0, got {self.norm_eps!r}.")
        if self.kv_clamp is not None and not self.kv_clamp > 0:
            raise ValueError(f"`kv_clamp` must be None or > 0, got {self.kv_clamp!r}.")
        recurrent = REGISTRY[self.variant].capabilities.recurrent_term and self.recurrence
        if self.ablation is not None:
            owner = ablation_owner(self.ablation)  # ValueError for an unknown ablation
            if self.variant != owner or not recurrent:
                raise ValueError(
                    f"`ablation={self.ablation!r}` modifies the recurrent term: use variant={owner!r} with "
                    f"recurrence=True (got variant={self.variant!r}, recurrence={self.recurrence})."
                )
        if self.mix_init is not None:
            if not recurrent:
                raise ValueError(
                    "`mix_init` (the learnable mix of Eq. 10) needs both O_S and O_R: use variant='srformer' "
                    f"with recurrence=True (got variant={self.variant!r}, recurrence={self.recurrence})."
                )
            if not 0.0 < self.mix_init < 1.0:
                raise ValueError(
                    f"`mix_init` is the initial sigma of Eq. 10 and must lie in (0, 1), got {self.mix_init!r}."
                )
            if self.ablation == "recurrent_only":
                raise ValueError(
                    "`mix_init` mixes O_S and O_R; ablation 'recurrent_only' has no O_S. Use one or the other."
                )
        if self.window_size is not None:
            if self.variant != "window":
                raise ValueError(
                    f"`window_size` is the sliding window of variant='window', got variant={self.variant!r}; "
                    "leave window_size=None."
                )
            size = self.window_size
            if isinstance(size, bool) or not isinstance(size, int) or size < self.segment_size:
                raise ValueError(
                    f"`window_size` must be an integer number of encoder tokens >= segment_size "
                    f"({self.segment_size}) so that the window holds the scheduled segment, got {size!r}."
                )
        if self.stride is not None and self.variant != "strided":
            raise ValueError(
                f"`stride` is the stride of variant='strided', got variant={self.variant!r}; leave stride=None."
            )
        if self.variant == "strided":
            stride = self.resolved_stride()
            if isinstance(stride, bool) or not isinstance(stride, int) or stride < 2:
                raise ValueError(
                    f"`stride` (default: segment_size) must be an integer >= 2 (stride 1 would attend every "
                    f"position, full attention), got {stride!r}; set stride=2 or more."
                )
        self._check_content_settings()
        self._check_integer("num_global_tokens", "bigbird", 1, None, "BigBird's global tokens")
        self._check_integer("num_random_blocks", "bigbird", 0, None, "BigBird's random blocks per segment")
        self._check_integer("random_blocks_seed", "bigbird", 0, 2**32 - 1, "the seed of BigBird's random blocks")
        self._check_integer("compression_rate", "compressive", 1, None, "positions per compressed row")
        self._check_integer("max_span", "adaptive", 0, None, "the largest adaptive span, in positions")
        self._check_integer("span_ramp", "adaptive", 1, None, "the soft span mask's ramp, in positions")
        self._check_integer("span_nodes", "bp", 1, None, "span nodes per tree level and side")
        if self.span_init is not None:
            if self.variant != "adaptive":
                raise ValueError(
                    f"`span_init` is a setting of variant='adaptive', got variant={self.variant!r}; "
                    "leave span_init=None."
                )
            number = isinstance(self.span_init, int | float) and not isinstance(self.span_init, bool)
            if not number or not 0.0 <= self.span_init <= 1.0:
                raise ValueError(
                    f"`span_init` (the initial span / max_span) must lie in [0, 1], got {self.span_init!r}."
                )
        for name in ("projected_length", "max_source_length"):
            self._check_positive_setting(name, "linformer")
        self._check_positive_setting("num_random_features", "performer")
        self._check_positive_setting("compression_stride", "compressed")
        self._check_positive_setting("num_inducing_points", "inducing")
        if self.random_feature_seed is not None:
            self._check_positive_setting("random_feature_seed", "performer", minimum=0)
        # ``full`` has no module of its own, so the runtime option has nothing to act on there
        if self.lean_cache and self.variant not in LEAN_VARIANTS and REGISTRY[self.variant].module is not None:
            raise ValueError(
                f"`lean_cache` is implemented for the variants {', '.join(LEAN_VARIANTS)}, not {self.variant!r}; "
                "set lean_cache=False."
            )

    def _check_content_settings(self) -> None:
        """The settings of the content-based variants (``reformer``, ``routing``): owner and range."""
        owners = {
            "num_buckets": ("reformer",), "hash_rounds": ("reformer",), "chunk_size": ("reformer",),
            "num_clusters": ("routing",), "cluster_size": ("routing",), "centroid_decay": ("routing",),
            "content_seed": ("reformer", "routing"),
        }
        for name, variants in owners.items():
            if getattr(self, name) is not None and self.variant not in variants:
                raise ValueError(
                    f"`{name}` is a setting of variant {' or '.join(repr(v) for v in variants)}, got "
                    f"variant={self.variant!r}; leave {name}=None."
                )
        if self.variant == "reformer":
            buckets, rounds = self.resolved_num_buckets(), self.resolved_hash_rounds()
            if _not_int(buckets) or buckets < 2 or buckets % 2:
                raise ValueError(
                    f"`num_buckets` must be an even integer >= 2 (angular LSH uses b/2 rotation columns), "
                    f"got {buckets!r}."
                )
            if _not_int(rounds) or rounds < 1:
                raise ValueError(f"`hash_rounds` must be an integer >= 1, got {rounds!r}.")
            chunk = self.resolved_chunk_size()
            if _not_int(chunk) or chunk < 1:
                raise ValueError(f"`chunk_size` must be an integer >= 1, got {chunk!r}.")
        if self.variant == "routing":
            clusters, decay = self.resolved_num_clusters(), self.resolved_centroid_decay()
            if _not_int(clusters) or clusters < 1:
                raise ValueError(f"`num_clusters` must be an integer >= 1, got {clusters!r}.")
            size = self.cluster_size
            if size is not None and (_not_int(size) or size < 1):
                raise ValueError(f"`cluster_size` must be an integer >= 1 or None (ceil(n / c)), got {size!r}.")
            if isinstance(decay, bool) or not isinstance(decay, int | float) or not 0.0 <= decay < 1.0:
                raise ValueError(
                    f"`centroid_decay` is the moving-average factor lambda and must lie in [0, 1), got {decay!r}."
                )
        seed = self.resolved_content_seed()
        if _not_int(seed) or seed < 0:
            raise ValueError(f"`content_seed` must be a non-negative integer, got {seed!r}.")

    def resolved_num_buckets(self) -> int:
        """``b`` of the ``reformer`` variant: ``num_buckets``, or 8 when it is None."""
        return self.num_buckets if self.num_buckets is not None else 8

    def resolved_hash_rounds(self) -> int:
        """The ``reformer`` variant's hash rounds: ``hash_rounds``, or 1 when it is None."""
        return self.hash_rounds if self.hash_rounds is not None else 1

    def resolved_chunk_size(self) -> int:
        """``w`` of the ``reformer`` variant: ``chunk_size``, or 64 when it is None."""
        return self.chunk_size if self.chunk_size is not None else 64

    def resolved_num_clusters(self) -> int:
        """``c`` of the ``routing`` variant: ``num_clusters``, or 8 when it is None."""
        return self.num_clusters if self.num_clusters is not None else 8

    def resolved_centroid_decay(self) -> float:
        """``lambda`` of the ``routing`` variant: ``centroid_decay``, or 0.999 when it is None."""
        return self.centroid_decay if self.centroid_decay is not None else 0.999

    def resolved_content_seed(self) -> int:
        """The seed of the content-based variants' random draws: ``content_seed``, or 0 when it is None."""
        return self.content_seed if self.content_seed is not None else 0

    def _check_integer(self, name: str, variant: str, minimum: int, maximum: int | None, meaning: str) -> None:
        """Setting ``name`` of ``variant`` only: None, or an integer in ``[minimum, maximum]``.

        Raises:
            ValueError: naming the setting, for another variant or a value out of range.
        """
        value = getattr(self, name)
        if value is None:
            return
        if self.variant != variant:
            raise ValueError(
                f"`{name}` ({meaning}) is a setting of variant={variant!r}, got variant={self.variant!r}; "
                f"leave {name}=None."
            )
        upper = "" if maximum is None else f" and <= {maximum}"
        integer = isinstance(value, int) and not isinstance(value, bool)
        if not integer or value < minimum or (maximum is not None and value > maximum):
            raise ValueError(f"`{name}` ({meaning}) must be an integer >= {minimum}{upper}, got {value!r}.")

    def resolved_global_tokens(self) -> int:
        """``g`` of the ``bigbird`` variant: ``num_global_tokens``, or ``2 * segment_size`` when it is None."""
        return self.num_global_tokens if self.num_global_tokens is not None else 2 * self.segment_size

    def resolved_random_blocks(self) -> int:
        """``r`` of the ``bigbird`` variant: ``num_random_blocks``, or 3 when it is None."""
        return self.num_random_blocks if self.num_random_blocks is not None else 3

    def resolved_random_blocks_seed(self) -> int:
        """The seed of ``bigbird``'s random blocks: ``random_blocks_seed``, or 0 when it is None."""
        return self.random_blocks_seed if self.random_blocks_seed is not None else 0

    def resolved_compression_rate(self) -> int:
        """``c`` of the ``compressive`` variant: ``compression_rate``, or 4 when it is None."""
        return self.compression_rate if self.compression_rate is not None else 4

    def resolved_max_span(self) -> int:
        """``S`` of the ``adaptive`` variant: ``max_span``, or ``2 * segment_size`` when it is None."""
        return self.max_span if self.max_span is not None else 2 * self.segment_size

    def resolved_span_ramp(self) -> int:
        """``R`` of the ``adaptive`` variant: ``span_ramp``, or ``segment_size`` when it is None."""
        return self.span_ramp if self.span_ramp is not None else self.segment_size

    def resolved_span_init(self) -> float:
        """The initial ``z / S`` of the ``adaptive`` variant: ``span_init``, or 0.5 when it is None."""
        return float(self.span_init) if self.span_init is not None else 0.5

    def resolved_span_nodes(self) -> int:
        """``k`` of the ``bp`` variant: ``span_nodes``, or 2 when it is None."""
        return self.span_nodes if self.span_nodes is not None else 2

    def _check_positive_setting(self, name: str, variant: str, minimum: int = 1) -> None:
        """A setting of one variant: None, or an integer ``>= minimum`` with that variant.

        Raises:
            ValueError: naming the setting, for another variant or a value that is not a positive integer.
        """
        value = getattr(self, name)
        if value is None:
            return
        if self.variant != variant:
            raise ValueError(
                f"`{name}` is a setting of variant={variant!r}, got variant={self.variant!r}; leave {name}=None."
            )
        if isinstance(value, bool) or not isinstance(value, int) or value < minimum:
            raise ValueError(f"`{name}` must be an integer >= {minimum}, got {value!r}.")

    def resolved_projected_length(self) -> int:
        """``r`` of the ``linformer`` variant: ``projected_length``, or 256 when it is None."""
        return self.projected_length if self.projected_length is not None else 256

    def resolved_max_source_length(self) -> int:
        """``N`` of the ``linformer`` variant: ``max_source_length``, or 4096 when it is None."""
        return self.max_source_length if self.max_source_length is not None else 4096

    def resolved_feature_seed(self) -> int:
        """The seed of the ``performer`` features: ``random_feature_seed``, or 0 when it is None."""
        return self.random_feature_seed if self.random_feature_seed is not None else 0

    def resolved_compression_stride(self) -> int:
        """``c`` of the ``compressed`` variant: ``compression_stride``, or 3 when it is None."""
        return self.compression_stride if self.compression_stride is not None else 3

    def resolved_inducing_points(self) -> int:
        """``I`` of the ``inducing`` variant: ``num_inducing_points``, or 32 when it is None."""
        return self.num_inducing_points if self.num_inducing_points is not None else 32

    def resolved_window_size(self) -> int:
        """``w`` of the ``window`` variant: ``window_size``, or ``3 * segment_size`` when it is None."""
        return self.window_size if self.window_size is not None else 3 * self.segment_size

    def resolved_stride(self) -> int:
        """``l`` of the ``strided`` variant: ``stride``, or ``segment_size`` when it is None."""
        return self.stride if self.stride is not None else self.segment_size

    def same_model(self, other: SRformerConfig) -> bool:
        """True if ``other`` describes the same model, ignoring the runtime options
        ``strict_schedule`` and ``lean_cache``."""
        return replace(self, strict_schedule=False, lean_cache=False) == replace(
            other, strict_schedule=False, lean_cache=False
        )

    def to_dict(self) -> dict:
        """Plain-JSON form, stored as ``model.config.srformer``."""
        return asdict(self)

    @classmethod
    def from_dict(cls, data: dict) -> SRformerConfig:
        """Inverse of :meth:`to_dict`.

        Raises:
            ValueError: if ``data`` holds keys that are not SRformer settings.
        """
        known = {f.name for f in fields(cls)}
        unknown = sorted(set(data) - known)
        if unknown:
            raise ValueError(f"Unknown SRformer settings {unknown}; known settings are {sorted(known)}.")
        return cls(**data)


def _not_int(value: object) -> bool:
    """True unless ``value`` is an ``int`` (a ``bool`` is not)."""
    return isinstance(value, bool) or not isinstance(value, int)


#: Named settings that do not depend on the segment size (their variant has no segments).
SEGMENT_FREE: frozenset[str] = frozenset(
    name for name, settings in NAMED_SETTINGS.items() if settings["variant"] in SEGMENT_FREE_VARIANTS
)


def named_config(name: str, **settings) -> SRformerConfig:
    """The :class:`SRformerConfig` of a name in :data:`NAMED_SETTINGS`, with extra ``settings``
    (e.g. ``segment_size=16``) applied on top: an explicit setting wins over the named setting's own value
    (``named_config("srformer-surrogate", raf_surrogate_slope=4.0)`` has slope 4, not 2).

    Raises:
        ValueError: for an unknown name (the message lists the known ones), or bad settings.
    """
    if name not in NAMED_SETTINGS:
        raise ValueError(f"Unknown variant name {name!r}: choose from {', '.join(NAMED_SETTINGS)}.")
    return SRformerConfig(**{**NAMED_SETTINGS[name], **settings})


def setting_label(name: str, settings: dict | None = None) -> str:
    """How reports name a named setting run with extra ``settings`` (``srformer compare`` / ``srformer probe
    --setting``): ``"window (window_size=96)"``, or just ``name`` when there are none. Settings are sorted by
    name, so one run's label does not depend on the order of the flags."""
    if not settings:
        return name
    return f"{name} ({', '.join(f'{key}={value}' for key, value in sorted(settings.items()))})"


def check_variant_settings(
    settings: Mapping[str, Mapping], variants: Sequence[str], shapes: Callable[[str], Iterable[tuple[int, int]]]
) -> None:
    """Check the extra settings of a grid (``srformer compare`` / ``srformer probe --setting``) before any training.

    Args:
        settings: ``{name: SRformerConfig keyword arguments}`` per named setting of the grid.
        variants: the grid's named settings.
        shapes: ``(segment_size, target_length)`` pairs (tokens) the grid builds ``name``'s config with.

    Raises:
        ValueError: for a name that is not in ``variants`` (the message names the fix), or when
            :func:`named_config` rejects a name's settings at one of its shapes (the message names the variant and
            suggests the ``VARIANT:`` prefix, which gives a setting to one named setting only).
    """
    for name, extra in settings.items():
        if name not in variants:
            raise ValueError(f"Settings for {name!r}, which is not among the grid's variants ({', '.join(variants)}): "
                             f"add it to the variants, or remove its settings.")
        for segment_size, target_length in shapes(name):
            try:
                named_config(name, segment_size=segment_size, target_length=target_length, **extra)
            except (TypeError, ValueError) as error:
                raise ValueError(
                    f"Variant {name!r} rejects the settings {dict(extra)} at segment size {segment_size}: {error} "
                    "A --setting without a VARIANT: prefix applies to every variant of the run; give a setting to "
                    f"one named setting with --setting VARIANT:NAME=VALUE (e.g. --setting window:window_size=96)."
                ) from None
