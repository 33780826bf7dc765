"""transformers' own model-test contract, for every registered mechanism:

- parameters and seeded buffers hold their initial values whenever a module is built, also where transformers'
  weight initialisation is skipped (its ``test_init_weights_can_init_buffers`` builds the model with the
  initialisation patched out, and compares the buffers with a meta-built model after ``to_empty()`` +
  ``init_weights()``);
- every Auto class that maps the family loads a converted checkpoint (converted where the head has decoder cross
  attention, plain with a warning where it has none);
- transformers' concrete classes, the top-level class and the inner decoder, reload a converted checkpoint
  converted, with the same outputs.

Uninitialised memory is made visible: with deterministic algorithms on, torch fills every tensor it allocates
without values (``torch.empty``, ``to_empty``) with NaN (``torch.utils.deterministic.fill_uninitialized_memory``).
"""

from __future__ import annotations

import copy
import inspect
import warnings
from unittest import mock

import pytest
import torch
from transformers import (
    AutoModel,
    AutoModelForMaskedLM,
    AutoModelForPreTraining,
    AutoModelForSeq2SeqLM,
    BartConfig,
    PreTrainedModel,
    T5Config,
)
from transformers.initialization import no_init_weights
from transformers.models.bart.modeling_bart import BartDecoder
from transformers.models.t5.modeling_t5 import T5Stack

import srformer
from srformer.attention.variants import build_cross_attention
from srformer.models import cross_attention_modules, is_converted, set_runtime_options
from srformer.models.auto import AUTO_CLASSES, CONFIG_CLASSES, family_heads
from tests.models.conftest import BUILDERS, decoder_inputs, padded_batch
from tests.registry_cases import mechanisms
from tests.tolerance import assert_exact

#: Every registered mechanism that replaces the cross attention (``full`` keeps the model's own).
MECHANISMS = mechanisms()
SEGMENTS = dict(segment_size=4, target_length=12)


def _has_tensors(variant: str) -> bool:
    with torch.device("meta"):
        module = build_cross_attention(srformer.SRformerConfig(variant=variant, **SEGMENTS), 8, num_heads=4)
    return any(True for _ in (*module.parameters(), *module.buffers()))


#: The mechanisms with parameters or buffers of their own (the others have nothing to initialise).
WITH_TENSORS = [name for name in MECHANISMS if _has_tensors(name)]
FAMILY_CONFIGS = {"t5": T5Config, "bart": BartConfig}
DECODER_CLASSES = {"t5": T5Stack, "bart": BartDecoder}
#: Auto classes whose heads take decoder inputs of their own (the others shift the encoder inputs themselves).
SEQ2SEQ_HEADS = (AutoModel, AutoModelForSeq2SeqLM, AutoModelForPreTraining, AutoModelForMaskedLM)


@pytest.fixture
def uninitialised_memory_is_nan():
    """torch fills memory it allocates without values with NaN while this fixture is active."""
    previous = torch.are_deterministic_algorithms_enabled(), torch.is_deterministic_algorithms_warn_only_enabled()
    torch.use_deterministic_algorithms(True, warn_only=True)
    assert torch.utils.deterministic.fill_uninitialized_memory  # type: ignore[attr-defined]
    yield
    torch.use_deterministic_algorithms(previous[0], warn_only=previous[1])


def settings(variant: str) -> srformer.SRformerConfig:
    return srformer.SRformerConfig(variant=variant, **SEGMENTS)


def srformer_tensors(module: torch.nn.Module) -> dict[str, torch.Tensor]:
    """Every parameter and buffer of srformer's modules (all of them, for a bare mechanism)."""
    tensors = {**dict(module.named_parameters()), **dict(module.named_buffers())}
    if not isinstance(module, PreTrainedModel):
        return tensors
    return {name: value for name, value in tensors.items() if ".srformer." in name}


def assert_filled_and_equal(first: dict[str, torch.Tensor], second: dict[str, torch.Tensor], what: str) -> None:
    assert first and first.keys() == second.keys(), what
    for name, value in first.items():
        assert not value.is_meta, f"{what}: {name} on the meta device"
        if value.is_floating_point():
            assert torch.isfinite(value).all(), f"{what}: {name} is not finite (uninitialised memory)"
        assert torch.equal(value, second[name]), f"{what}: {name} differs between two builds with the same seed"


# ----------------------------------------------------------------------- A: values whenever a module is built
def test_the_seeded_mechanisms_are_among_those_checked():
    assert {"routing", "reformer", "performer", "srformer", "linformer"} <= set(WITH_TENSORS)


