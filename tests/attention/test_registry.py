"""The mechanism registry: every variant is registered, every entry's module and reference exist, and
the capabilities it states agree with what the modules and references do (where that is cheap to see).

Parametrised by :mod:`tests.registry_cases`, over the registry as it is: a mechanism registered later is checked
by the same functions (``tests/attention/test_registering_a_mechanism.py`` calls them for a throwaway one)."""

from __future__ import annotations

import dataclasses
import inspect

import pytest
import torch
from torch import nn

import srformer.attention
import srformer.config
from srformer.attention import naive
from srformer.attention.state import CrossAttentionState
from srformer.attention.variants import build_cross_attention
from srformer.config import ABLATIONS, LEAN_VARIANTS, NAMED_SETTINGS, SEGMENT_FREE_VARIANTS, VARIANTS, SRformerConfig
from srformer.core import (
    MECHANISMS,
    REGISTRY,
    SEGMENT_SOFTMAX_VARIANTS,
    Capabilities,
    MechanismSettings,
    keeps_own_attention,
    mechanism,
    with_capability,
)
from tests.attention.test_srformer import _inputs
from tests.registry_cases import mechanisms, segmented_mechanisms, shipped_variants, variants
from tests.tolerance import exact_tolerance

REFERENCE_SIGNATURE = list(inspect.signature(naive.srformer_attention).parameters)


def _module(name, segment_size=2, target_length=8, **settings):
    torch.manual_seed(0)
    config = SRformerConfig(variant=name, segment_size=segment_size, target_length=target_length,
                            raf_linear_init_scale=1.0, raf_threshold_init=1e-2, **settings)
    return build_cross_attention(config, 4, 0.5).double()


def _reference(name, queries, keys, values, valid, **settings):
    """The reference of ``name`` with a seeded module's learned tensors (the RAF's, ``reformer``'s rotations,
    ``routing``'s centroids, the learned summaries'), as the module holds them."""
    settings = {"segment_size": 2, "target_length": 8, **settings}
    config = SRformerConfig(variant=name, **settings)
    parameters = None if keeps_own_attention(name) else dict(_module(name, **settings).state_dict())
    return mechanism(name).reference(queries, keys, values, valid, config, scale=0.5, parameters=parameters)


def test_every_config_variant_and_named_setting_is_registered():
    assert tuple(shipped_variants()) == VARIANTS == tuple(entry.name for entry in MECHANISMS)
    assert srformer.VARIANTS == VARIANTS and srformer.ABLATIONS == ABLATIONS  # the public names still import
    for name, settings in NAMED_SETTINGS.items():
        assert settings["variant"] in REGISTRY, name
        srformer.config.named_config(name)  # every named setting is a valid configuration
    assert set(ABLATIONS) == {a for entry in REGISTRY.values() for a in entry.ablations}
    with pytest.raises(ValueError, match="Unknown SRformer variant 'no-such-variant'"):
        mechanism("no-such-variant")


@pytest.mark.parametrize("name", variants())
def test_every_entry_has_its_reference_module_docs_and_costs(name):
    entry = REGISTRY[name]
    assert entry.name == name
    assert entry.reference.__qualname__ == entry.reference.__name__  # a module-level function, not a method
    assert list(inspect.signature(entry.reference).parameters) == REFERENCE_SIGNATURE
    for text in (entry.doc, entry.citation, entry.step_cost, entry.build_cost, entry.state_size):
        assert isinstance(text, str) and text.strip(), name
    assert entry.step_cost.startswith("O(")
    if entry.module is None:  # full keeps the model's own attention
        with pytest.raises(ValueError, match="own attention"):
            build_cross_attention(SRformerConfig(variant=name), 4)
        return
    cls = entry.module_class()
    assert issubclass(cls, nn.Module)
    assert isinstance(_module(name), cls)
    for method in ("init_state", "forward", "step", "lean"):
        assert callable(getattr(cls, method)), method


@pytest.mark.parametrize("name", shipped_variants())
def test_every_shipped_reference_lives_under_naive(name):
    """The package's float64 references all live in :mod:`srformer.attention.naive`, apart from the modules they
    check (a mechanism of another package, registered with ``register``, keeps its reference where it likes)."""
    entry = REGISTRY[name]
    assert entry.reference_path.startswith(naive.__name__ + ".")
    assert entry.reference.__module__.startswith(naive.__name__ + ".")


@pytest.mark.parametrize("name", shipped_variants())
def test_the_attention_package_exports_every_class_the_registry_names(name):
    entry = REGISTRY[name]
    classes = [entry.module_class()] if entry.module is not None else []
    classes += [entry.state_class()] if entry.state is not None else []
    classes += [entry.state_class(lean=True)] if entry.lean_state is not None else []
    for cls in classes:
        assert getattr(srformer.attention, cls.__name__) is cls and cls.__name__ in srformer.attention.__all__


