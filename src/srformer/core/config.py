"""SRformer settings: which cross-attention variant to use and its hyper-parameters.

The settings are stored inside the Hugging Face model config (``config.srformer``) so that
``model.save_pretrained(dir)`` followed by :func:`srformer.from_pretrained` rebuilds the same
converted model. Public as :mod:`srformer.config` and :mod:`srformer.core`.

A mechanism's own settings class lives in its module; this module finds it through the registry
(:meth:`srformer.core.schema.Mechanism.settings_class`, by import path) and imports it only when it is needed:
the config's own variant's class when a config is built, every registered mechanism's only for a name that is not
the variant's own (an unknown keyword, another mechanism's setting read as an attribute, the flat form of
:meth:`SRformerConfig.from_dict`, :func:`setting_types`).
"""

from __future__ import annotations

from collections.abc import Callable, Iterable, Mapping, Sequence
from dataclasses import dataclass, fields, replace
from functools import lru_cache, partial
from typing import Any

from srformer.core.registry import (
    ABLATIONS,
    LEAN_VARIANTS,
    NAMED_SETTINGS,
    NEURONS,
    REGISTRY,
    SEGMENT_FREE_VARIANTS,
    VARIANTS,
    LiveNames,
    ablation_owner,
    generation,
    mechanism,
)
from srformer.core.settings import MechanismSettings

# The variant names and their capabilities live in the registry (srformer.core.registry, one entry
# per mechanism with its paper, module, float64 reference and costs); these names are re-exported here:
#: ``VARIANTS``: every cross-attention variant the package ships (``full``, ``segmented``, ``srformer``, the paper's
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
    "NEURONS", "RUNTIME_OPTIONS", "SRformerConfig", "check_variant_settings", "check_window_settings",
    "named_config", "setting_label", "setting_types", "settings_suffix",
]