@pytest.mark.parametrize("variant", WITH_TENSORS)
def test_a_mechanism_has_its_initial_values_from_construction(variant, uninitialised_memory_is_nan):
    """Built eagerly, a mechanism holds finite values, the same for the same seed; built on meta, then given
    memory and ``reset_parameters()``, its seeded buffers get the values of construction again."""

    def build():
        torch.manual_seed(0)
        return build_cross_attention(settings(variant), head_dim=8, scale=0.5, num_heads=4)

    module = build()
    tensors = srformer_tensors(module)
    assert_filled_and_equal(tensors, srformer_tensors(build()), f"{variant} built twice")
    with torch.device("meta"):
        on_meta = build_cross_attention(settings(variant), head_dim=8, scale=0.5, num_heads=4)
    on_meta.to_empty(device="cpu")
    for child in on_meta.modules():  # every module initialises its own tensors
        if hasattr(child, "initialize_parameters"):
            child.reset_parameters()
    reseeded = dict(on_meta.named_buffers())
    for name, value in module.named_buffers():
        assert torch.equal(reseeded[name], value), f"{variant}: buffer {name} not re-seeded by reset_parameters()"


def skip_init_weights():
    """transformers' weight initialisation patched out, as transformers' own buffer test builds a model."""
    return mock.patch.object(PreTrainedModel, "_initialize_weights", lambda self, module, *args, **kwargs: None)


INITIALISATION_SKIPPED = {"_initialize_weights patched out": skip_init_weights, "no_init_weights": no_init_weights}


@pytest.mark.parametrize("variant", WITH_TENSORS)
def test_a_converted_model_built_without_weight_initialisation_has_finite_seeded_values(
    family, variant, uninitialised_memory_is_nan
):
    """transformers' ``test_init_weights_can_init_buffers`` for srformer's classes: built with the weight
    initialisation skipped, every srformer parameter and buffer is finite and the same for the same seed, and
    the buffers equal those of a model built on meta, then ``to_empty()`` + ``init_weights()``. Also through
    ``convert`` of a plain model built with the initialisation skipped."""
    config = srformer.convert(BUILDERS[family](dtype=torch.float32), settings(variant)).config
    plain_config = BUILDERS[family]().config
    for how, skipped in INITIALISATION_SKIPPED.items():
        builds = []
        for _ in range(2):
            torch.manual_seed(0)
            with skipped():
                builds.append(AutoModelForSeq2SeqLM.from_config(copy.deepcopy(config)))
        assert_filled_and_equal(srformer_tensors(builds[0]), srformer_tensors(builds[1]), f"{variant}, {how}")
        converted_builds = []
        for _ in range(2):
            torch.manual_seed(0)
            with skipped():
                plain = type(BUILDERS[family]())(copy.deepcopy(plain_config))
                converted_builds.append(srformer.convert(plain, settings(variant)))
        first, second = (srformer_tensors(model) for model in converted_builds)
        assert_filled_and_equal(first, second, f"{variant}, convert, {how}")
        for name, value in builds[0].named_buffers():  # seeded: the same however the model was built
            assert torch.equal(dict(converted_builds[0].named_buffers())[name], value), f"{variant}: {name}"

    with torch.device("meta"):
        on_meta = AutoModelForSeq2SeqLM.from_config(copy.deepcopy(config))
    on_meta.to_empty(device="cpu")
    on_meta.init_weights()
    reinitialised = dict(on_meta.named_buffers())
    for name, value in builds[0].named_buffers():
        assert torch.equal(reinitialised[name], value), f"{variant}: buffer {name} differs after init_weights()"


# ------------------------------------------------------------------------------- B: every Auto class of a family
def head_inputs(model, auto_class, family: str) -> dict[str, torch.Tensor]:
    """Encoder inputs ending in one end-of-sequence token (the classification heads pool at it), plus decoder
    inputs for the heads that take them."""
    ids, mask = padded_batch(model, lengths=(10, 10))
    ids[:, -1] = model.config.eos_token_id
    inputs = {"input_ids": ids, "attention_mask": mask}
    if auto_class in SEQ2SEQ_HEADS and "decoder_input_ids" in inspect.signature(model.forward).parameters:
        inputs["decoder_input_ids"] = decoder_inputs(model, ids.shape[0], 6)
    if family == "bart" and "attention_mask" not in inspect.signature(model.forward).parameters:
        inputs.pop("attention_mask")
    return inputs


def test_every_auto_class_of_the_families_is_registered():
    """The registration covers every Auto class of transformers that maps a supported family (a table of
    transformers that srformer's list misses fails here)."""
    from transformers.models.auto import modeling_auto

    listed = {table for _, table in AUTO_CLASSES}
    families = {config_class.model_type for config_class in CONFIG_CLASSES}
    assert families == {"t5", "mt5", "bart", "mbart", "pegasus", "marian", "led", "longt5", "pegasus_x",
                        "bigbird_pegasus"}
    for table in dir(modeling_auto):
        names = getattr(modeling_auto, table)
        family = families & set(names) if isinstance(names, dict) else set()
        if table.startswith("MODEL_") and table.endswith("_MAPPING_NAMES") and family and table not in listed:
            raise AssertionError(f"{table} maps {sorted(family)}; srformer registers none")


