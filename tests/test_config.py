"""SRformerConfig keeps reading the flat form it was stored in before each mechanism had its own settings class:
a config dict and a saved checkpoint in that form load to the same config and the same model."""

from __future__ import annotations

import json

import pytest
import torch

import srformer
from srformer.attention.window import WindowSettings
from srformer.config import SRformerConfig, setting_types
from srformer.core import REGISTRY, MechanismSettings
from tests.models.conftest import converted, decoder_inputs, padded_batch, tiny_t5
from tests.models.test_exactness import teacher_forced_logits
from tests.registry_cases import variants
from tests.tolerance import assert_exact

#: Every mechanism setting of the flat form, unset.
_UNSET = {
    "window_size": None, "stride": None, "num_buckets": None, "hash_rounds": None, "chunk_size": None,
    "num_clusters": None, "cluster_size": None, "centroid_decay": None, "content_seed": None,
    "num_global_tokens": None, "num_random_blocks": None, "random_blocks_seed": None, "compression_rate": None,
    "max_span": None, "span_ramp": None, "span_init": None, "span_nodes": None, "projected_length": None,
    "max_source_length": None, "num_random_features": None, "random_feature_seed": None,
    "compression_stride": None, "num_inducing_points": None,
}

#: ``SRformerConfig(variant="window", window_size=96).to_dict()`` as the flat form wrote it.
OLD_WINDOW = {
    "variant": "window", "segment_size": 64, "target_length": 128, "raf_leak_init": 1.0, "raf_threshold_init": 0.1,
    "raf_linear_init_scale": 0.001, "raf_neuron": "paper", "raf_surrogate_slope": None, "norm_eps": 1e-06,
    "kv_clamp": None, "recurrence": True, "ablation": None, "mix_init": None, **_UNSET, "window_size": 96,
    "strict_schedule": False, "lean_cache": False,
}

#: ``SRformerConfig().to_dict()`` (the paper's ``srformer``) as the flat form wrote it.
OLD_SRFORMER = {
    "variant": "srformer", "segment_size": 64, "target_length": 128, "raf_leak_init": 1.0, "raf_threshold_init": 0.1,
    "raf_linear_init_scale": 0.001, "raf_neuron": "paper", "raf_surrogate_slope": None, "norm_eps": 1e-06,
    "kv_clamp": None, "recurrence": True, "ablation": None, "mix_init": None, **_UNSET,
    "strict_schedule": False, "lean_cache": False,
}


@pytest.mark.parametrize(
    "old,expected",
    [(OLD_WINDOW, SRformerConfig(variant="window", window_size=96)), (OLD_SRFORMER, SRformerConfig())],
    ids=["window", "srformer"],
)
def test_the_old_flat_form_reads_as_the_same_config(old, expected):
    config = SRformerConfig.from_dict(old)
    assert config == expected and hash(config) == hash(expected)
    assert SRformerConfig.from_dict(config.to_dict()) == config
    assert all(key in config.to_dict() for key in old if key not in _UNSET)  # the shared fields stay top-level


def test_the_new_form_holds_the_variant_settings_only():
    data = SRformerConfig(variant="window", window_size=96).to_dict()
    assert data["settings"] == {"window_size": 96} and not set(_UNSET) & set(data)
    assert SRformerConfig().to_dict()["settings"] == {}
    assert SRformerConfig(variant="window", settings=WindowSettings(window_size=96)).window_size == 96
    assert type(SRformerConfig().settings) is MechanismSettings


def test_a_setting_of_the_old_form_given_to_another_variant_is_still_an_error():
    with pytest.raises(ValueError, match="window_size.*variant='window'"):
        SRformerConfig.from_dict({**OLD_SRFORMER, "window_size": 96})
    with pytest.raises(ValueError, match="Unknown SRformer settings"):
        SRformerConfig.from_dict({**OLD_SRFORMER, "window_width": 96})


@pytest.mark.parametrize("old", [OLD_WINDOW, OLD_SRFORMER], ids=["window", "srformer"])
def test_a_checkpoint_saved_in_the_old_form_loads_to_the_same_model(old, tmp_path):
    settings = dict(old, segment_size=4, target_length=12, window_size=old["window_size"] and 8)
    model = converted(tiny_t5(), **{key: value for key, value in settings.items() if value is not None})
    for parameter in model.parameters():  # weights that no fresh initialisation gives
        torch.nn.init.normal_(parameter, std=0.1, generator=torch.Generator().manual_seed(parameter.numel()))
    model.save_pretrained(tmp_path)
    path = tmp_path / "config.json"
    stored = json.loads(path.read_text())
    stored["srformer"] = settings  # the flat form, as written before the settings were grouped per mechanism
    path.write_text(json.dumps(stored))
    loaded = srformer.from_pretrained(str(tmp_path))
    assert srformer.models.srformer_config_of(loaded) == srformer.models.srformer_config_of(model)
    ids, mask = padded_batch(model)
    dec = decoder_inputs(model, ids.shape[0], 9)
    assert_exact(teacher_forced_logits(loaded, ids, mask, dec), teacher_forced_logits(model, ids, mask, dec), "old")


@pytest.mark.parametrize("name", variants())
def test_every_variant_holds_the_settings_class_its_entry_names(name):
    config = SRformerConfig(variant=name)
    assert type(config.settings) is REGISTRY[name].settings_class()
    assert set(config.settings.names()) <= set(setting_types())  # every setting is a --setting name


def test_a_setting_of_two_variants_names_both_and_an_unknown_keyword_is_a_type_error():
    assert SRformerConfig(variant="routing", content_seed=3).content_seed == 3
    with pytest.raises(ValueError, match="`content_seed` is a setting of variant='reformer' or variant='routing'"):
        SRformerConfig(variant="window", content_seed=3)
    with pytest.raises(TypeError, match="unexpected keyword argument 'window_width'"):
        SRformerConfig(variant="window", window_width=3)
    assert SRformerConfig(variant="window", content_seed=None) == SRformerConfig(variant="window")
