"""transformers' initialisation machinery owns srformer's parameters: meta-device construction + to_empty() +
init_weights(), accelerate's init_empty_weights, from_pretrained(device_map=...) and init_weights() after
conversion give srformer's own initial values (RAF leak and threshold, the Eq. 10 mix logit exactly; the RAF
W uniform in +-raf_linear_init_scale / sqrt(d), never the model's own Linear scheme)."""

from __future__ import annotations

import math

import pytest
import torch
from accelerate import init_empty_weights, load_checkpoint_and_dispatch
from transformers import AutoModelForSeq2SeqLM

import srformer
from srformer.models import cross_attention_modules
from tests.models.conftest import BUILDERS

# leak, threshold and mix differ from the package defaults so that a default-valued path would show
SETTINGS = srformer.SRformerConfig(
    variant="srformer", segment_size=4, target_length=12, raf_leak_init=0.9, raf_threshold_init=0.2,
    raf_linear_init_scale=1e-3, mix_init=0.3,
)


def eager_converted(family: str):
    """The reference: a float32 model built eagerly, then converted."""
    return srformer.convert(BUILDERS[family](dtype=torch.float32), SETTINGS)


def srformer_parameters(model) -> dict[str, torch.Tensor]:
    return {name: p for name, p in model.named_parameters() if ".srformer." in name}


def assert_srformer_initialisation(model, reference, what: str) -> None:
    """leak, threshold, mix logit equal to the eager reference's; every RAF W inside +-scale / sqrt(d) and
    spread over it (all 64 draws of a layer inside half the bound has probability 2**-64). transformers' own
    Linear init (T5: std 1.0, BART: std 0.02) exceeds the bound 3.5e-4 by far."""
    parameters, expected = srformer_parameters(model), srformer_parameters(reference)
    assert parameters.keys() == expected.keys() and len(parameters) == 2 * 4, what
    for name, value in parameters.items():
        assert not value.is_meta, f"{what}: {name} still on the meta device"
        if name.endswith("raf.linear.weight"):
            bound = SETTINGS.raf_linear_init_scale / math.sqrt(value.shape[1])
            largest = value.abs().max().item()
            assert bound / 2 < largest <= bound * (1 + 2.0**-23), f"{what}: {name} max |W| {largest:.3g} vs {bound:.3g}"
        else:
            assert torch.equal(value, expected[name]), f"{what}: {name} {value.tolist()} != {expected[name].tolist()}"


def test_the_eager_reference_has_srformers_initial_values(family):
    model = eager_converted(family)
    assert_srformer_initialisation(model, model, "eager")
    for _, _, module in cross_attention_modules(model):
        assert module.srformer.raf.leak.item() == pytest.approx(0.9, rel=1e-7)
        assert module.srformer.raf.threshold.item() == pytest.approx(0.2, rel=1e-7)
        assert torch.sigmoid(module.srformer.mix_logit).item() == pytest.approx(0.3, rel=1e-6)


@pytest.mark.parametrize("how", ["convert on meta", "srformer class on meta"])
def test_meta_construction_then_to_empty_and_init_weights(family, how):
    reference = eager_converted(family)
    plain_config = BUILDERS[family]().config
    with torch.device("meta"):
        if how == "convert on meta":
            model = srformer.convert(type(BUILDERS[family]())(plain_config), SETTINGS)
        else:
            model = AutoModelForSeq2SeqLM.from_config(reference.config)
    assert all(p.is_meta for p in srformer_parameters(model).values())
    model.to_empty(device="cpu")
    model.init_weights()
    assert_srformer_initialisation(model, reference, how)
    assert all(torch.isfinite(p).all() for p in model.parameters())


