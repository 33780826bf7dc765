"""LED, LongT5 (local and transient-global), PEGASUS-X and BigBirdPegasus (block-sparse and full) converted, with
the guarantees T5 and BART have (their fuller matrices: test_exactness, test_variants, test_generation*):

- a converted ``full`` is the original model, bit for bit;
- every named setting gives the same logits step by step (generation's path) as teacher-forced (the parallel path),
  and each row of a padded batch the logits it gets alone, given the same encoder output (the families' own encoders
  are not all padding-invariant: BigBirdPegasus's block-sparse attention plans its blocks over the padded length);
- one segment covering the input reduces ``segmented`` and ``srformer`` to full attention;
- every ``generate()`` strategy with a cache equals it without; the static cache; transformers' compiled step
  (``fullgraph``) where the family declares one;
- save and reload through the Auto and the concrete classes; ``output_attentions``; training through
  ``Seq2SeqTrainer``.
Tiny float64 models with random weights (:data:`tests.models.conftest.LONG_BUILDERS`).
"""

from __future__ import annotations

import pytest
import torch
from transformers import AutoModel, AutoModelForSeq2SeqLM
from transformers.modeling_outputs import BaseModelOutput

import srformer
from srformer.config import NAMED_SETTINGS
from srformer.models import cross_attention_modules, is_converted
from tests.models.conftest import (
    LONG_BUILDERS,
    LONG_LENGTHS,
    converted,
    decoder_inputs,
    padded_batch,
    plain_generation_config,
)
from tests.models.test_exactness import step_by_step_logits, teacher_forced_logits
from tests.models.test_generation_compile import assert_eager_tokens_and_logits, compiled_generate
from tests.models.test_seq2seq_trainer import check_trainer_trains_and_predicts_like_generate
from tests.registry_cases import named_settings
from tests.tolerance import assert_exact

FAMILIES = list(LONG_BUILDERS)
SETTINGS = dict(segment_size=8, target_length=12)
#: The settings every family's generation, loading and training are checked with (the paper's two and the
#: long-input picks).
CHECKED = ("srformer", "segmented", "knn-rows", "knn-loki")


def _model(family: str, name: str, **settings):
    base = LONG_BUILDERS[family]()
    return converted(base, **{**SETTINGS, **NAMED_SETTINGS.get(name, {"variant": name}), **settings})


def _batch(model):
    return padded_batch(model, lengths=LONG_LENGTHS)


def _encoded(model, ids, mask) -> BaseModelOutput:
    with torch.no_grad():
        return model.get_encoder()(input_ids=ids, attention_mask=mask)


def _teacher_forced(model, encoded, mask, dec):
    return teacher_forced_logits(model, None, mask, dec, encoder_outputs=encoded)


def _step_by_step(model, encoded, mask, dec):
    return step_by_step_logits(model, None, mask, dec, encoder_outputs=encoded)


@pytest.mark.parametrize("family", FAMILIES)
def test_every_family_converts_to_its_own_classes(family):
    model = _model(family, "srformer")
    modules = cross_attention_modules(model)
    assert is_converted(model) and modules
    assert all(hasattr(module, "srformer") for _, _, module in modules)
    assert model.config.model_type == "srformer_" + LONG_BUILDERS[family]().config.model_type
    assert type(model).__name__ == "SRformer" + type(LONG_BUILDERS[family]()).__name__


@pytest.mark.parametrize("family", FAMILIES)
def test_converted_full_is_the_original_model(family):
    base = LONG_BUILDERS[family]()
    model = converted(base, variant="full")
    ids, mask = _batch(base)
    dec = decoder_inputs(base, ids.shape[0], 9)
    with torch.no_grad():
        expected = base(input_ids=ids, attention_mask=mask, decoder_input_ids=dec).logits
        got = model(input_ids=ids, attention_mask=mask, decoder_input_ids=dec).logits
    assert torch.equal(got, expected)
    config = plain_generation_config(base, max_new_tokens=8, num_beams=2)
    with torch.no_grad():
        assert torch.equal(model.generate(input_ids=ids, attention_mask=mask, generation_config=config),
                           base.generate(input_ids=ids, attention_mask=mask, generation_config=config))


@pytest.mark.parametrize("name", named_settings())
@pytest.mark.parametrize("family", FAMILIES)
def test_parallel_equals_incremental_and_each_row_alone(family, name):
    model = _model(family, name)
    ids, mask = _batch(model)
    encoded = _encoded(model, ids, mask)
    dec = decoder_inputs(model, ids.shape[0], 14)
    parallel = _teacher_forced(model, encoded, mask, dec)
    assert torch.isfinite(parallel).all()
    assert_exact(_step_by_step(model, encoded, mask, dec), parallel, "incremental vs parallel")
    for row, n in enumerate(LONG_LENGTHS):
        alone = BaseModelOutput(last_hidden_state=encoded.last_hidden_state[row : row + 1, :n])
        logits = _teacher_forced(model, alone, mask[row : row + 1, :n], dec[row : row + 1])
        assert_exact(logits, parallel[row : row + 1], f"row {row} alone vs batched")


@pytest.mark.parametrize("variant", ["segmented", "srformer"])
@pytest.mark.parametrize("family", FAMILIES)
def test_one_segment_covering_the_input_is_full_attention(family, variant):
    base = LONG_BUILDERS[family]()
    ids, mask = _batch(base)
    encoded = _encoded(base, ids, mask)
    dec = decoder_inputs(base, ids.shape[0], 10)
    model = converted(base, variant=variant, segment_size=ids.shape[1], target_length=16, recurrence=False)
    assert_exact(_teacher_forced(model, encoded, mask, dec), _teacher_forced(base, encoded, mask, dec),
                 "one segment vs full attention")


