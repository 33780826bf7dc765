"""Every named variant (baselines, ablations, Eq. 10 mix) inside T5 and BART: parallel ==
incremental with padded sources, padding invariance, generation with and without a cache in every
decoding mode, save/load, and the checkpoint guard between variants."""

from __future__ import annotations

import pytest
import torch

import srformer
from srformer.config import NAMED_SETTINGS
from srformer.models import cross_attention_modules
from tests.models.conftest import BUILDERS, converted, decoder_inputs, padded_batch, plain_generation_config
from tests.models.test_exactness import step_by_step_logits, teacher_forced_logits
from tests.registry_cases import at_test_size, full_attention_at, named_settings
from tests.tolerance import assert_exact

NAMES = named_settings()


def _model(family, name, **settings):
    settings = {"segment_size": 4, "target_length": 12, **NAMED_SETTINGS[name], **at_test_size(name), **settings}
    return converted(BUILDERS[family](), **settings)


@pytest.mark.parametrize("name", NAMES)
def test_parallel_equals_incremental_and_padding_does_not_matter(family, name):
    model = _model(family, name)
    lengths = (24, 17, 9)
    ids, mask = padded_batch(model, lengths=lengths)
    dec = decoder_inputs(model, ids.shape[0], 14)
    parallel = teacher_forced_logits(model, ids, mask, dec)
    assert torch.isfinite(parallel).all()
    assert_exact(step_by_step_logits(model, ids, mask, dec), parallel, "incremental vs parallel")
    for row, n in enumerate(lengths):
        alone = teacher_forced_logits(model, ids[row : row + 1, :n], mask[row : row + 1, :n], dec[row : row + 1])
        assert_exact(alone, parallel[row : row + 1], f"row {row} alone vs batched")


#: Named settings that change only the backward pass (a surrogate derivative) and the setting whose forward
#: values they share.
FORWARD_EQUAL = {"srformer-surrogate": "srformer"}
#: Named settings that read every real key of these inputs (at most 24 tokens), so full attention by definition: the
#: mechanisms that select keys (``Capabilities.selects_keys``) whose budget covers 24 tokens (``knn`` at its default
#: 32 top keys, ``block-topk-b4`` with 16 blocks of 4 besides its segment, ``quest`` with 16 leaves of 16 and
#: ``quest-tree`` with 64 of 2); ``knn-4`` and ``block-topk`` are the guards against a fallback there.
FULL_AT_THESE_LENGTHS = full_attention_at(24, segment_size=4, target_length=12)


@pytest.mark.parametrize("name", NAMES)
def test_each_variant_computes_something_different(family, name):
    """Guard: a variant that silently fell back to another would pass every test above. Such a fallback agrees
    with the other variant to float64 rounding (``exact_tolerance``, about 1e-10 here); the bound 1e-6 sits far
    above that and below the closest honest pair: ``performer`` estimates full attention, and in BART's tiny
    model (0.02-std weights, small scores) its logits come within 8.4e-5 of full attention's."""
    base = BUILDERS[family]()
    ids, mask = padded_batch(base)
    dec = decoder_inputs(base, ids.shape[0], 14)
    logits = {
        other: teacher_forced_logits(_model(family, other), ids, mask, dec) for other in ("segmented", "srformer")
    }
    logits["full"] = teacher_forced_logits(base, ids, mask, dec)
    mine = teacher_forced_logits(_model(family, name), ids, mask, dec)
    for other, reference in logits.items():
        if other == FORWARD_EQUAL.get(name):  # a backward-only setting: the same forward values, bit for bit
            assert torch.equal(mine, reference), other
        elif other == "full" and name in FULL_AT_THESE_LENGTHS:
            assert_exact(mine, reference, "every key read: full attention")
        elif other != name:
            assert (mine - reference).abs().max().item() > 1e-6, other


def test_xl_with_one_segment_covering_the_input_equals_full_attention(family):
    base = BUILDERS[family]()
    ids, mask = padded_batch(base)
    dec = decoder_inputs(base, ids.shape[0], 10)
    full = teacher_forced_logits(base, ids, mask, dec)
    one_segment = _model(family, "xl", segment_size=ids.shape[1])
    assert_exact(teacher_forced_logits(one_segment, ids, mask, dec), full, "xl one segment")


def _generate(model, ids, mask, **kwargs):
    config = plain_generation_config(model, max_new_tokens=12, **kwargs)
    with torch.no_grad():
        return model.generate(input_ids=ids, attention_mask=mask, generation_config=config)


@pytest.mark.parametrize("name", NAMES)
def test_greedy_beam_and_sampling_with_cache_equal_without(family, name):
    model = _model(family, name)
    ids, mask = padded_batch(model)
    for kwargs in (dict(num_beams=1), dict(num_beams=3, num_return_sequences=3)):
        cached = _generate(model, ids, mask, use_cache=True, **kwargs)
        assert torch.equal(cached, _generate(model, ids, mask, use_cache=False, **kwargs))
    torch.manual_seed(3)
    sampled = _generate(model, ids, mask, do_sample=True, top_k=0, num_return_sequences=2, use_cache=True)
    torch.manual_seed(3)
    uncached = _generate(model, ids, mask, do_sample=True, top_k=0, num_return_sequences=2, use_cache=False)
    assert torch.equal(sampled, uncached)


@pytest.mark.parametrize("name", NAMES)
def test_beam_search_is_padding_invariant(name):
    model = _model("t5", name)
    lengths = (9, 24, 17)
    ids, mask = padded_batch(model, lengths=lengths)
    batched = _generate(model, ids, mask, num_beams=3)
    for row, n in enumerate(lengths):
        alone = _generate(model, ids[row : row + 1, :n], mask[row : row + 1, :n], num_beams=3)[0]
        assert torch.equal(batched[row][: alone.shape[0]], alone)


@pytest.mark.parametrize("name", NAMES)
def test_save_load_round_trip_and_variant_guard(name, tmp_path):
    model = _model("bart", name)
    for _, _, module in cross_attention_modules(model):  # parameters unlike any fresh initialisation
        for parameter in module.srformer.parameters():
            torch.nn.init.uniform_(parameter, 0.2, 0.6)
    ids, mask = padded_batch(model)
    dec = decoder_inputs(model, ids.shape[0], 9)
    model.save_pretrained(tmp_path)
    loaded = srformer.from_pretrained(str(tmp_path))
    assert srformer.models.srformer_config_of(loaded) == srformer.models.srformer_config_of(model)
    assert_exact(
        teacher_forced_logits(loaded, ids, mask, dec), teacher_forced_logits(model, ids, mask, dec), "reloaded"
    )
    other = "srformer" if name != "srformer" else "ablation-II"
    with pytest.raises(ValueError, match="was requested"):
        srformer.from_pretrained(str(tmp_path), srformer.named_config(other, segment_size=4, target_length=12))


@pytest.mark.parametrize("name", NAMES)
def test_training_step_gives_finite_gradients_to_every_parameter(family, name):
    model = _model(family, name).train()
    ids, mask = padded_batch(model)
    labels = decoder_inputs(model, ids.shape[0], 10)[:, 1:].contiguous()
    loss = model(input_ids=ids, attention_mask=mask, labels=labels).loss
    loss.backward()
    assert torch.isfinite(loss)
    for _, _, module in cross_attention_modules(model):
        for parameter_name, parameter in module.named_parameters():
            assert parameter.grad is not None and torch.isfinite(parameter.grad).all(), parameter_name
        for parameter_name, parameter in module.srformer.named_parameters():
            assert parameter.grad.abs().sum() > 0, parameter_name
