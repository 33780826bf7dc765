"""transformers' cache contract on converted models, for every registered mechanism (and its lean layout).

What transformers' generation tests read from an encoder-decoder cache: ``cross_attention_cache.get_seq_length()``
is the encoder length, and every cross-attention layer's ``keys``/``values`` are (batch, heads, encoder length,
head_dim). A converted layer keeps its own state layout (``SRformerCacheLayer``) and presents that view on top of
it: the projected encoder keys/values in encoder order for a state that keeps them, else a zero tensor of that
shape with no memory of its own (``docs/design.md``, "Generation cache"). Also checked: ``generate()`` with
every output asked for, greedy and beam search, and assisted decoding with a second tiny model equal to greedy.
"""

from __future__ import annotations

import functools

import pytest
import torch
from torch._dynamo.utils import counters
from transformers import CompileConfig, DynamicCache

from srformer.attention.state import SRformerCacheLayer
from srformer.config import NAMED_SETTINGS
from srformer.core import mechanism
from srformer.models.convert import cross_attention_modules
from srformer.models.families import describe
from tests.models.conftest import BUILDERS, converted, padded_batch, plain_generation_config
from tests.registry_cases import lean_variants, mechanisms

SETTINGS = dict(segment_size=4, target_length=12)
LENGTHS = (24, 17, 9)  # right padded to 24
NEW_TOKENS = 6
MECHANISMS = mechanisms()
LAYOUTS = [(name, False) for name in MECHANISMS] + [(name, True) for name in lean_variants()]


def layout_id(layout) -> str:
    name, lean = layout
    return f"{name}-lean" if lean else name


@functools.cache
def eager_model(family: str, name: str, lean_cache: bool):
    """A float64 converted model under the eager implementation (so attention weights can be returned)."""
    base = BUILDERS[family]("eager")
    torch.manual_seed(1)
    return converted(base, **NAMED_SETTINGS[name], lean_cache=lean_cache, **SETTINGS)


@functools.cache
def draft_model(family: str):
    """The assistant: an unconverted tiny model of the same family and vocabulary, seeded apart."""
    torch.manual_seed(3)
    model = BUILDERS[family]()
    for parameter in model.parameters():
        parameter.data.normal_(0.0, 0.05)
    return model


def run_generate(model, ids, mask, **settings):
    extra = {key: settings.pop(key) for key in ("assistant_model",) if key in settings}
    config = plain_generation_config(
        model, return_dict_in_generate=True, max_new_tokens=NEW_TOKENS, min_new_tokens=NEW_TOKENS, **settings
    )
    with torch.no_grad():
        return model.generate(input_ids=ids, attention_mask=mask, generation_config=config, **extra)


def projected_encoder_keys_values(model, ids, mask):
    """Per decoder layer, the cross attention's projected encoder keys and values (B, H, k, d), zeroed at padding."""
    with torch.no_grad():
        encoded = model.get_encoder()(input_ids=ids, attention_mask=mask).last_hidden_state
    result = []
    for _, _, module in cross_attention_modules(model):
        key_projection = module.k if hasattr(module, "k") else module.k_proj
        value_projection = module.v if hasattr(module, "v") else module.v_proj
        shape = describe(module)
        heads, head_dim = shape.num_heads, shape.head_dim
        keep = mask[:, None, :, None].to(encoded.dtype)
        with torch.no_grad():
            keys, values = (
                projection(encoded).view(*encoded.shape[:2], heads, head_dim).transpose(1, 2) * keep
                for projection in (key_projection, value_projection)
            )
        result.append((keys, values, heads, head_dim))
    return result


