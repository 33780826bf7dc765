"""Benchmark records: one measurement per record, validated, and their JSON file.

A record says what was measured (``metric``, ``value``, ``unit``), on what (``variant``,
``encoder_length`` k, ``segment_size`` s, ``batch_size``, ``decoder_length`` q where it matters)
and where and how (``device``; ``compiled`` for the torch.compile column). Every writer and reader
validates, so a malformed record never reaches a report or a plot.
"""

from __future__ import annotations

import json
import math
from collections.abc import Iterable, Mapping, Sequence
from dataclasses import asdict, dataclass, fields
from pathlib import Path
from typing import TypeGuard

from srformer.core import (
    NAMED_SETTINGS,
    REGISTRY,
    SEGMENT_FREE_VARIANTS,
    TABLE1_VARIANTS,
    LiveMapping,
    LiveNames,
    SRformerConfig,
)


@dataclass(frozen=True)
class VariantSpec:
    """One benchmark variant.

    Attributes:
        name: the record's variant name (one of :data:`BENCH_VARIANTS`).
        srformer_variant: its cross-attention variant (:data:`srformer.VARIANTS`).
        attn_implementation: the Hugging Face attention implementation the model is built with.
            Converted modules run their own attention (``scaled_dot_product_attention`` on one
            segment) whatever this is; it still selects the decoder self attention.
        lean_cache: the converted model's ``lean_cache`` runtime option.
        setting: the named setting (:data:`srformer.config.NAMED_SETTINGS`) the model is converted with, where it
            changes the module's settings (``knn-4``: ``top_keys=4``); None: ``srformer_variant``'s defaults.
    """

    name: str
    srformer_variant: str
    attn_implementation: str = "sdpa"
    lean_cache: bool = False
    setting: str | None = None

    @property
    def uses_segments(self) -> bool:
        """True when the variant has a segment size (every variant but ``full*`` and ``linear``)."""
        return self.srformer_variant not in SEGMENT_FREE_VARIANTS


#: The attention implementations under which a variant without a module of its own (``full``: the
#: model's unchanged cross attention) is measured, each a benchmark variant ``<name>-<implementation>``.
OWN_ATTENTION_IMPLEMENTATIONS: tuple[str, ...] = ("sdpa", "eager")


def _bench_specs() -> dict[str, VariantSpec]:
    """Benchmark variants from the registry (:mod:`srformer.core.registry`), in its order: the
    model's own attention under each of :data:`OWN_ATTENTION_IMPLEMENTATIONS`; every converted variant
    with the standard cache layout; ``<name>-lean`` where the lean layout exists and differs from
    the standard one (a state that grows with the input); then every further named setting that changes its
    module's settings (``knn-4``, ``srformer-gated-taylor``), under its own name. Named settings that change
    only training or the neuron (the ablations) run their variant's module at its cost and get no entry."""
    specs: dict[str, VariantSpec] = {}
    for name, entry in REGISTRY.items():
        if entry.module is None:
            for implementation in OWN_ATTENTION_IMPLEMENTATIONS:
                specs[f"{name}-{implementation}"] = VariantSpec(f"{name}-{implementation}", name, implementation)
            continue
        specs[name] = VariantSpec(name, name)
        if entry.capabilities.lean_layout and entry.capabilities.state_grows_with_input:
            specs[f"{name}-lean"] = VariantSpec(f"{name}-lean", name, lean_cache=True)
    for name, entry in REGISTRY.items():
        for setting in entry.named_settings:
            if changes_module_settings(setting):
                specs[setting] = VariantSpec(setting, name, setting=setting)
    return specs


#: The settings every variant shares (:class:`~srformer.core.config.SRformerConfig`'s fields but its ``settings``).
_SHARED_SETTINGS = frozenset(f.name for f in fields(SRformerConfig) if f.name != "settings")


