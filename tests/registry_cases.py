"""The test suite's parametrisations, derived from the registry (:data:`srformer.core.REGISTRY`): which
mechanisms exist, what they can do and which checks apply to them. No test keeps a list of mechanism names.

Every function reads the registry as it is when it is called, so a mechanism registered with
:func:`srformer.core.register` is in every list its entry's capabilities put it in
(``tests/attention/test_registering_a_mechanism.py`` registers a throwaway one and checks that).
"""

from __future__ import annotations

from srformer.benchmarks.records import BENCH_VARIANTS, VARIANT_SPECS
from srformer.core import (
    MECHANISMS,
    NAMED_SETTINGS,
    REGISTRY,
    WEIGHTS_OF_OUTPUT,
    keeps_own_attention,
    named_config,
    with_capability,
)


def variants() -> list[str]:
    """Every registered variant, ``full`` included."""
    return list(REGISTRY)


def shipped_variants() -> list[str]:
    """The variants the package ships (:data:`srformer.core.MECHANISMS`): their code lives in ``srformer``."""
    return [entry.name for entry in MECHANISMS if entry.name in REGISTRY]


def mechanisms() -> list[str]:
    """The variants with a module of their own (every one but ``full``, which keeps the model's attention)."""
    return [name for name in REGISTRY if not keeps_own_attention(name)]


def segmented_mechanisms() -> list[str]:
    """The mechanisms over the segment schedule (not segment-free)."""
    return [name for name in mechanisms() if not REGISTRY[name].capabilities.segment_free]


def lean_variants() -> list[str]:
    """The variants whose generation state has a lean layout (``lean_cache=True``)."""
    return list(with_capability("lean_layout"))


def named_settings() -> list[str]:
    """Every named setting (variant, ablation, mix, ...) of a mechanism with a module of its own."""
    return [name for name, settings in NAMED_SETTINGS.items() if not keeps_own_attention(settings["variant"])]


def variant_of(name: str) -> str:
    """The variant of named setting ``name``."""
    return NAMED_SETTINGS[name]["variant"]


def with_weights(kind: str) -> list[str]:
    """The named settings (:func:`named_settings`) whose mechanism's attention weights are of ``kind``
    (:attr:`srformer.core.Capabilities.attention_weights`)."""
    return [name for name in named_settings() if REGISTRY[variant_of(name)].capabilities.attention_weights == kind]


def weights_of_output() -> list[str]:
    """The named settings whose weights are the output's map from the values, ``O = A V``."""
    return with_weights(WEIGHTS_OF_OUTPUT)


def reads_every_key(name: str, longest: int, **shape) -> bool:
    """True when every query of named setting ``name``, built with ``shape`` (``segment_size``, ...), reads every
    key of an input of at most ``longest`` real tokens: a mechanism that selects keys
    (:attr:`srformer.core.Capabilities.selects_keys`) whose budget covers the input, so full attention."""
    if not REGISTRY[variant_of(name)].capabilities.selects_keys:
        return False
    config = named_config(name, **shape)
    whole = config.settings.whole_input_length(config)
    return whole is not None and longest <= whole


def full_attention_at(longest: int, **shape) -> list[str]:
    """The named settings that are full attention on inputs of at most ``longest`` tokens (:func:`reads_every_key`)."""
    return [name for name in named_settings() if reads_every_key(name, longest, **shape)]


def bench_variants() -> list[str]:
    """The benchmark variants of ``srformer bench`` (:data:`srformer.benchmarks.records.BENCH_VARIANTS`)."""
    return list(BENCH_VARIANTS)


def bench_variants_of(variant: str) -> list[str]:
    """The benchmark variants that run ``variant``'s module (or its own attention, for ``full``)."""
    return [name for name, spec in VARIANT_SPECS.items() if spec.srformer_variant == variant]


#: Settings a named setting takes in the tests that run every named setting on inputs of a few dozen tokens:
#: ``knn-loki-tail``'s 1,024 clusters would each hold one position there (its estimate exact, nothing tested) and
#: fit them on a sample of 16,384 points per layer; 4 clusters group several keys each. Its own tests
#: (tests/attention/test_key_clusters.py) cover the named count.
AT_TEST_SIZE: dict[str, dict[str, object]] = {"knn-loki-tail": {"tail_clusters": 4}}


def at_test_size(name: str) -> dict[str, object]:
    """The settings named setting ``name`` takes in tests on short inputs (:data:`AT_TEST_SIZE`), or none."""
    return dict(AT_TEST_SIZE.get(name, {}))