def check_cache_format(model, ids, mask, cache, batch: int, name: str, lean: bool) -> None:
    """The assertions transformers' generation tests make on a cache, plus the meaning of the keys."""
    encoder_length = ids.shape[1]
    cross = cache.cross_attention_cache
    assert cross.get_seq_length() == encoder_length
    expected = projected_encoder_keys_values(model, ids.repeat_interleave(batch // ids.shape[0], 0),
                                             mask.repeat_interleave(batch // ids.shape[0], 0))
    assert len(cross.layers) == len(expected)
    # the standard states that grow with the input keep the keys/values, except compressed's (k / c rows)
    keeps_keys = mechanism(name).capabilities.state_grows_with_input and not lean and name != "compressed"
    for index, (layer, (keys, values, heads, head_dim)) in enumerate(zip(cross.layers, expected, strict=True)):
        assert isinstance(layer, SRformerCacheLayer)
        assert cross.get_seq_length(index) == encoder_length and cache.is_updated[index]
        for presented, real in ((layer.keys, keys), (layer.values, values)):
            assert presented.shape == (batch, heads, encoder_length, head_dim)
            assert presented.dtype == model.dtype and presented.device == ids.device
            if keeps_keys:  # the projected keys/values themselves, in encoder order, zero at padding
                torch.testing.assert_close(presented, real, rtol=1e-12, atol=1e-12)
            else:  # a placeholder of the right shape: stride 0, one element of memory
                assert presented.stride() == (0, 0, 0, 0) and not presented.any()
                assert presented.untyped_storage().nbytes() == presented.element_size()
    # the legacy tuple view transformers' ``__iter__`` gives (self keys, values, ..., cross keys, values, ...);
    # transformers' StaticCache is not iterable, for any model
    if isinstance(cache.self_attention_cache, DynamicCache):
        for entry in cache:
            assert any(isinstance(x, torch.Tensor) and x.shape[2] == encoder_length for x in entry)


@pytest.mark.parametrize("layout", LAYOUTS, ids=layout_id)
def test_greedy_dict_output_and_cache_format(family, layout):
    name, lean = layout
    model = eager_model(family, name, lean)
    ids, mask = padded_batch(model, LENGTHS)
    out = run_generate(model, ids, mask, output_scores=True, output_logits=True, output_attentions=True,
                       output_hidden_states=True)
    assert out.sequences.shape == (len(LENGTHS), NEW_TOKENS + 1)
    assert len(out.scores) == len(out.logits) == len(out.cross_attentions) == NEW_TOKENS
    assert all(weights.shape[-1] == ids.shape[1] for step in out.cross_attentions for weights in step)
    assert out.past_key_values.get_seq_length() == NEW_TOKENS  # the decoder tokens fed (all but the last)
    check_cache_format(model, ids, mask, out.past_key_values, len(LENGTHS), name, lean)


@pytest.mark.parametrize("layout", LAYOUTS, ids=layout_id)
def test_beam_dict_output_and_cache_format(family, layout):
    name, lean = layout
    model = eager_model(family, name, lean)
    ids, mask = padded_batch(model, LENGTHS)
    out = run_generate(model, ids, mask, num_beams=2, output_scores=True, output_attentions=True)
    assert out.sequences.shape == (len(LENGTHS), NEW_TOKENS + 1) and out.sequences_scores.shape == (len(LENGTHS),)
    assert len(out.scores) == NEW_TOKENS and out.beam_indices.shape[0] == len(LENGTHS)
    check_cache_format(model, ids, mask, out.past_key_values, 2 * len(LENGTHS), name, lean)


@pytest.mark.parametrize("layout", LAYOUTS, ids=layout_id)
def test_assisted_decoding_with_a_second_model_equals_greedy(family, layout):
    """transformers' ``test_assisted_decoding_matches_greedy_search`` in substance: with a draft model whose
    candidates are mostly rejected (an unrelated tiny model), the result is plain greedy decoding, and the
    cache it returns still has the contract's format."""
    name, lean = layout
    model = eager_model(family, name, lean)
    ids, mask = padded_batch(model, LENGTHS)
    ids, mask = ids[1:2], mask[1:2]  # transformers' assisted decoding takes one sequence
    greedy = run_generate(model, ids, mask, output_scores=True)
    assisted = run_generate(model, ids, mask, output_scores=True, assistant_model=draft_model(family))
    assert torch.equal(assisted.sequences, greedy.sequences)
    for a, b in zip(assisted.scores, greedy.scores, strict=True):
        torch.testing.assert_close(a, b, rtol=1e-5, atol=1e-5)
    check_cache_format(model, ids, mask, assisted.past_key_values, 1, name, lean)


COMPILED = [("t5", "srformer", False), ("t5", "srformer", True), ("bart", "srformer", False),
            ("t5", "compressed", False), ("bart", "routing", False)]


@pytest.mark.parametrize("family,name,lean", COMPILED)
def test_compiled_generate_with_every_output(family, name, lean):
    """transformers compiles the decoding step with a static cache (``fullgraph``; ``aot_eager`` here, see
    ``tests/models/test_generation_compile.py``): with every output asked for, including the attention weights
    (the output computed from them), the tokens and weights equal eager ones and the cache keeps the format."""
    model = eager_model(family, name, lean)
    ids, mask = padded_batch(model, LENGTHS)
    outputs = dict(output_scores=True, output_logits=True, output_attentions=True, output_hidden_states=True)
    compile_config = CompileConfig(backend="aot_eager", fullgraph=True, mode=None, dynamic=False)
    compile_config._compile_all_devices = True  # transformers' own switch to compile on a CPU
    torch._dynamo.reset()
    counters.clear()
    try:
        compiled = run_generate(model, ids, mask, cache_implementation="static", compile_config=compile_config,
                                **outputs)
        assert counters["stats"]["unique_graphs"] >= 1, "generate() did not compile the decoder step"
    finally:
        torch._dynamo.reset()
    eager = run_generate(model, ids, mask, cache_implementation="static", **outputs)
    assert torch.equal(compiled.sequences, eager.sequences)
    for compiled_step, eager_step in zip(compiled.cross_attentions, eager.cross_attentions, strict=True):
        for a, b in zip(compiled_step, eager_step, strict=True):
            torch.testing.assert_close(a, b, rtol=1e-12, atol=1e-12)
    check_cache_format(model, ids, mask, compiled.past_key_values, len(LENGTHS), name, lean)


def test_cache_layer_views_follow_reordering_and_reset():
    """Cropping, beam reordering, repetition, selection, offloading and reset act on the state, and the
    presented keys follow it."""
    model = eager_model("t5", "segmented", False)
    ids, mask = padded_batch(model, LENGTHS)
    out = run_generate(model, ids, mask)
    layer = out.past_key_values.cross_attention_cache.layers[0]
    before = layer.keys.clone()
    out.past_key_values.crop(-2)  # the self-attention part only: the cross-attention state does not grow
    assert out.past_key_values.get_seq_length() == NEW_TOKENS - 2 and torch.equal(layer.keys, before)
    layer.reorder_cache(torch.tensor([2, 0, 1]))
    assert torch.equal(layer.keys, before[[2, 0, 1]])
    layer.batch_repeat_interleave(2)
    assert torch.equal(layer.values[::2], layer.values[1::2]) and layer.keys.shape[0] == 6
    layer.batch_select_indices(torch.tensor([2]))
    assert torch.equal(layer.keys, before[[0]]) and layer.get_seq_length() == ids.shape[1]
    layer.offload()
    layer.prefetch()
    assert torch.equal(layer.keys, before[[0]]) and layer.device == ids.device
    with pytest.raises(AttributeError, match="set_state"):
        layer.keys = before
    out.past_key_values.reset()
    assert layer.keys is None and layer.get_seq_length() == 0 and not out.past_key_values.is_updated[0]
