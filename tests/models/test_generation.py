"""generate(): every decoding mode, cache on/off, beam-state reordering, padding invariance."""

from __future__ import annotations

import pytest
import torch

from tests.models.conftest import BUILDERS, converted, padded_batch, plain_generation_config
from tests.tolerance import assert_exact

SETTINGS = dict(variant="srformer", segment_size=4, target_length=12)


def _generate(model, ids, mask, **kwargs):
    config = plain_generation_config(model, max_new_tokens=kwargs.pop("max_new_tokens", 14), **kwargs)
    with torch.no_grad():
        return model.generate(input_ids=ids, attention_mask=mask, generation_config=config)


@pytest.mark.parametrize("variant", ["segmented", "srformer"])
@pytest.mark.parametrize("num_beams", [1, 3])
def test_cache_on_equals_cache_off(family, variant, num_beams):
    model = converted(BUILDERS[family](), variant=variant, segment_size=4, target_length=12)
    ids, mask = padded_batch(model)
    kwargs = dict(num_beams=num_beams, num_return_sequences=num_beams)
    with_cache = _generate(model, ids, mask, use_cache=True, **kwargs)
    without_cache = _generate(model, ids, mask, use_cache=False, **kwargs)
    assert torch.equal(with_cache, without_cache)


def test_sampling_with_cache_equals_without(family):
    model = converted(BUILDERS[family](), **SETTINGS)
    ids, mask = padded_batch(model)
    torch.manual_seed(7)
    sampled = _generate(model, ids, mask, do_sample=True, top_k=0, use_cache=True, num_return_sequences=2)
    torch.manual_seed(7)
    again = _generate(model, ids, mask, do_sample=True, top_k=0, use_cache=False, num_return_sequences=2)
    assert sampled.shape[0] == 2 * ids.shape[0]
    assert torch.equal(sampled, again)


def _sequence_log_probability(model, ids, mask, sequence, eos):
    """Sum of teacher-forced log-probabilities of the generated tokens (decoder start excluded, eos included)."""
    tokens = sequence[1:].tolist()
    n = tokens.index(eos) + 1 if eos in tokens else len(tokens)
    decoder_input = sequence[None, :n]
    with torch.no_grad():
        logits = model(input_ids=ids, attention_mask=mask, decoder_input_ids=decoder_input, use_cache=False).logits
    log_probs = torch.log_softmax(logits.float(), dim=-1)[0]
    targets = sequence[1 : n + 1]
    return log_probs.gather(1, targets[:, None]).sum().item(), n


@pytest.mark.parametrize("length_penalty", [1.0, 0.5])
def test_beam_scores_equal_teacher_forced_log_probabilities(family, length_penalty):
    """Each returned beam's score is reproduced by a fresh teacher-forced pass over its tokens,
    so no recurrent state was lost or mixed up when beams were reordered."""
    model = converted(BUILDERS[family](), **SETTINGS)
    ids, mask = padded_batch(model)
    num_beams, returned = 4, 3
    config = plain_generation_config(
        model, max_new_tokens=14, num_beams=num_beams, num_return_sequences=returned,
        length_penalty=length_penalty, output_scores=True, return_dict_in_generate=True,
    )
    with torch.no_grad():
        out = model.generate(input_ids=ids, attention_mask=mask, generation_config=config)
    eos = model.config.eos_token_id
    for j, sequence in enumerate(out.sequences):
        row = j // returned
        log_prob, n = _sequence_log_probability(model, ids[row : row + 1], mask[row : row + 1], sequence, eos)
        assert abs(log_prob / n**length_penalty - out.sequences_scores[j].item()) <= 1e-4


def test_beam_search_reorders_state_differently_than_greedy(family):
    """Sanity check that beams actually diverge here (otherwise reordering would be untested)."""
    model = converted(BUILDERS[family](), **SETTINGS)
    ids, mask = padded_batch(model)
    config = plain_generation_config(
        model, max_new_tokens=14, num_beams=4, num_return_sequences=4, return_dict_in_generate=True
    )
    with torch.no_grad():
        out = model.generate(input_ids=ids, attention_mask=mask, generation_config=config)
    per_example = out.sequences.view(ids.shape[0], 4, -1)
    assert any(len({tuple(s.tolist()) for s in beams}) > 1 for beams in per_example)


@pytest.mark.parametrize("num_beams", [1, 3])
def test_generation_is_padding_invariant(family, num_beams):
    model = converted(BUILDERS[family](), **SETTINGS)
    lengths = (9, 24, 17)
    ids, mask = padded_batch(model, lengths=lengths)
    batched = _generate(model, ids, mask, num_beams=num_beams)
    pad = model.config.pad_token_id
    for row, n in enumerate(lengths):
        alone = _generate(model, ids[row : row + 1, :n], mask[row : row + 1, :n], num_beams=num_beams)[0]
        together = batched[row][: alone.shape[0]]
        assert torch.equal(together, alone)
        assert (batched[row][alone.shape[0] :] == pad).all()


def _first_step(module, hidden, encoder_states, **cache_arguments):
    output = module(hidden, key_value_states=encoder_states, **cache_arguments)
    return output[0]


@pytest.mark.parametrize("name", ["cache", "past_key_values"])
def test_a_converted_module_takes_the_generation_cache_under_either_name(family, name):
    """transformers up to 5.23 hands the cache to attention modules as ``past_key_values``, 5.24 as ``cache``: a
    converted module must take the incremental path under both names (a module that ignored one would silently
    recompute every step from scratch and never fill the cache)."""
    from transformers import DynamicCache, EncoderDecoderCache

    from srformer.attention.state import SRformerCacheLayer
    from srformer.models import cross_attention_modules

    model = converted(BUILDERS[family](), **SETTINGS)
    _, _, module = cross_attention_modules(model)[0]
    generator = torch.Generator().manual_seed(0)
    d_model = model.config.d_model
    hidden = torch.randn(2, 1, d_model, generator=generator, dtype=torch.float64)
    encoder_states = torch.randn(2, 10, d_model, generator=generator, dtype=torch.float64)
    cache = EncoderDecoderCache(DynamicCache(), DynamicCache())
    dummy = torch.zeros(2, 1, 1, 1, dtype=torch.float64)
    cache.self_attention_cache.update(dummy, dummy, module.layer_idx)  # decoder position 0 has been appended
    with torch.no_grad():
        stepped = _first_step(module, hidden, encoder_states, **{name: cache})
        parallel = _first_step(module, hidden, encoder_states)
    assert isinstance(cache.cross_attention_cache.layers[module.layer_idx], SRformerCacheLayer)
    assert_exact(stepped, parallel)  # float64: the two paths differ only in rounding order
    other = EncoderDecoderCache(DynamicCache(), DynamicCache())
    with pytest.raises(ValueError, match="both `cache` and `past_key_values`"):
        module(hidden, key_value_states=encoder_states, cache=cache, past_key_values=other)
