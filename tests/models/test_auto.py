"""Reloading a converted checkpoint through transformers' own entry points (AutoModelForSeq2SeqLM, AutoModel,
pipeline) gives the converted model; without srformer's registration loading fails loudly; checkpoints of
the earlier format (model_type "t5"/"bart" with an ``srformer`` entry) still load through
srformer.from_pretrained."""

from __future__ import annotations

import json
import subprocess
import sys
import textwrap

import pytest
import torch
from transformers import (
    AutoConfig,
    AutoModel,
    AutoModelForQuestionAnswering,
    AutoModelForSeq2SeqLM,
    BartForQuestionAnswering,
    BartModel,
    T5Model,
)

import srformer
from srformer.models import cross_attention_modules, is_converted, srformer_config_of
from srformer.models.auto import MODEL_CLASSES
from tests.models.conftest import BUILDERS, converted, decoder_inputs, padded_batch
from tests.models.test_convert import _tiny_family_models
from tests.models.test_exactness import teacher_forced_logits
from tests.tolerance import assert_exact

SEGMENTS = dict(segment_size=4, target_length=12)
BASE_CLASSES = {"t5": T5Model, "bart": BartModel}


def converted_checkpoint(base, variant: str, path, **settings):
    """Convert ``base`` (a deep copy), give the RAF parameters values no initialisation produces (so that a
    reload which re-initialised them would show), save to ``path``; returns the converted model."""
    model = converted(base, variant=variant, **{**SEGMENTS, **settings})
    with torch.no_grad():
        for _, _, module in cross_attention_modules(model):
            raf = getattr(getattr(module, "srformer", None), "raf", None)
            if raf is not None:
                torch.nn.init.normal_(raf.linear.weight)
                raf.leak.fill_(0.7)
                raf.threshold.fill_(0.05)
    model.save_pretrained(path)
    return model


def assert_same_converted_model(loaded, model, what: str) -> None:
    assert is_converted(loaded), f"{what}: loaded without SRformer cross attention"
    assert srformer_config_of(loaded) == srformer_config_of(model), what
    expected = model.state_dict()
    for key, value in loaded.state_dict().items():
        assert torch.equal(value, expected[key]), f"{what}: {key}"


@pytest.mark.parametrize("variant", ["segmented", "srformer"])
def test_auto_model_for_seq2seq_lm_reloads_the_converted_model(family, variant, tmp_path):
    model = converted_checkpoint(BUILDERS[family](), variant, tmp_path)
    saved = json.loads((tmp_path / "config.json").read_text())
    assert saved["model_type"] == f"srformer_{family}"
    assert saved["architectures"] == [type(model).__name__]
    ids, mask = padded_batch(model)
    dec = decoder_inputs(model, ids.shape[0], 9)
    expected = teacher_forced_logits(model, ids, mask, dec)
    for name, loaded in [
        ("AutoModelForSeq2SeqLM", AutoModelForSeq2SeqLM.from_pretrained(tmp_path)),
        ("type(model)", type(model).from_pretrained(tmp_path)),
        ("srformer.from_pretrained", srformer.from_pretrained(str(tmp_path))),
    ]:
        assert type(loaded) is type(model), name
        assert_same_converted_model(loaded, model, name)
        assert_exact(teacher_forced_logits(loaded.eval(), ids, mask, dec), expected, name)
        # transformers records hidden states by model class: the re-classed and reloaded models return them
        with torch.no_grad():
            states = [m(input_ids=ids, attention_mask=mask, decoder_input_ids=dec, use_cache=False,
                        output_hidden_states=True).decoder_hidden_states for m in (model, loaded)]
        assert states[0] is not None and len(states[0]) == len(states[1]) == 3, name
        assert_exact(torch.stack(states[1]), torch.stack(states[0]), f"{name}: decoder hidden states")


@pytest.mark.parametrize("variant", ["segmented", "srformer"])
def test_auto_model_loads_the_base_model_with_converted_cross_attention(family, variant, tmp_path):
    model = converted_checkpoint(BUILDERS[family](), variant, tmp_path)
    base = AutoModel.from_pretrained(tmp_path).eval()
    assert isinstance(base, BASE_CLASSES[family]) and is_converted(base)
    assert srformer_config_of(base) == srformer_config_of(model)
    ids, mask = padded_batch(model)
    dec = decoder_inputs(model, ids.shape[0], 9)
    with torch.no_grad():
        hidden = base(input_ids=ids, attention_mask=mask, decoder_input_ids=dec, use_cache=False).last_hidden_state
        encoded = model.get_encoder()(input_ids=ids, attention_mask=mask).last_hidden_state
        expected = model.get_decoder()(input_ids=dec, encoder_hidden_states=encoded, encoder_attention_mask=mask,
                                       use_cache=False).last_hidden_state
    assert_exact(hidden, expected, "AutoModel decoder output")


def test_the_full_variant_stays_a_plain_model_and_reloads_as_one(family, tmp_path):
    """``full`` changes no module: its checkpoint is the plain model's (model type t5/bart), with the settings
    recorded; every entry point loads that same plain model."""
    model = converted_checkpoint(BUILDERS[family](), "full", tmp_path)
    assert json.loads((tmp_path / "config.json").read_text())["model_type"] == family
    ids, mask = padded_batch(model)
    dec = decoder_inputs(model, ids.shape[0], 9)
    expected = teacher_forced_logits(model, ids, mask, dec)
    for loaded in (AutoModelForSeq2SeqLM.from_pretrained(tmp_path), srformer.from_pretrained(str(tmp_path))):
        assert type(loaded) is type(model) and not is_converted(loaded)
        assert srformer_config_of(loaded).variant == "full"
        assert_exact(teacher_forced_logits(loaded.eval(), ids, mask, dec), expected, "full")