@pytest.mark.parametrize("name", mechanisms())
def test_a_module_class_takes_its_variant_name_from_the_registry(name):
    """A variant's name is written once, in its entry: the module class computes the variants whose entries name
    it, and refuses a config of any other."""
    cls = mechanism(name).module_class()
    assert cls.variant_names() == (name,)
    assert "variants" not in vars(cls)  # no name of its own
    other = "segmented" if name != "segmented" else "xl"
    with pytest.raises(ValueError, match=f"computes the variants \\('{name}',\\), not '{other}'"):
        cls(SRformerConfig(variant=other, segment_size=2), 4)


@pytest.mark.parametrize("name", variants())
def test_selects_keys_matches_the_settings_and_the_reference(name):
    """A mechanism that selects keys gives the longest input it reads whole, and its reference is full
    attention there; one that does not gives none."""
    entry = mechanism(name)
    config = SRformerConfig(variant=name, segment_size=2, target_length=8)
    whole = config.settings.whole_input_length(config)
    overrides = type(config.settings).whole_input_length is not MechanismSettings.whole_input_length
    assert entry.capabilities.selects_keys == overrides == (whole is not None)
    if whole is not None:
        queries, keys, values, valid = _inputs(2, 2, whole + 2, 3, 4, [whole, whole - 1])
        full = _reference("full", queries, keys, values, valid)
        assert _equal(_reference(name, queries, keys, values, valid), full)


@pytest.mark.parametrize("name", variants())
def test_references_reject_another_variants_settings(name):
    other = "full" if name != "full" else "segmented"
    queries, keys, values, _ = _inputs(1, 1, 4, 2, 4, [4])
    with pytest.raises(ValueError, match=f"reference of variant '{name}'"):
        mechanism(name).reference(queries, keys, values, None, SRformerConfig(variant=other))


def test_derived_tuples_follow_the_capabilities():
    def having(capability):
        return tuple(name for name, entry in REGISTRY.items() if getattr(entry.capabilities, capability))

    assert SEGMENT_FREE_VARIANTS == with_capability("segment_free") == having("segment_free")
    assert LEAN_VARIANTS == with_capability("lean_layout") == having("lean_layout")
    segment_softmax = tuple(name for name in having("has_softmax_part") if name not in SEGMENT_FREE_VARIANTS)
    assert segment_softmax == SEGMENT_SOFTMAX_VARIANTS
    assert "full" in SEGMENT_FREE_VARIANTS and "srformer" in LEAN_VARIANTS and "segmented" in SEGMENT_SOFTMAX_VARIANTS
    assert set(with_capability("segment_free", False)) | set(SEGMENT_FREE_VARIANTS) == set(REGISTRY)
    with pytest.raises(ValueError, match="Unknown capability"):
        with_capability("fast")
    assert set(Capabilities.__dataclass_fields__) >= {"segment_free", "lean_layout", "training_time_saving"}


@pytest.mark.parametrize("name", mechanisms())
def test_lean_layout_capability_matches_the_module_and_the_config(name):
    """Lean entries accept the lean layout (and it gives the standard layout's step); the others raise
    the config's and the module's clear errors."""
    module = _module(name)
    queries, keys, values, valid = _inputs(2, 2, 7, 3, 4, [7, 4])
    state = module.init_state(keys, values, valid)
    if mechanism(name).capabilities.lean_layout:
        SRformerConfig(variant=name, lean_cache=True)
        lean = module.lean(state)
        assert isinstance(lean, mechanism(name).state_class(lean=True)) and lean.is_lean
        assert not hasattr(lean, "keys") and not hasattr(lean, "values")  # no encoder-length keys/values

        def rows(positions):
            index = positions[:, None, :, None].expand(-1, keys.shape[1], -1, keys.shape[3])
            return torch.gather(keys, 2, index), torch.gather(values, 2, index)

        standard, _ = module.step(queries[:, :, :1], state, position=0)
        from_lean, _ = module.step(queries[:, :, :1], lean, position=0, project_rows=rows)
        assert (standard - from_lean).abs().max() <= exact_tolerance(standard)
    else:
        with pytest.raises(ValueError, match="lean_cache"):
            SRformerConfig(variant=name, lean_cache=True)
        with pytest.raises(ValueError, match="lean cache layout is not implemented"):
            module.lean(state)