def _generate(model, ids, mask, **kwargs):
    config = plain_generation_config(model, max_new_tokens=13, **kwargs)
    with torch.no_grad():
        return model.generate(input_ids=ids, attention_mask=mask, generation_config=config)


@pytest.mark.parametrize("name", CHECKED)
@pytest.mark.parametrize("family", FAMILIES)
def test_every_strategy_with_a_cache_equals_without(family, name):
    model = _model(family, name)
    ids, mask = _batch(model)
    for kwargs in (dict(num_beams=1), dict(num_beams=3, num_return_sequences=2)):
        assert torch.equal(_generate(model, ids, mask, use_cache=True, **kwargs),
                           _generate(model, ids, mask, use_cache=False, **kwargs))
    for kwargs in (dict(num_return_sequences=2), dict(num_beams=2)):
        torch.manual_seed(3)
        sampled = _generate(model, ids, mask, do_sample=True, top_k=0, use_cache=True, **kwargs)
        torch.manual_seed(3)
        assert torch.equal(sampled, _generate(model, ids, mask, do_sample=True, top_k=0, use_cache=False, **kwargs))


@pytest.mark.parametrize("family", FAMILIES)
def test_static_cache_where_the_family_has_one(family):
    model = _model(family, "srformer")
    ids, mask = _batch(model)
    static = _generate(model, ids, mask, cache_implementation="static")
    assert torch.equal(static, _generate(model, ids, mask))


@pytest.mark.parametrize("name", CHECKED)
@pytest.mark.parametrize("family", FAMILIES)
def test_save_and_reload_through_the_auto_and_the_concrete_classes(family, name, tmp_path):
    model = _model(family, name)
    for _, _, module in cross_attention_modules(model):  # parameters unlike any fresh initialisation
        for parameter in module.srformer.parameters():
            torch.nn.init.uniform_(parameter, 0.2, 0.6)
    ids, mask = _batch(model)
    encoded = _encoded(model, ids, mask)
    dec = decoder_inputs(model, ids.shape[0], 9)
    expected = _teacher_forced(model, encoded, mask, dec)
    model.save_pretrained(tmp_path)
    concrete = type(LONG_BUILDERS[family]())
    for load in (srformer.from_pretrained, AutoModelForSeq2SeqLM.from_pretrained, concrete.from_pretrained):
        loaded = load(str(tmp_path)).to(torch.float64).eval()
        assert is_converted(loaded), load
        assert_exact(_teacher_forced(loaded, encoded, mask, dec), expected, f"reloaded by {load}")
    base = AutoModel.from_pretrained(str(tmp_path))
    assert is_converted(base) and type(base).__name__.startswith("SRformer")


@pytest.mark.parametrize("family", FAMILIES)
def test_output_attentions_gives_one_map_per_layer_shaped_as_the_original(family):
    base = LONG_BUILDERS[family]("eager")
    model = converted(base, variant="srformer", **SETTINGS)
    ids, mask = _batch(base)
    dec = decoder_inputs(base, ids.shape[0], 6)
    with torch.no_grad():
        plain = base(input_ids=ids, attention_mask=mask, decoder_input_ids=dec, output_attentions=True)
        mine = model(input_ids=ids, attention_mask=mask, decoder_input_ids=dec, output_attentions=True)
    assert len(mine.cross_attentions) == len(plain.cross_attentions) > 0
    for weights, reference in zip(mine.cross_attentions, plain.cross_attentions, strict=True):
        assert weights is not None and weights.shape == reference.shape
        sums = weights.sum(-1)
        assert torch.allclose(sums[sums > 0], torch.ones_like(sums[sums > 0]))


@pytest.mark.slow
@pytest.mark.parametrize("family", FAMILIES)
def test_seq2seq_trainer_trains_and_predicts_like_generate(family, tmp_path):
    """LED's own encoder gives NaN gradients for a batch with padding, its own to a multiple of ``attention_window``
    included (the plain model too, in transformers 5.25), so its sources are 32 tokens, a multiple of its 8."""
    lengths = (31, 31) if family == "led" else (10, 30)
    check_trainer_trains_and_predicts_like_generate(_model(family, "srformer"), 2, tmp_path, source_lengths=lengths)


#: The long-document families whose transformers classes declare a step that compiles in one graph
#: (``_can_compile_fullgraph``: PEGASUS-X and BigBirdPegasus; LED and LongT5 do not).
COMPILABLE = [family for family in FAMILIES if type(LONG_BUILDERS[family]())._can_compile_fullgraph]


@pytest.mark.parametrize("name", ["srformer", "knn-loki"])
@pytest.mark.parametrize("family", COMPILABLE)
def test_fullgraph_compiled_static_cache_generate_equals_eager(family, name):
    """transformers' compiled decoding step (static cache, ``fullgraph=True``, ``aot_eager``) gives eager's tokens,
    and its logits within float64 rounding plus one float32 rounding of each side (see test_generation_compile)."""
    model = _model(family, name)
    compiled, eager, graphs = compiled_generate(model, "aot_eager", _batch(model))
    assert graphs >= 1, "generate() did not compile the decoder step"
    assert_eager_tokens_and_logits(compiled, eager)