@pytest.mark.parametrize("variant", MECHANISMS)
def test_every_auto_class_of_the_family_loads_a_converted_checkpoint(family, variant, tmp_path):
    model = srformer.convert(BUILDERS[family](), settings(variant))
    model.save_pretrained(tmp_path)
    saved = {name: value for name, value in model.state_dict().items() if ".srformer." in name}
    heads = family_heads(FAMILY_CONFIGS[family])
    assert len(heads) >= 6
    for auto_class, plain_class in heads:
        what = f"{auto_class.__name__} ({plain_class.__name__})"
        with warnings.catch_warnings(record=True) as caught:
            warnings.simplefilter("always")
            loaded = auto_class.from_pretrained(tmp_path, ignore_mismatched_sizes=True).double().eval()
        assert isinstance(loaded, plain_class), what
        messages = [str(w.message) for w in caught if issubclass(w.category, UserWarning)]
        if cross_attention_modules(loaded):
            assert is_converted(loaded) and type(loaded) is not plain_class, f"{what}: cross attention not converted"
            assert not any("do not apply" in m for m in messages), what
            loaded_state = loaded.state_dict()
            for name, value in saved.items():  # the checkpoint's srformer tensors, under the head's prefix
                matches = [key for key in loaded_state if key.endswith(name.split(".", 1)[1])]
                assert matches and all(torch.equal(loaded_state[key], value) for key in matches), f"{what}: {name}"
        else:  # an encoder-only head: the plain class, and a warning that says so
            assert type(loaded) is plain_class, what
            assert any("no decoder cross attention" in m and "do not apply" in m for m in messages), what
        with torch.no_grad():
            outputs = loaded(**head_inputs(loaded, auto_class, family))
        first = outputs[0]
        assert torch.isfinite(first).all(), what


# ------------------------------------------------------------------ C: transformers' concrete classes reload it
@pytest.mark.parametrize("variant", MECHANISMS)
def test_concrete_classes_reload_the_converted_model(family, variant, tmp_path):
    """``T5ForConditionalGeneration.from_pretrained(dir)`` (the top-level class) and ``T5Stack`` /
    ``BartDecoder.from_pretrained(dir)`` of ``model.get_decoder().save_pretrained(dir)`` (the inner decoder)
    return the converted model: srformer's subclass, the same tensors and outputs."""
    model = srformer.convert(BUILDERS[family](), settings(variant))
    ids, mask = padded_batch(model)
    dec = decoder_inputs(model, ids.shape[0], 9)
    model.save_pretrained(tmp_path / "model")
    top = type(BUILDERS[family]()).from_pretrained(tmp_path / "model").eval()
    assert type(top) is type(model) and is_converted(top)
    with torch.no_grad():
        expected = model(input_ids=ids, attention_mask=mask, decoder_input_ids=dec, use_cache=False).logits
        got = top(input_ids=ids, attention_mask=mask, decoder_input_ids=dec, use_cache=False).logits
    assert_exact(got, expected, f"{variant}: top-level class")

    decoder = model.get_decoder()
    decoder.save_pretrained(tmp_path / "decoder")
    inner = DECODER_CLASSES[family].from_pretrained(tmp_path / "decoder").eval()
    assert type(inner) is type(decoder) and is_converted(inner)
    with torch.no_grad():
        encoded = model.get_encoder()(input_ids=ids, attention_mask=mask).last_hidden_state
        if family == "t5":  # a T5Stack saved alone has no embedding of its own: the model's
            inner.set_input_embeddings(model.get_input_embeddings())
        kwargs = dict(input_ids=dec, encoder_hidden_states=encoded, encoder_attention_mask=mask, use_cache=False)
        # float64; a plain T5Stack reloaded the same way differs from its model's by rounding too (transformers)
        assert_exact(inner(**kwargs).last_hidden_state, decoder(**kwargs).last_hidden_state, f"{variant}: decoder")


def test_concrete_class_loads_a_full_checkpoint_as_the_plain_model(family, tmp_path):
    """``full`` keeps the model's own attention: transformers' class loads it as itself."""
    model = srformer.convert(BUILDERS[family](), settings("full"))
    model.save_pretrained(tmp_path)
    loaded = type(model).from_pretrained(tmp_path)
    assert type(loaded) is type(model) and not is_converted(loaded)
    assert loaded.config.srformer["variant"] == "full"


def test_inner_decoder_config_records_the_settings(family):
    """T5's decoder stack holds its own copy of the config: it gets the settings and srformer's model type."""
    model = srformer.convert(BUILDERS[family](), settings("srformer"))
    decoder_config = model.get_decoder().config
    assert decoder_config.model_type == f"srformer_{family}"
    assert decoder_config.srformer == model.config.srformer
    set_runtime_options(model, lean_cache=True)
    assert model.get_decoder().config.srformer == model.config.srformer