def changes_module_settings(setting: str) -> bool:
    """True when named setting ``setting`` gives its variant's module other settings than the variant's defaults
    (``knn-4``, ``srformer-gated-taylor``), so that it may cost what its variant does not; False for a variant's
    own name and for the ablations, which set only shared settings (the neuron, the ablation). Read from the
    registry's entry (a setting that is not shared is the mechanism's own), so no mechanism module is imported and
    the benchmark variants are known to ``srformer --help``. Raises ValueError for an unknown name."""
    if setting not in NAMED_SETTINGS:
        raise ValueError(f"Unknown variant name {setting!r}: choose from {', '.join(NAMED_SETTINGS)}.")
    given = NAMED_SETTINGS[setting]
    return given["variant"] != setting and any(
        value is not None for name, value in given.items() if name not in _SHARED_SETTINGS
    )


#: The specification of every benchmark variant, by name (derived from the registry as it is now, see
#: :func:`_bench_specs`: a mechanism registered later is a benchmark variant too).
VARIANT_SPECS: Mapping[str, VariantSpec] = LiveMapping(_bench_specs)

#: Cross-attention variants measured by ``srformer bench`` (the names of :data:`VARIANT_SPECS`, live).
#: ``full-sdpa``/``full-eager``: the model's own cross attention with that attention implementation.
#: ``segmented``/``srformer``: the converted modules (standard cache layout).
#: ``segmented-lean``/``srformer-lean``: the same with ``lean_cache=True``.
#: ``xl``/``longt5``/``linear``: the paper's baselines (standard cache layout; ``linear`` has no segments).
BENCH_VARIANTS: Sequence[str] = LiveNames(lambda: tuple(VARIANT_SPECS))

#: The variants ``srformer bench`` measures unless ``--variants`` says otherwise: those of the paper's
#: Table 1 rows (``full``, ``segmented``, ``srformer``); the baselines are opt-in, so the default run keeps its length.
#: Fixed at import, as the Table 1 rows are (a registered mechanism has none).
DEFAULT_BENCH_VARIANTS: tuple[str, ...] = tuple(
    name for name, spec in VARIANT_SPECS.items() if spec.srformer_variant in TABLE1_VARIANTS
)

#: The measured benchmark variant of each Table 1 row: the first of its variant (``full``: ``full-sdpa``).
CORE_VARIANT_NAMES: dict[str, str] = {
    row: next(name for name, spec in VARIANT_SPECS.items() if spec.srformer_variant == row) for row in TABLE1_VARIANTS
}


def has_segments(variant: str) -> bool:
    """False for the variants without a segment size (``full*``, the paper's ``full`` row, ``linear``)."""
    spec = VARIANT_SPECS.get(variant)
    return (spec.srformer_variant if spec is not None else variant) not in SEGMENT_FREE_VARIANTS


#: Rows of paper Table 1 (theoretical counts, no implementation): ``full`` is the "Transformer" row.
THEORY_VARIANTS: tuple[str, ...] = TABLE1_VARIANTS

#: Every variant name a record may carry (live, as :data:`BENCH_VARIANTS`).
KNOWN_VARIANTS: Sequence[str] = LiveNames(
    lambda: (*BENCH_VARIANTS, *(v for v in THEORY_VARIANTS if v not in BENCH_VARIANTS))
)

