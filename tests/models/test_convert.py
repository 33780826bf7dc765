"""convert() / from_pretrained(): weights kept, settings round-trip, clear errors."""

from __future__ import annotations

import pytest
import torch
from transformers import (
    GPT2Config,
    GPT2LMHeadModel,
    MarianConfig,
    MarianMTModel,
    MBartConfig,
    MBartForConditionalGeneration,
    MT5Config,
    MT5ForConditionalGeneration,
    PegasusConfig,
    PegasusForConditionalGeneration,
    PretrainedConfig,
    T5Config,
    T5ForConditionalGeneration,
)

import srformer
from srformer.models import cross_attention_modules, is_converted
from tests.models.conftest import BUILDERS, converted, decoder_inputs, padded_batch, plain_generation_config
from tests.models.test_exactness import step_by_step_logits, teacher_forced_logits
from tests.registry_cases import mechanisms
from tests.tolerance import assert_exact

SETTINGS = dict(variant="srformer", segment_size=4, target_length=12)


def test_convert_replaces_every_decoder_cross_attention_and_keeps_weights(family):
    base = BUILDERS[family]()
    before = {k: v.clone() for k, v in base.state_dict().items()}
    model = converted(base, **SETTINGS)
    modules = [m for _, _, m in cross_attention_modules(model)]
    assert len(modules) == 2 and all(hasattr(m, "srformer") for m in modules)
    after = model.state_dict()
    for key, value in before.items():
        assert torch.equal(after[key], value), key
    assert sum(".srformer.raf." in k for k in after) == 2 * 3  # linear, leak, threshold per layer
    assert model.config.srformer["variant"] == "srformer"


def test_full_variant_keeps_the_original_modules(family):
    model = converted(BUILDERS[family](), variant="full", segment_size=4, target_length=12)
    assert not is_converted(model) and model.config.srformer["variant"] == "full"


@pytest.mark.parametrize("variant", ["full", "segmented", "srformer"])
def test_save_and_load_round_trip_gives_identical_logits(family, variant, tmp_path):
    model = converted(BUILDERS[family](), variant=variant, segment_size=4, target_length=12)
    if variant == "srformer":  # make the RAF weights differ from any fresh initialisation
        for _, _, m in cross_attention_modules(model):
            torch.nn.init.normal_(m.srformer.raf.linear.weight)
            m.srformer.raf.leak.data.fill_(0.7)
    ids, mask = padded_batch(model)
    dec = decoder_inputs(model, ids.shape[0], 9)
    model.save_pretrained(tmp_path)
    loaded = srformer.from_pretrained(str(tmp_path))
    assert type(loaded) is type(model)
    assert srformer.models.srformer_config_of(loaded) == srformer.models.srformer_config_of(model)
    assert srformer.models.srformer_config_of(loaded).variant == variant
    assert_exact(
        teacher_forced_logits(loaded, ids, mask, dec), teacher_forced_logits(model, ids, mask, dec), "reloaded"
    )


def test_loading_as_another_variant_is_an_error(tmp_path):
    converted(BUILDERS["t5"](), **SETTINGS).save_pretrained(tmp_path)
    with pytest.raises(ValueError, match="variant 'srformer'.*but variant 'segmented'"):
        srformer.from_pretrained(
            str(tmp_path), srformer.SRformerConfig(variant="segmented", segment_size=4, target_length=12)
        )


def test_checkpoint_missing_raf_weights_is_an_error(tmp_path):
    model = converted(BUILDERS["t5"](), variant="segmented", segment_size=4, target_length=12)
    model.config.srformer = dict(model.config.srformer, variant="srformer")  # mislabelled checkpoint
    model.save_pretrained(tmp_path)
    with pytest.raises(ValueError, match="lacks its weights"):
        srformer.from_pretrained(str(tmp_path))


def test_plain_checkpoint_converts_in_one_call_and_needs_settings(tmp_path):
    base = BUILDERS["bart"]()
    base.save_pretrained(tmp_path)
    with pytest.raises(ValueError, match="not an SRformer checkpoint"):
        srformer.from_pretrained(str(tmp_path))
    model = srformer.from_pretrained(str(tmp_path), srformer.SRformerConfig(**SETTINGS))
    assert is_converted(model)


def test_converting_twice_or_a_saved_srformer_model_is_an_error(tmp_path):
    model = converted(BUILDERS["t5"](), **SETTINGS)
    with pytest.raises(ValueError, match="already converted"):
        srformer.convert(model, srformer.SRformerConfig(**SETTINGS))
    model.save_pretrained(tmp_path)
    # a plain class built from the saved config (not through from_pretrained, which loads it converted)
    plain = T5ForConditionalGeneration(T5Config.from_pretrained(tmp_path))
    with pytest.raises(ValueError, match="srformer.from_pretrained"):
        srformer.convert(plain, srformer.SRformerConfig(**SETTINGS))


def test_model_without_cross_attention_is_rejected():
    gpt2 = GPT2LMHeadModel(GPT2Config(n_layer=1, n_head=2, n_embd=16, vocab_size=50, n_positions=32))
    with pytest.raises(ValueError, match="Cannot convert GPT2LMHeadModel.*Supported: T5ForConditionalGeneration"):
        srformer.convert(gpt2, srformer.SRformerConfig())