@dataclass(frozen=True, init=False)
class SRformerConfig:
    """Hyper-parameters of segmented recurrent cross attention.

    Args:
        variant: a registered variant (:data:`~srformer.core.registry.REGISTRY`; :data:`VARIANTS` are the shipped ones).
        segment_size: ``s``, the number of encoder positions (tokens) in one segment. The number
            of segments of an example is ``m = ceil(k / s)`` where ``k`` is that example's real
            (unpadded) encoder length. A document shorter than ``s`` tokens is one segment, in
            which case ``segmented`` attention equals full attention.
            ``"auto"``: ``s = ceil(k / target_length)`` for the longest real input ``k`` of each batch
            (:meth:`for_input_length`), so an input of any length has at most ``target_length`` segments; examples
            generated one at a time get their own ``s`` (``docs/long-inputs.md``).
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
        settings: the variant's own settings, an instance of the class its registry entry names
            (:meth:`srformer.core.schema.Mechanism.settings_class`, e.g.
            :class:`srformer.attention.window.WindowSettings` with ``window_size``), or a ``{name: value}`` mapping
            of them. A mechanism without settings of its own holds a plain
            :class:`~srformer.core.settings.MechanismSettings`. The settings may also be given as flat
            keywords, ``SRformerConfig(variant="window", window_size=96)``, and read as attributes
            (``config.window_size``, ``config.resolved_window_size()``); another mechanism's setting reads as None
            (unset), as it did when every setting was a field of this class. Each mechanism's module documents its
            settings and their defaults.
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
        encoder_window: chunked encoding (SLED, Unlimiformer; beyond the paper): an input longer than this many
            tokens is encoded in windows of this size and the windows' middle parts are joined
            (:mod:`srformer.models.chunked_encoding`, ``docs/long-inputs.md``). None (default): the model's own input
            limit (``max_position_embeddings`` for BART-style models, 512 for T5's relative positions). An input
            that fits one window is encoded as before, unchanged. Applies to every variant, ``full`` included
            (``full`` over chunked encodings is SLED).
        window_overlap: share of a window shared with the next, in ``[0, 1)`` (default 0.5, SLED's).
        window_batch_size: windows encoded per encoder call (default 8): more is faster, less needs less memory.
            ``encoder_window``, ``window_overlap`` and ``window_batch_size`` are runtime options, like ``lean_cache``.

    Raises:
        ValueError: for an unknown ``variant`` or ``ablation``, a non-positive ``segment_size``,
            ``target_length``, ``raf_threshold_init`` or ``norm_eps``, an ablation or ``mix_init``
            with a variant other than ``srformer`` (or with ``recurrence=False``), ``mix_init``
            outside (0, 1) or with ablation I, ``lean_cache`` with a variant without a lean layout, a setting of
            another mechanism (``window_size`` with ``variant="strided"``; the message names its variant), or a
            setting out of its range (its mechanism's :meth:`~srformer.core.settings.MechanismSettings.validate`).
        TypeError: for a keyword that is neither a field nor a setting of any registered mechanism.
    """

    variant: str = "srformer"
    segment_size: int | str = 64
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
    settings: MechanismSettings = MechanismSettings()
    strict_schedule: bool = False
    lean_cache: bool = False
    encoder_window: int | None = None
    window_overlap: float = 0.5
    window_batch_size: int = 8

    def __init__(
        self,
        variant: str = "srformer",
        *,
        settings: MechanismSettings | Mapping[str, Any] | None = None,
        **keywords: Any,
    ) -> None:
        # The shared fields come from ``keywords`` (or their defaults); what is left are the variant's own settings,
        # given flat (``window_size=96``), merged over ``settings``.
        set_field = object.__setattr__  # the dataclass is frozen
        set_field(self, "variant", variant)
        for name, default in _SHARED_DEFAULTS.items():
            set_field(self, name, keywords.pop(name, default))
        rest = _foreign(variant, keywords)
        unknown = sorted(rest - set(_setting_owners())) if rest else []
        if unknown:
            raise TypeError(f"SRformerConfig got an unexpected keyword argument {unknown[0]!r}.")
        self._check_shared()
        set_field(self, "settings", self._variant_settings(settings, keywords))
        # with segment_size="auto" the mechanism settings are checked here as for s = 2 tokens, and again for each
        # input's own s when it is resolved (for_input_length)
        self.settings.validate(self if self.segment_size != AUTO else replace(self, segment_size=2))
        # ``full`` has no module of its own, so the runtime option has nothing to act on there
        if self.lean_cache and self.variant not in LEAN_VARIANTS and REGISTRY[self.variant].module is not None:
            raise ValueError(
                f"`lean_cache` is implemented for the variants {', '.join(LEAN_VARIANTS)}, not {self.variant!r}; "
                "set lean_cache=False."
            )

    def _check_shared(self) -> None:
        """The checks of the shared fields (everything but ``settings``)."""
        mechanism(self.variant)  # raises ValueError for an unregistered variant, naming the registered ones
        if self.segment_size != AUTO and (
            isinstance(self.segment_size, bool) or not isinstance(self.segment_size, int) or self.segment_size < 1
        ):
            raise ValueError(
                f"`segment_size` must be a positive integer number of encoder tokens or {AUTO!r} (s follows the "
                f"input: ceil(input_length / target_length)), got {self.segment_size!r}."
            )
        if isinstance(self.target_length, bool) or not isinstance(self.target_length, int) or self.target_length < 1:
            raise ValueError(
                f"`target_length` must be a positive integer number of decoder tokens, got {self.target_length!r}; "
                "use the length of your longest summaries (e.g. 128)."
            )
        self._check_raf()
        check_window_settings(
            self.encoder_window if self.encoder_window is not None else 1, self.window_overlap, self.window_batch_size
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

    def _check_raf(self) -> None:
        """The checks of the RAF neuron's settings (``raf_*``)."""
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

    def _variant_settings(
        self, settings: MechanismSettings | Mapping[str, Any] | None, flat: Mapping[str, Any]
    ) -> MechanismSettings:
        """The settings object of :attr:`variant` from ``settings`` (an object or mapping) and the ``flat``
        keywords, which win. An object of another mechanism's class (``dataclasses.replace(config,
        variant=...)``) contributes the values it was given; a setting of another mechanism that is None (unset)
        is dropped, as in the flat form.

        Raises:
            ValueError: for a setting, other than None, that belongs to another mechanism.
        """
        cls = REGISTRY[self.variant].settings_class()
        if type(settings) is cls and not flat:
            return settings
        if isinstance(settings, MechanismSettings):
            given = settings.to_dict() if type(settings) is cls else _given(settings)
        else:
            given = dict(settings or {})
        given.update(flat)
        own = set(cls.names())
        for name, value in given.items():
            if name in own or value is None:
                continue
            owners = _setting_owners().get(name)
            if owners is None:
                raise ValueError(f"Unknown SRformer setting {name!r} for variant {self.variant!r}.")
            raise ValueError(
                f"`{name}` is a setting of {' or '.join(f'variant={v!r}' for v in owners)}, got "
                f"variant={self.variant!r}; leave {name}=None."
            )
        return cls.from_dict({name: value for name, value in given.items() if name in own})

    def __getattr__(self, name: str) -> Any:
        """A mechanism setting read as an attribute (``config.window_size``, ``config.resolved_window_size()``):
        from :attr:`settings`, or, for another mechanism's setting, the unset value (None) or its
        ``resolved_*`` default, as when every setting was a field of this class."""
        settings = self.__dict__.get("settings")
        if name.startswith("_") or settings is None:
            raise AttributeError(name)
        if name in settings.__dataclass_fields__:
            return getattr(settings, name)
        if name.startswith("resolved_"):
            if hasattr(settings, name):
                return partial(getattr(settings, name), self)
            for cls in _settings_classes():
                if hasattr(cls, name):
                    return partial(getattr(cls(), name), self)
        elif name in _setting_owners():
            return None
        raise AttributeError(f"{type(self).__name__!r} object has no attribute {name!r}")

    def resolved_segment_size(self) -> int:
        """``segment_size`` as the int the mechanisms compute with.

        Raises:
            ValueError: for ``segment_size="auto"`` not yet resolved for an input (:meth:`for_input_length`).
        """
        if not isinstance(self.segment_size, int):
            raise ValueError(
                "segment_size='auto' has no value until an input is seen: resolve it with "
                "config.for_input_length(longest_input_tokens)."
            )
        return self.segment_size

    def for_input_length(self, longest: int) -> SRformerConfig:
        """This config with ``segment_size="auto"`` resolved for a batch whose longest real input has ``longest``
        tokens: ``s = max(1, ceil(longest / target_length))``, so that the input has at most ``target_length``
        segments and every segment is attended by the schedule (``docs/long-inputs.md``). Unchanged for an int
        ``segment_size``.

        Raises:
            ValueError: if a mechanism setting that must be at least ``s`` (``window_size``) is smaller.
        """
        if self.segment_size != AUTO:
            return self
        return replace(self, segment_size=max(1, -(-max(0, longest) // self.target_length)))

    def same_model(self, other: SRformerConfig) -> bool:
        """True if ``other`` describes the same model, ignoring the :data:`RUNTIME_OPTIONS` (``strict_schedule``,
        ``lean_cache`` and chunked encoding's settings) and the mechanism's own runtime settings
        (:attr:`~srformer.core.settings.MechanismSettings.runtime`: ``knn``'s index)."""
        def model_part(config: SRformerConfig) -> SRformerConfig:
            neutral: dict[str, Any] = {name: _SHARED_DEFAULTS[name] for name in RUNTIME_OPTIONS}
            neutral.update(dict.fromkeys(config.settings.runtime))
            return replace(config, **neutral)

        return model_part(self) == model_part(other)

    def to_dict(self) -> dict:
        """Plain-JSON form, stored as ``model.config.srformer``: the shared fields and ``"settings"``, the
        variant's own settings (``{}`` for a mechanism without any)."""
        data = {name: getattr(self, name) for name in _SHARED_DEFAULTS}
        return {"variant": self.variant, **data, "settings": self.settings.to_dict()}

    @classmethod
    def from_dict(cls, data: Mapping[str, Any]) -> SRformerConfig:
        """Inverse of :meth:`to_dict`. Also reads the flat form written before the settings were grouped per
        mechanism (every setting of every mechanism a top-level key, None where unset).

        Raises:
            ValueError: if ``data`` holds keys that are not SRformer settings.
        """
        known = {"variant", "settings", *_SHARED_DEFAULTS}
        rest = _foreign(data.get("variant", "srformer"), set(data) - known)
        unknown = sorted(rest - set(_setting_owners())) if rest else []
        if unknown:
            known.update(_setting_owners())
            raise ValueError(f"Unknown SRformer settings {unknown}; known settings are {sorted(known)}.")
        return cls(**data)


#: ``segment_size="auto"``: the segment size follows the input (:meth:`SRformerConfig.for_input_length`).
AUTO = "auto"

#: The settings that change how a model runs, not what it is: they may differ between a checkpoint and its loading,
#: and change after conversion (:func:`srformer.set_runtime_options`).
RUNTIME_OPTIONS = ("strict_schedule", "lean_cache", "encoder_window", "window_overlap", "window_batch_size")


def check_window_settings(window: int, overlap: float, batch_size: int) -> None:
    """Check chunked encoding's settings (:class:`SRformerConfig`'s ``encoder_window``, ``window_overlap``,
    ``window_batch_size``).

    Raises:
        ValueError: for ``window`` or ``batch_size`` not a positive int, or ``overlap`` outside ``[0, 1)``; the
            message names the setting.
    """
    if isinstance(window, bool) or not isinstance(window, int) or window < 1:
        raise ValueError(
            f"`encoder_window` must be a positive number of tokens (or None: the model's own limit), got {window!r}."
        )
    if isinstance(overlap, bool) or not isinstance(overlap, int | float) or not 0.0 <= overlap < 1.0:
        raise ValueError(f"`window_overlap` must lie in [0, 1) (0.5: SLED's default), got {overlap!r}.")
    if isinstance(batch_size, bool) or not isinstance(batch_size, int) or batch_size < 1:
        raise ValueError(f"`window_batch_size` must be a positive number of windows, got {batch_size!r}.")


#: The shared fields other than ``variant`` and ``settings``, with their defaults.
_SHARED_DEFAULTS: dict[str, Any] = {
    f.name: f.default for f in fields(SRformerConfig) if f.name not in ("variant", "settings")
}


def _given(settings: MechanismSettings) -> dict[str, Any]:
    """The settings of ``settings`` that were given (not None)."""
    return {name: value for name, value in settings.to_dict().items() if value is not None}


def _foreign(variant: object, names: Iterable[str]) -> set[str]:
    """``names`` less the settings of ``variant``'s own settings class (all of them for an unregistered variant):
    the names only the other mechanisms' settings classes can tell about. Imports ``variant``'s module only."""
    entry = REGISTRY.get(variant) if isinstance(variant, str) else None
    return set(names) - set(entry.settings_class().names() if entry is not None else ())


def _settings_classes() -> tuple[type[MechanismSettings], ...]:
    """The settings class of every registered mechanism that has settings of its own (imports their modules)."""
    return _classes_at(generation())


@lru_cache(maxsize=1)
def _classes_at(_generation: int) -> tuple[type[MechanismSettings], ...]:
    classes = (entry.settings_class() for entry in REGISTRY.values() if entry.settings is not None)
    return tuple(dict.fromkeys(classes))


def _setting_owners() -> dict[str, tuple[str, ...]]:
    """Every mechanism setting's name -> the variants whose settings have it, in registry order (imports every
    registered mechanism's settings class)."""
    return _owners_at(generation())


@lru_cache(maxsize=1)
def _owners_at(_generation: int) -> dict[str, tuple[str, ...]]:
    owners: dict[str, tuple[str, ...]] = {}
    for name, entry in REGISTRY.items():
        for setting in entry.settings_class().names():
            owners[setting] = (*owners.get(setting, ()), name)
    return owners


def setting_types() -> dict[str, str]:
    """Every keyword :class:`SRformerConfig` accepts besides ``settings``, with its annotated type as text
    (``"int | None"``): the shared fields and the settings of every registered mechanism (for command-line
    parsing, ``--setting NAME=VALUE``)."""
    types = {f.name: str(f.type) for f in fields(SRformerConfig) if f.name != "settings"}
    for cls in _settings_classes():
        types.update({f.name: str(f.type) for f in fields(cls)})
    return types


#: Named settings that do not depend on the segment size (their variant has no segments; live, as
#: :data:`NAMED_SETTINGS`).
SEGMENT_FREE: Sequence[str] = LiveNames(
    lambda: [name for name, settings in NAMED_SETTINGS.items() if settings["variant"] in SEGMENT_FREE_VARIANTS]
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


def settings_suffix(settings: Mapping | None = None, base_settings: Mapping | None = None) -> str:
    """The folder-name suffix of a grid cell run with extra settings (``srformer compare`` / ``srformer probe
    --setting``): ``"@NAME=VALUE+..."`` (sorted by name), then the ``full`` base's settings of a converted cell as
    ``base.NAME=VALUE``; ``""`` when there are none, so that a cell of the named setting as registered keeps its
    plain key. Cells of other settings never share a folder (a model, a record) with it."""
    parts = [f"{key}={value}" for key, value in sorted((settings or {}).items())]
    parts += [f"base.{key}={value}" for key, value in sorted((base_settings or {}).items())]
    return "@" + "+".join(parts) if parts else ""


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