#: Metric name -> its unit. Units: ``ms`` and ``s`` (wall-clock time), ``tokens/s`` (new tokens of
#: all sequences of the batch per second), ``bytes``, ``FLOPs`` (floating-point operations as
#: counted by ``torch.utils.flop_counter.FlopCounterMode``: 2 per multiply-accumulate),
#: ``MACs`` (multiply-accumulates: the product counts of paper Table 1), ``elements`` (numbers held), ``calls``
#: (aten operator calls) and ``syncs`` (those among them that wait for the device).
METRIC_UNITS: dict[str, str] = {
    "cross_attention_step_time": "ms",
    "cross_attention_prefill_time": "ms",
    "generate_throughput": "tokens/s",
    "training_step_time": "s",
    "generate_peak_memory": "bytes",
    "cross_attention_cache_bytes": "bytes",
    "cross_attention_step_flops": "FLOPs",
    "cross_attention_forward_flops": "FLOPs",
    "attention_core_forward_flops": "FLOPs",
    "attention_core_generation_flops": "FLOPs",
    "table1_computation": "MACs",
    "table1_memory": "elements",
    "first_step_operator_calls": "calls",
    "operator_calls_per_token": "calls",
    "first_step_host_syncs": "syncs",
    "host_syncs_per_token": "syncs",
    **{f"{route}{name}": "bytes" for route in ("", "cpu_route_") for name in (
        "first_step_bytes", "first_step_persistent_bytes", "bytes_per_token", "persistent_bytes_per_token")},
}

#: Every unit a record may carry.
KNOWN_UNITS: frozenset[str] = frozenset(METRIC_UNITS.values())

#: Device a theoretical (computed, not measured) record carries.
THEORY_DEVICE = "theory"


class RecordError(ValueError):
    """A benchmark record (or a records file) is malformed; the message names the field."""


@dataclass(frozen=True)
class BenchRecord:
    """One measurement.

    Attributes:
        variant: one of :data:`KNOWN_VARIANTS`.
        encoder_length: ``k``, encoder positions (tokens), >= 1.
        segment_size: ``s`` in tokens for segment-based variants; None for ``full*`` and ``linear``.
        batch_size: sequences per call, >= 1 (1 for per-example counts).
        metric: a key of :data:`METRIC_UNITS`.
        value: the measurement, finite and > 0, in ``unit``.
        unit: must equal ``METRIC_UNITS[metric]``.
        device: ``"cpu"``, ``"cuda"`` (optionally ``"cuda:N"``), or ``"theory"`` for Table 1 counts.
        decoder_length: ``q``, decoder positions (tokens) the measurement covers, where it matters
            (forward passes, Table 1, generated tokens); None otherwise.
        note: free text: how it was measured, caveats.
        compiled: True for a measurement of the ``torch.compile``d path (``srformer bench --compiled``:
            the step and ``generate()``), False for eager mode (every other record, and files written
            before the field existed).

    Raises:
        RecordError: (a ``ValueError``) on construction, for any malformed field.
    """

    variant: str
    encoder_length: int
    segment_size: int | None
    batch_size: int
    metric: str
    value: float
    unit: str
    device: str
    decoder_length: int | None = None
    note: str = ""
    compiled: bool = False

    def __post_init__(self) -> None:
        validate_record(self)

    def to_dict(self) -> dict:
        """Plain-JSON form (all fields, ``None`` kept)."""
        return asdict(self)

    @classmethod
    def from_dict(cls, data: dict) -> BenchRecord:
        """Inverse of :meth:`to_dict`.

        Raises:
            RecordError: if ``data`` is not a mapping, lacks a required field, has an unknown
                field, or describes a malformed record.
        """
        if not isinstance(data, dict):
            raise RecordError(f"A benchmark record must be a JSON object, got {type(data).__name__}.")
        names = {f.name for f in fields(cls)}
        required = {f.name for f in fields(cls) if f.name not in ("decoder_length", "note", "compiled")}
        missing = sorted(required - set(data))
        if missing:
            raise RecordError(f"Benchmark record {data!r} lacks field(s) {missing}.")
        unknown = sorted(set(data) - names)
        if unknown:
            raise RecordError(f"Benchmark record has unknown field(s) {unknown}; known fields are {sorted(names)}.")
        return cls(**data)


def _is_int(value: object) -> TypeGuard[int]:
    return isinstance(value, int) and not isinstance(value, bool)


