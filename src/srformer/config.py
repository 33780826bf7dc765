"""SRformer settings: which cross-attention variant to use and its hyper-parameters.

The settings are stored inside the Hugging Face model config (``config.srformer``) so that
``model.save_pretrained(dir)`` followed by :func:`srformer.from_pretrained` rebuilds the same
converted model.
"""

from __future__ import annotations

from dataclasses import asdict, dataclass, fields, replace

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
    "SRformerConfig", "named_config",
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
            below 2 or with a variant other than ``strided``, or a variant's own setting (``projected_length``,
            ...) that is not a positive integer or is given with another variant.
    """

    variant: str = "srformer"
    segment_size: int = 64
    target_length: int = 128
    raf_leak_init: float = 1.0
    raf_threshold_init: float = 0.1
    raf_linear_init_scale: float = 1e-3
    norm_eps: float = 1e-6
    kv_clamp: float | None = None
    recurrence: bool = True
    ablation: str | None = None
    mix_init: float | None = None
    window_size: int | None = None
    stride: int | None = None
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


#: Named settings that do not depend on the segment size (their variant has no segments).
SEGMENT_FREE: frozenset[str] = frozenset(
    name for name, settings in NAMED_SETTINGS.items() if settings["variant"] in SEGMENT_FREE_VARIANTS
)


def named_config(name: str, **settings) -> SRformerConfig:
    """The :class:`SRformerConfig` of a name in :data:`NAMED_SETTINGS`, with extra ``settings``
    (e.g. ``segment_size=16``) applied on top.

    Raises:
        ValueError: for an unknown name (the message lists the known ones), or bad settings.
    """
    if name not in NAMED_SETTINGS:
        raise ValueError(f"Unknown variant name {name!r}: choose from {', '.join(NAMED_SETTINGS)}.")
    return SRformerConfig(**{**NAMED_SETTINGS[name], **settings})