def test_config_object_is_required():
    with pytest.raises(TypeError, match="SRformerConfig"):
        srformer.convert(BUILDERS["t5"](), {"variant": "srformer"})


@pytest.mark.parametrize(
    "kwargs,match",
    [
        (dict(segment_size=0), "segment_size"),
        (dict(segment_size=-3), "segment_size"),
        (dict(target_length=0), "target_length"),
        (dict(variant="no-such-variant"), "Unknown SRformer variant 'no-such-variant'"),
        (dict(raf_threshold_init=0.0), "raf_threshold_init"),
    ],
)
def test_bad_settings_give_clear_errors(kwargs, match):
    with pytest.raises(ValueError, match=match):
        srformer.SRformerConfig(**kwargs)


@pytest.mark.parametrize("variant", mechanisms())
def test_empty_document_in_a_batch_gives_finite_output_and_leaves_other_rows_alone(family, variant):
    """An all-zero encoder mask row (as transformers' testers draw, or an empty input in a batch): its
    cross attention is that of an empty memory (0), nothing raises, and the other rows equal running
    them alone, in teacher forcing and in generate()."""
    model = converted(BUILDERS[family](), **{**SETTINGS, "variant": variant})
    ids, mask = padded_batch(model)
    mask[1] = 0
    decoder_ids = decoder_inputs(model, 3, 6)
    with torch.no_grad():
        logits = model(input_ids=ids, attention_mask=mask, decoder_input_ids=decoder_ids).logits
        assert torch.isfinite(logits).all()
        generated = model.generate(
            input_ids=ids, attention_mask=mask, generation_config=plain_generation_config(model, max_new_tokens=5,
                                                                                          min_new_tokens=5)
        )
        for row in (0, 2):
            alone = model(input_ids=ids[row : row + 1], attention_mask=mask[row : row + 1],
                          decoder_input_ids=decoder_ids[row : row + 1]).logits
            assert_exact(logits[row : row + 1], alone, f"row {row} next to an empty row")
            alone_generated = model.generate(
                input_ids=ids[row : row + 1], attention_mask=mask[row : row + 1],
                generation_config=plain_generation_config(model, max_new_tokens=5, min_new_tokens=5),
            )
            assert torch.equal(generated[row : row + 1], alone_generated)


def test_gradients_reach_raf_parameters_and_projections(family):
    model = converted(BUILDERS[family](), **SETTINGS).train()
    ids, mask = padded_batch(model)
    labels = decoder_inputs(model, ids.shape[0], 12)[:, 1:].contiguous()
    model(input_ids=ids, attention_mask=mask, labels=labels).loss.backward()
    for _, _, module in cross_attention_modules(model):
        raf = module.srformer.raf
        for p in (raf.leak, raf.threshold, raf.linear.weight):
            assert p.grad is not None and p.grad.abs().sum() > 0


def _tiny_family_models():
    torch.manual_seed(0)
    common_bart = dict(vocab_size=96, d_model=32, encoder_layers=1, decoder_layers=2, encoder_attention_heads=4,
                       decoder_attention_heads=4, encoder_ffn_dim=32, decoder_ffn_dim=32, max_position_embeddings=64,
                       dropout=0.0, attention_dropout=0.0, pad_token_id=1, eos_token_id=2, decoder_start_token_id=2)
    mt5 = dict(vocab_size=96, d_model=32, d_ff=32, num_layers=1, num_decoder_layers=2, num_heads=4, d_kv=8,
               dropout_rate=0.0, decoder_start_token_id=0)
    return {
        "mt5": MT5ForConditionalGeneration(MT5Config(**mt5)),
        "mbart": MBartForConditionalGeneration(MBartConfig(**common_bart)),
        "pegasus": PegasusForConditionalGeneration(PegasusConfig(**common_bart)),
        "marian": MarianMTModel(MarianConfig(**common_bart)),
    }


@pytest.mark.parametrize("name", ["mt5", "mbart", "pegasus", "marian"])
def test_other_supported_families_convert_and_stay_exact(name):
    base = _tiny_family_models()[name].double().eval()
    ids, mask = padded_batch(base, lengths=(20, 11))
    dec = decoder_inputs(base, 2, 8)
    one_segment = converted(base, variant="segmented", segment_size=20, target_length=12)
    full = teacher_forced_logits(base, ids, mask, dec)
    assert_exact(teacher_forced_logits(one_segment, ids, mask, dec), full, "one segment vs full")
    model = converted(base, **SETTINGS)
    parallel = teacher_forced_logits(model, ids, mask, dec)
    assert_exact(step_by_step_logits(model, ids, mask, dec), parallel, "incremental vs parallel")


def test_every_submodule_config_is_the_models_pretrained_config(family):
    """transformers' convention (and its own tests, e.g. ``_attn_implementation`` lookups): a
    submodule's ``.config`` is the model's ``PretrainedConfig``; srformer's settings live in ``.settings``."""
    model = converted(BUILDERS[family](), variant="srformer", segment_size=4, target_length=12)
    for name, module in model.named_modules():
        config = getattr(module, "config", None)
        assert config is None or isinstance(config, PretrainedConfig), name
    for _, _, module in cross_attention_modules(model):
        assert module.srformer.settings == srformer.models.srformer_config_of(model)