@pytest.mark.parametrize("name", ["mt5", "mbart", "pegasus", "marian"])
def test_other_families_reload_through_the_auto_classes(name, tmp_path):
    base = _tiny_family_models()[name].double().eval()
    model = converted_checkpoint(base, "srformer", tmp_path, mix_init=0.3)
    assert json.loads((tmp_path / "config.json").read_text())["model_type"] == f"srformer_{name}"
    ids, mask = padded_batch(model, lengths=(20, 11))
    dec = decoder_inputs(model, 2, 8)
    loaded = AutoModelForSeq2SeqLM.from_pretrained(tmp_path).eval()
    assert type(loaded) is type(model)
    assert_same_converted_model(loaded, model, name)
    assert_exact(teacher_forced_logits(loaded, ids, mask, dec), teacher_forced_logits(model, ids, mask, dec), name)
    assert is_converted(AutoModel.from_pretrained(tmp_path))


def test_summarization_pipeline_loads_the_converted_model(tmp_path):
    from transformers.pipelines import SUPPORTED_TASKS

    if "summarization" not in SUPPORTED_TASKS:
        pytest.skip("this transformers version has no summarization pipeline (removed in transformers 5.x)")
    from transformers import pipeline

    from srformer.data.tokenizer import train_unigram_tokenizer

    texts = ["a short text to train a tokenizer on, with some more words"] * 20
    tokenizer = train_unigram_tokenizer(texts, vocab_size=100)
    converted_checkpoint(BUILDERS["t5"](), "srformer", tmp_path)
    summarizer = pipeline("summarization", model=str(tmp_path), tokenizer=tokenizer)
    assert is_converted(summarizer.model)


def test_another_head_loads_through_its_auto_class_and_through_srformer(tmp_path):
    """A converted head other than the two registered with srformer's own classes (here BART's question-answering
    head) gets srformer's model type too, and its Auto class loads it converted (every head of every Auto class:
    test_transformers_contract)."""
    torch.manual_seed(0)
    base = BartForQuestionAnswering(BUILDERS["bart"]().config).double().eval()
    model = converted_checkpoint(base, "srformer", tmp_path)
    assert type(model).__name__ == "SRformerBartForQuestionAnswering"
    for name, loaded in [
        ("AutoModelForQuestionAnswering", AutoModelForQuestionAnswering.from_pretrained(tmp_path)),
        ("srformer.from_pretrained", srformer.from_pretrained(str(tmp_path))),
    ]:
        assert type(loaded) is type(model), name
        assert_same_converted_model(loaded, model, name)


def test_checkpoint_of_the_earlier_format_loads_through_srformer_with_an_upgrade_message(family, tmp_path):
    """Before srformer had model types of its own, a converted checkpoint was the family's config (model type
    t5/bart, transformers' class name) plus the ``srformer`` entry. srformer.from_pretrained still loads it,
    warns, and the model it returns saves in the current format; the Auto class loads it converted too."""
    model = converted_checkpoint(BUILDERS[family](), "srformer", tmp_path / "old")
    config_file = tmp_path / "old" / "config.json"
    saved = json.loads(config_file.read_text())
    transformers_class = {own: base for base, own in MODEL_CLASSES.items()}[type(model)]
    saved.update(model_type=family, architectures=[transformers_class.__name__])
    config_file.write_text(json.dumps(saved))
    with pytest.warns(UserWarning, match="without model types of its own.*Save the returned model again"):
        loaded = srformer.from_pretrained(str(tmp_path / "old"))
    assert type(loaded) is type(model)
    assert_same_converted_model(loaded, model, "earlier format")
    # the Auto class maps model type t5/bart to transformers' class, whose from_pretrained srformer wraps
    through_auto = AutoModelForSeq2SeqLM.from_pretrained(tmp_path / "old")
    assert type(through_auto) is type(model)
    assert_same_converted_model(through_auto, model, "earlier format through AutoModelForSeq2SeqLM")
    loaded.save_pretrained(tmp_path / "new")
    assert_same_converted_model(AutoModelForSeq2SeqLM.from_pretrained(tmp_path / "new"), model, "upgraded")


def test_settings_are_required_by_the_srformer_classes():
    config = AutoConfig.for_model("srformer_t5", d_model=16, d_ff=16, num_layers=1, num_heads=2, d_kv=8)
    with pytest.raises(ValueError, match=r"needs SRformer settings in `config.srformer`.*srformer.convert"):
        AutoModelForSeq2SeqLM.from_config(config)


@pytest.mark.slow
def test_loading_without_srformer_fails_loudly(family, tmp_path):
    """In a process that never imports srformer (as where it is not installed), transformers does not know
    the model type: AutoConfig and every Auto model class raise instead of returning the unconverted model."""
    converted_checkpoint(BUILDERS[family](), "segmented", tmp_path)  # no extra weights that could warn
    script = textwrap.dedent(f"""
        import sys
        from transformers import AutoConfig, AutoModel, AutoModelForSeq2SeqLM
        for loader in (AutoConfig, AutoModelForSeq2SeqLM, AutoModel):
            try:
                loader.from_pretrained({str(tmp_path)!r})
            except ValueError as error:
                assert "srformer_{family}" in str(error), error
            else:
                raise SystemExit(f"{{loader.__name__}} loaded the checkpoint without srformer")
        assert "srformer" not in sys.modules
        print("all failed loudly")
    """)
    result = subprocess.run([sys.executable, "-c", script], capture_output=True, text=True, timeout=300)
    assert result.returncode == 0 and "all failed loudly" in result.stdout, result.stdout + result.stderr