def validate_record(record: BenchRecord) -> None:
    """Check every field of ``record``.

    Raises:
        RecordError: naming the first malformed field: unknown variant, metric or unit; a unit that
            does not belong to the metric; a non-integer or non-positive length/size; a segment
            size on a ``full*`` variant or a missing one on another variant; a value that is not a
            finite number > 0; an unknown device; a non-string note; a ``compiled`` that is not a bool.
    """
    if record.variant not in KNOWN_VARIANTS:
        raise RecordError(f"Unknown variant {record.variant!r}; known variants are {', '.join(KNOWN_VARIANTS)}.")
    if record.metric not in METRIC_UNITS:
        raise RecordError(f"Unknown metric {record.metric!r}; known metrics are {', '.join(METRIC_UNITS)}.")
    if record.unit not in KNOWN_UNITS:
        raise RecordError(f"Unknown unit {record.unit!r}; known units are {', '.join(sorted(KNOWN_UNITS))}.")
    expected = METRIC_UNITS[record.metric]
    if record.unit != expected:
        raise RecordError(f"Metric {record.metric!r} is measured in {expected!r}, not {record.unit!r}.")
    for name in ("encoder_length", "batch_size"):
        value = getattr(record, name)
        if not _is_int(value) or value < 1:
            raise RecordError(f"`{name}` must be a positive integer, got {value!r}.")
    if record.decoder_length is not None and (not _is_int(record.decoder_length) or record.decoder_length < 1):
        raise RecordError(f"`decoder_length` must be None or a positive integer, got {record.decoder_length!r}.")
    is_full = not has_segments(record.variant)
    if is_full and record.segment_size is not None:
        raise RecordError(f"Variant {record.variant!r} has no segments; `segment_size` must be None.")
    if not is_full and (not _is_int(record.segment_size) or record.segment_size < 1):
        raise RecordError(
            f"Variant {record.variant!r} needs a positive integer `segment_size`, got {record.segment_size!r}."
        )
    value = record.value
    if isinstance(value, bool) or not isinstance(value, (int, float)) or not math.isfinite(value) or value <= 0:
        raise RecordError(f"`value` of {record.metric!r} must be a finite number > 0, got {value!r}.")
    device = record.device
    if not isinstance(device, str) or not (
        device in ("cpu", "cuda", THEORY_DEVICE) or (device.startswith("cuda:") and device[5:].isdigit())
    ):
        raise RecordError(f"`device` must be 'cpu', 'cuda', 'cuda:N' or {THEORY_DEVICE!r}, got {device!r}.")
    if not isinstance(record.note, str):
        raise RecordError(f"`note` must be a string, got {type(record.note).__name__}.")
    if not isinstance(record.compiled, bool):
        raise RecordError(f"`compiled` must be true or false, got {record.compiled!r}.")


def write_records_json(path: str | Path, records: Iterable[BenchRecord]) -> Path:
    """Write ``records`` as a JSON list of objects (one per record) to ``path``.

    Returns:
        The path written.

    Raises:
        RecordError: if an element is not a :class:`BenchRecord` (records validate themselves on
            construction, so every written record is well-formed).
    """
    rows = []
    for record in records:
        if not isinstance(record, BenchRecord):
            raise RecordError(f"Expected BenchRecord objects, got {type(record).__name__}.")
        validate_record(record)
        rows.append(record.to_dict())
    path = Path(path)
    path.parent.mkdir(parents=True, exist_ok=True)
    path.write_text(json.dumps(rows, indent=1) + "\n")
    return path


def read_records_json(path: str | Path) -> list[BenchRecord]:
    """Read and validate a file written by :func:`write_records_json`.

    Raises:
        FileNotFoundError: if ``path`` does not exist.
        RecordError: if the file is not a JSON list, or any record is malformed.
    """
    try:
        data = json.loads(Path(path).read_text())
    except json.JSONDecodeError as error:
        raise RecordError(f"{path} is not valid JSON: {error}") from error
    if not isinstance(data, list):
        raise RecordError(f"{path} must hold a JSON list of records, got {type(data).__name__}.")
    return [BenchRecord.from_dict(row) for row in data]