def test_accelerate_init_empty_weights(family, tmp_path):
    """With init_empty_weights (parameters on meta, transformers' init a no-op there), loading a checkpoint
    with accelerate gives its parameters; to_empty() + init_weights() gives srformer's initial values to
    srformer's parameters (transformers leaves the model's own marked initialised on meta: a plain model's
    stay uninitialised memory on this path too)."""
    reference = eager_converted(family)
    with init_empty_weights():
        model = AutoModelForSeq2SeqLM.from_config(reference.config)
    model.to_empty(device="cpu")
    model.init_weights()
    assert_srformer_initialisation(model, reference, "init_empty_weights + to_empty + init_weights")

    reference.save_pretrained(tmp_path)
    with init_empty_weights():
        empty = AutoModelForSeq2SeqLM.from_config(reference.config)
    empty.tie_weights()
    loaded = load_checkpoint_and_dispatch(empty, str(tmp_path), device_map={"": "cpu"})
    expected = reference.state_dict()
    for key, value in loaded.state_dict().items():
        assert torch.equal(value, expected[key]), key


@pytest.mark.parametrize("loader", ["AutoModelForSeq2SeqLM", "srformer.from_pretrained"])
def test_from_pretrained_with_a_device_map_gives_the_saved_parameters(family, loader, tmp_path):
    reference = eager_converted(family)
    with torch.no_grad():
        for value in srformer_parameters(reference).values():
            value.copy_(torch.randn_like(value))  # values no initialisation produces
    reference.save_pretrained(tmp_path)
    load = AutoModelForSeq2SeqLM.from_pretrained if loader == "AutoModelForSeq2SeqLM" else srformer.from_pretrained
    model = load(str(tmp_path), device_map="cpu")
    expected = reference.state_dict()
    assert model.state_dict().keys() == expected.keys()
    for key, value in model.state_dict().items():
        assert torch.equal(value, expected[key]), key


def test_missing_srformer_weights_are_initialised_by_srformers_scheme(family, tmp_path):
    """A checkpoint without the RAF weights, loaded through an Auto class: transformers initialises the
    missing keys through the model's _init_weights, which gives srformer's values (srformer.from_pretrained
    refuses such a checkpoint, see test_convert)."""
    reference = eager_converted(family)
    kept = {k: v for k, v in reference.state_dict().items() if ".srformer." not in k}
    reference.save_pretrained(tmp_path, state_dict=kept)
    model, info = AutoModelForSeq2SeqLM.from_pretrained(tmp_path, device_map="cpu", output_loading_info=True)
    assert sorted(info["missing_keys"]) == sorted(srformer_parameters(reference))
    assert_srformer_initialisation(model, reference, "missing keys")


def test_init_weights_after_conversion_keeps_srformers_scale(family):
    model = eager_converted(family)
    before = {name: value.clone() for name, value in srformer_parameters(model).items()}
    model.init_weights()  # everything is initialised already: nothing changes
    for name, value in srformer_parameters(model).items():
        assert torch.equal(value, before[name]), name
    with torch.no_grad():  # trained values, then every module marked uninitialised (as after to_empty)
        for value in srformer_parameters(model).values():
            value.fill_(5.0)
    for module in model.modules():
        module.__dict__.pop("_is_hf_initialized", None)
    model.init_weights()
    assert_srformer_initialisation(model, eager_converted(family), "init_weights on unmarked modules")
    for _, _, module in cross_attention_modules(model):  # transformers' per-module call, as its tests make it
        model._init_weights(module.srformer.raf.linear)
    assert_srformer_initialisation(model, eager_converted(family), "_init_weights(W)")


def test_meta_construction_redraws_performers_buffer_from_its_seed():
    """A module whose only tensor is a buffer (performer's random features): built on meta, to_empty() +
    init_weights() gives the features of the eager model (drawn from the same seed), not uninitialised memory."""
    settings = srformer.SRformerConfig(variant="performer", segment_size=4, target_length=12)
    reference = srformer.convert(BUILDERS["t5"](dtype=torch.float32), settings)
    with torch.device("meta"):
        model = srformer.convert(type(BUILDERS["t5"]())(BUILDERS["t5"]().config), settings)
    model.to_empty(device="cpu")
    model.init_weights()
    expected = reference.state_dict()
    features = {name: value for name, value in model.state_dict().items() if name.endswith("random_features")}
    assert len(features) == 2
    for name, value in features.items():
        assert torch.equal(value, expected[name]), name