@pytest.mark.parametrize("name", mechanisms())
def test_state_classes_are_the_ones_the_module_builds(name):
    """The entry's state classes are what init_state and lean return; every tensor field has the batch on
    axis 0 (beam reordering maps them all) and no tensor field of the standard state is None."""
    module = _module(name)
    entry = mechanism(name)
    _, keys, values, valid = _inputs(3, 2, 7, 3, 4, [7, 4, 0])
    state = module.init_state(keys, values, valid)
    assert type(state) is entry.state_class()
    assert issubclass(entry.state_class(), CrossAttentionState)
    for field in dataclasses.fields(state):
        value = getattr(state, field.name)
        assert isinstance(value, torch.Tensor) and value.shape[0] == 3, field.name
    small = not entry.capabilities.state_grows_with_input  # linear, fastformer: the state is its own lean layout
    assert (state.is_lean, state.reads_encoder_rows) == (small, False)
    if entry.capabilities.lean_layout:
        lean = module.lean(state)
        assert type(lean) is entry.state_class(lean=True)
        assert lean.is_lean and lean.reads_encoder_rows == (not small)
    else:
        assert entry.lean_state is None
        with pytest.raises(ValueError, match="no SRformer state in the lean layout"):
            entry.state_class(lean=True)


@pytest.mark.parametrize("name", mechanisms())
def test_state_grows_with_input_matches_the_state_size(name):
    module = _module(name, target_length=16)  # 16 segments at k = 32: none skipped
    sizes = []
    for length in (8, 32):
        _, keys, values, _ = _inputs(1, 2, length, 1, 4, [length])
        sizes.append(module.init_state(keys, values, None).nbytes())
    grows = sizes[1] > sizes[0]
    assert grows == mechanism(name).capabilities.state_grows_with_input, sizes


@pytest.mark.parametrize("name", variants())
def test_segment_free_capability_matches_the_reference(name):
    """A segment-free mechanism's output does not depend on ``segment_size``; a segmented one's does (inputs
    long enough that ``bigbird``'s default 3 random blocks do not cover every segment)."""
    queries, keys, values, valid = _inputs(2, 2, 20, 6, 4, [20, 15])
    small = _reference(name, queries, keys, values, valid, segment_size=2)
    if name != "full" and _equal(small, _reference("full", queries, keys, values, valid)):
        # a budget that reads every one of 20 keys (quest's 16 leaves of 16) is full attention by definition:
        # inputs long enough for the default budget to leave keys out
        queries, keys, values, valid = _inputs(2, 2, 600, 3, 4, [600, 450])
        small = _reference(name, queries, keys, values, valid, segment_size=2)
    large = _reference(name, queries, keys, values, valid, segment_size=3)
    assert _equal(small, large) == mechanism(name).capabilities.segment_free


def _equal(a: torch.Tensor, b: torch.Tensor) -> bool:
    return bool((a - b).abs().max() <= exact_tolerance(a))


@pytest.mark.parametrize("name", segmented_mechanisms())
def test_global_term_capability_matches_the_reference(name):
    """A segmented mechanism reads positions outside its segment (and the xl memory) iff it has a
    global term: change the values of segment 0 and look at a query of segment 3 (s = 2, m = 4, T = 4)."""
    queries, keys, values, _ = _inputs(1, 1, 8, 4, 4, [8])
    changed = values.clone()
    changed[:, :, :2] += 1.0
    settings = dict(segment_size=2, target_length=4)
    before = _reference(name, queries, keys, values, None, **settings)[:, :, 3]
    after = _reference(name, queries, keys, changed, None, **settings)[:, :, 3]
    assert bool((before - after).abs().max() > 1e-6) == mechanism(name).capabilities.global_term


@pytest.mark.parametrize("name", mechanisms())
def test_recurrent_term_and_softmax_part_match_the_module(name):
    module = _module(name)
    entry = mechanism(name)
    assert (getattr(module, "raf", None) is not None) == entry.capabilities.recurrent_term
    assert getattr(module, "has_softmax", False) == entry.capabilities.has_softmax_part
    segment_softmax = entry.capabilities.has_softmax_part and not entry.capabilities.segment_free
    assert (name in SEGMENT_SOFTMAX_VARIANTS) == segment_softmax


def test_keeps_own_attention_is_the_entries_without_a_module():
    assert [name for name in REGISTRY if keeps_own_attention(name)] == ["full"]
    assert not keeps_own_attention(None) and not keeps_own_attention("no-such-variant")


def test_ablations_belong_to_their_variant():
    for name, entry in REGISTRY.items():
        for ablation in entry.ablations:
            assert SRformerConfig(variant=name, ablation=ablation).ablation == ablation
            for other in REGISTRY:
                if other != name:
                    with pytest.raises(ValueError, match=f"variant='{name}'"):
                        SRformerConfig(variant=other, ablation=ablation)
