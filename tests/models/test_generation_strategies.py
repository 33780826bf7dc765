"""transformers' whole ``generate()`` contract on converted T5/BART models (the generate() matrix of docs/usage.md).

Every decoding strategy that the installed transformers ships is run on tiny float64 models of each
family and variant, with real segmentation: encoder inputs of 24, 17 and 9 tokens in 4-token
segments (6, 5 and 3 segments) and ``target_length`` 12, decoding 13 tokens so that the schedule
visits every segment and runs past ``T``. Each strategy is checked against references that carry
no generation state:

* the logits it reports at every step equal one teacher-forced pass over the tokens it produced
  (a state lost, stale, or mixed up between rows or beams changes them), and
* it returns the same tokens as the same strategy with ``use_cache=False`` (the parallel path
  recomputed from scratch at every step).

The strategies transformers moved to the Hub are pinned so the matrix is revisited if they return.
``output_attentions`` under eager is tested in ``test_attention_weights.py``.
"""

from __future__ import annotations

import copy
import dataclasses
import functools

import pytest
import torch
from transformers.generation.configuration_utils import GenerationMode
from transformers.generation.utils import GENERATION_MODES_MAPPING

from srformer.attention.state import SRformerCacheLayer
from srformer.models.convert import cross_attention_modules
from tests.models.conftest import BUILDERS, converted, padded_batch, plain_generation_config

VARIANTS = ("srformer", "segmented", "xl", "longt5", "linear", "window", "strided", "star", "fastformer")
LEAN = (("srformer", True), ("segmented", True), ("linear", True), ("fastformer", True))  # lean_cache layouts
ALL_LAYOUTS = [(v, False) for v in VARIANTS] + list(LEAN)
# A test's second strategy runs on the variants with the most state: srformer (both layouts) and linear.
RICHEST = [("srformer", False), ("srformer", True), ("linear", False)]
SETTINGS = dict(segment_size=4, target_length=12)
NEW_TOKENS = 13  # > target_length: the last steps use the schedule's final column
LENGTHS = (24, 17, 9)

# Tolerance of "equal to teacher forcing". Both sides compute the same function of float64 inputs and
# differ only by rounding, of three kinds:
# * The SRformer state (K^T V products, norm(K), the RAF recurrence, linear-attention sums) is
#   accumulated in its own dtype, read from the cache (float32 today, even in a float64 model). Its
#   longest accumulations here run over k <= 24 encoder positions, M <= 6 segments and 2 d = 16 head
#   features, so a cross-attention output carries a relative error <= STATE_TERMS * eps (Higham,
#   "Accuracy and Stability of Numerical Algorithms", Sec. 3.1: gamma_n = n u / (1 - n u), u = eps / 2).
# * The decoder after cross attention (two layers, their norms, the LM head) scales a relative error
#   of one attention output by its gain: per linear map the spectral norm of a random matrix,
#   sigma (sqrt(m) + sqrt(n)) ~ 2-3 for these 32-wide models, a few maps in a row: DECODER_GAIN = 100.
# * generate() casts the logits it reports to float32 (relative rounding eps32 / 2).
# Everything else runs in float64 (the models are cast), so with a float64 state the bound would be
# the float32 rounding of the reported logits alone. A state mixed up between examples moves the
# logits by O(0.1) of their scale or more, far above this bound (the two *_is_detected /
# *_are_detected tests check that the comparisons catch it).
STATE_TERMS = 50
DECODER_GAIN = 100
EPS32 = torch.finfo(torch.float32).eps


@functools.cache
def _model(family: str, variant: str, lean_cache: bool = False, attn_implementation: str = "sdpa"):
    """A float64 converted model; the RAF weights are seeded so lean and standard are the same model."""
    base = BUILDERS[family](attn_implementation).double()
    torch.manual_seed(1)
    return converted(base, variant=variant, lean_cache=lean_cache, **SETTINGS)


def model_for(family: str, variant: str, lean_cache: bool = False):
    return _model(family, variant, lean_cache)


def batch(model, lengths=LENGTHS, *, left: bool = False):
    """Right-padded (or left-padded) encoder inputs with ``lengths`` real tokens."""
    ids, mask = padded_batch(model, lengths=lengths)
    if left:
        for row, n in enumerate(lengths):
            ids[row], mask[row] = ids[row].roll(ids.shape[1] - n), mask[row].roll(ids.shape[1] - n)
    return ids, mask


MODEL_KWARGS = ("assistant_model", "past_key_values", "decoder_input_ids", "decoder_attention_mask")


def generate(model, ids, mask, *, seed: int = 0, **settings):
    """``model.generate`` with a seeded RNG, a dict output and generation settings without logits
    processors except ``min_new_tokens``; the arguments in ``MODEL_KWARGS`` go to ``generate`` itself."""
    extra = {key: settings.pop(key) for key in MODEL_KWARGS if key in settings}
    settings.setdefault("max_new_tokens", NEW_TOKENS)
    settings.setdefault("min_new_tokens", settings["max_new_tokens"])  # no early EOS: every segment is visited
    config = plain_generation_config(model, return_dict_in_generate=True, **settings)
    torch.manual_seed(seed)
    with torch.no_grad():
        return model.generate(input_ids=ids, attention_mask=mask, generation_config=config, **extra)


@functools.cache
def state_eps(model) -> float:
    """Machine epsilon of the least precise floating-point tensor in the model's cross-attention state
    and of the model itself (a lean ``segmented`` state holds only integer and bool tensors)."""
    ids, mask = batch(model)
    start = torch.full((ids.shape[0], 1), model.config.decoder_start_token_id)
    with torch.no_grad():
        out = model(input_ids=ids, attention_mask=mask, decoder_input_ids=start, use_cache=True)
    cache_layers = out.past_key_values.cross_attention_cache.layers
    layers = [layer for layer in cache_layers if isinstance(layer, SRformerCacheLayer)]
    assert layers, "no SRformer state was built"
    dtypes = {model.dtype} | {
        value.dtype
        for layer in layers
        for field in dataclasses.fields(layer.state)
        if isinstance(value := getattr(layer.state, field.name), torch.Tensor) and value.is_floating_point()
    }
    return max(torch.finfo(dtype).eps for dtype in dtypes)


def relative_tolerance(model) -> float:
    """Relative bound on |generation path - teacher forcing| (see the comment on STATE_TERMS)."""
    return STATE_TERMS * DECODER_GAIN * state_eps(model) + EPS32 / 2


def teacher_forced(model, ids, mask, sequences, **kwargs):
    """One parallel pass over ``sequences`` (decoder start included); encoder rows repeated to match."""
    repeats = sequences.shape[0] // ids.shape[0]
    with torch.no_grad():
        return model(
            input_ids=ids.repeat_interleave(repeats, 0), attention_mask=mask.repeat_interleave(repeats, 0),
            decoder_input_ids=sequences[:, :-1], use_cache=False, **kwargs,
        )


def logits_deviation(model, ids, mask, out) -> tuple[float, float]:
    """(max |step logits - teacher-forced logits|, tolerance) for a non-beam generate() output."""
    reported = torch.stack(out.logits, dim=1).double()
    reference = teacher_forced(model, ids, mask, out.sequences).logits
    assert reported.shape == reference.shape
    tolerance = relative_tolerance(model) * reference.abs().max().item()
    return (reported - reference).abs().max().item(), tolerance


def assert_logits_match_teacher_forcing(model, ids, mask, out) -> None:
    deviation, tolerance = logits_deviation(model, ids, mask, out)
    assert deviation <= tolerance, (deviation, tolerance)


def beam_score_deviation(model, ids, mask, out, length_penalty: float = 1.0) -> tuple[float, float]:
    """(max |beam score - teacher-forced score|, tolerance): a returned beam's score is the sum of its
    tokens' log-probabilities divided by length ** length_penalty (no logits processor changes them:
    min_new_tokens only masks EOS, which these beams never pick)."""
    reference_logits = teacher_forced(model, ids, mask, out.sequences).logits
    log_probs = torch.log_softmax(reference_logits, dim=-1)
    tokens = out.sequences[:, 1:]
    steps, vocab = tokens.shape[1], log_probs.shape[-1]
    scores = log_probs.gather(2, tokens[..., None])[..., 0].sum(dim=1) / steps**length_penalty
    # Per step: the logits' bound, doubled by log_softmax (x - logsumexp x); transformers' float32
    # log_softmax (the cast, the shift and the log of a sum of V terms: <= (V + 3) u max(|logit|, 1),
    # u = eps32 / 2); then its float32 running sum over the steps (<= steps u |score|).
    scale = reference_logits.abs().max().item()
    unit = EPS32 / 2
    per_step = 2 * relative_tolerance(model) * scale + (vocab + 3) * unit * max(scale, 1.0)
    summed = steps * unit * scores.abs().max().item() * steps**length_penalty
    tolerance = (steps * per_step + summed) / steps**length_penalty
    return (scores - out.sequences_scores.double()).abs().max().item(), tolerance


def cross_attention_chunks(model) -> tuple[list[int], list]:
    """Record the number of decoder positions of every converted cross-attention call."""
    lengths: list[int] = []
    handles = [
        module.register_forward_pre_hook(lambda _, args: lengths.append(args[0].shape[1]))
        for _, _, module in cross_attention_modules(model)
    ]
    return lengths, handles


STRATEGIES = {
    "greedy": {},
    "sampling": dict(do_sample=True, top_k=0, num_return_sequences=2),
}


# ----------------------------------------------------------------------------------- greedy, sampling
@pytest.mark.parametrize(
    "variant,lean_cache,strategy",
    [(*layout, "greedy") for layout in ALL_LAYOUTS] + [(*layout, "sampling") for layout in RICHEST],
)
def test_greedy_and_sampling(family, variant, lean_cache, strategy):
    model = model_for(family, variant, lean_cache)
    ids, mask = batch(model)
    out = generate(model, ids, mask, output_logits=True, **STRATEGIES[strategy])
    assert out.sequences.shape == (ids.shape[0] * STRATEGIES[strategy].get("num_return_sequences", 1), NEW_TOKENS + 1)
    assert_logits_match_teacher_forcing(model, ids, mask, out)
    without_cache = generate(model, ids, mask, use_cache=False, **STRATEGIES[strategy])
    assert torch.equal(out.sequences, without_cache.sequences)


# ----------------------------------------------------------------------------------- beam search
@pytest.mark.parametrize(
    "variant,lean_cache,do_sample",
    [(*layout, False) for layout in ALL_LAYOUTS] + [(*layout, True) for layout in RICHEST],
)
def test_beam_search_and_beam_sampling(family, variant, lean_cache, do_sample):
    model = model_for(family, variant, lean_cache)
    ids, mask = batch(model)
    settings = dict(num_beams=3, num_return_sequences=2, do_sample=do_sample, top_k=0, output_scores=True)
    out = generate(model, ids, mask, **settings)
    assert out.sequences.shape == (2 * ids.shape[0], NEW_TOKENS + 1)
    deviation, tolerance = beam_score_deviation(model, ids, mask, out)
    assert deviation <= tolerance, (deviation, tolerance)
    assert torch.equal(out.sequences, generate(model, ids, mask, use_cache=False, **settings).sequences)


@pytest.mark.parametrize("variant", ["srformer", "segmented"])
def test_a_state_of_another_example_is_detected(monkeypatch, family, variant):
    """The logits comparison can fail: a cache that hands each example the SRformer state of another
    (the batch rolled by one whenever a state is stored) is caught far outside the tolerance, also
    for ``segmented``, whose cross attention moves the tiny BART's logits the least."""
    model = model_for(family, variant)
    ids, mask = batch(model)
    original = SRformerCacheLayer.set_state
    monkeypatch.setattr(SRformerCacheLayer, "set_state", lambda self, state, *shape: original(self, state.map_batch(
        lambda x: x.roll(1, 0)), *shape))
    deviation, tolerance = logits_deviation(model, ids, mask, generate(model, ids, mask, output_logits=True))
    assert deviation > 100 * tolerance


def test_beams_given_another_examples_state_are_detected(monkeypatch, family):
    """The beam-score comparison can fail: beams reordered with another example's SRformer state (the
    beam index reversed over the whole batch) score far outside the tolerance. (Reordering within an
    example cannot be caught: all beams of an example hold the same state, which depends on the
    encoder output and the decoder position only, never on the tokens.)"""
    model = model_for(family, "srformer")
    ids, mask = batch(model)
    original = SRformerCacheLayer.reorder_cache
    monkeypatch.setattr(SRformerCacheLayer, "reorder_cache", lambda self, beam_idx: original(self, beam_idx.flip(0)))
    out = generate(model, ids, mask, num_beams=3, num_return_sequences=3, output_scores=True)
    deviation, tolerance = beam_score_deviation(model, ids, mask, out)
    assert deviation > 100 * tolerance


# ----------------------------------------------------------------------------------- assisted decoding
@functools.cache
def _draft(family: str, kind: str):
    if kind == "plain":
        return BUILDERS[family]().double()
    torch.manual_seed(2)
    return converted(BUILDERS[family]().double(), variant="segmented", segment_size=8, target_length=12)


def _single(model):
    """Batch of one (transformers' assisted decoding supports no more) with 17 real tokens padded to 24."""
    ids, mask = batch(model)
    return ids[1:2], mask[1:2]


ASSISTED = [(v, False, "converted_draft") for v in VARIANTS] + [
    ("srformer", True, "converted_draft"), ("srformer", False, "plain_draft"), ("linear", False, "plain_draft"),
    ("srformer", False, "prompt_lookup"), ("srformer", True, "prompt_lookup"), ("linear", False, "prompt_lookup"),
]


@pytest.mark.parametrize("variant,lean_cache,assistant", ASSISTED)
def test_assisted_decoding_and_prompt_lookup(family, variant, lean_cache, assistant):
    """Candidate tokens are verified several at a time (a multi-token chunk on top of the cache) and
    rejected ones are cropped from the self-attention cache: the result is plain greedy decoding."""
    model = model_for(family, variant, lean_cache)
    ids, mask = _single(model)
    if assistant == "prompt_lookup":
        settings = dict(prompt_lookup_num_tokens=3)
    else:
        settings = dict(assistant_model=_draft(family, assistant.split("_")[0]))
    chunks, handles = cross_attention_chunks(model)
    try:
        out = generate(model, ids, mask, output_logits=True, **settings)
    finally:
        for handle in handles:
            handle.remove()
    assert max(chunks) > 1, "no candidate chunk was verified: the test did not exercise assisted decoding"
    assert_logits_match_teacher_forcing(model, ids, mask, out)
    assert torch.equal(out.sequences, generate(model, ids, mask).sequences)


@pytest.mark.parametrize("variant", ["srformer", "linear"])
def test_assisted_sampling_logits_equal_teacher_forcing(family, variant):
    """Speculative sampling draws other tokens than plain sampling; its logits must still be exact."""
    model = model_for(family, variant)
    ids, mask = _single(model)
    draft = _draft(family, "converted")
    out = generate(model, ids, mask, assistant_model=draft, do_sample=True, top_k=0, output_logits=True)
    assert_logits_match_teacher_forcing(model, ids, mask, out)


# ----------------------------------------------------------------------------------- padding side
@pytest.mark.parametrize("variant,num_beams", [(v, 1) for v in VARIANTS] + [("srformer", 3)])
def test_left_padding(family, variant, num_beams):
    """Left-padded encoder inputs: SRformer segments hold real tokens only, wherever the padding sits.
    T5's relative positions make left and right padding the same input, so the outputs must match;
    BART's absolute positions do not, so there it is checked against the cache-free path only."""
    model = model_for(family, variant)
    ids, mask = batch(model, left=True)
    settings = dict(num_beams=num_beams, num_return_sequences=num_beams, output_logits=num_beams == 1)
    out = generate(model, ids, mask, **settings)
    if num_beams == 1:
        assert_logits_match_teacher_forcing(model, ids, mask, out)
    assert torch.equal(out.sequences, generate(model, ids, mask, use_cache=False, **settings).sequences)
    if family == "t5":
        right = generate(model, *batch(model), **settings)
        assert torch.equal(out.sequences, right.sequences)
        if num_beams == 1:
            left_logits, right_logits = torch.stack(out.logits, 1).double(), torch.stack(right.logits, 1).double()
            tolerance = 2 * relative_tolerance(model) * right_logits.abs().max().item()
            assert (left_logits - right_logits).abs().max().item() <= tolerance


# ----------------------------------------------------------------------------------- continuing
@pytest.mark.parametrize("variant,lean_cache", [(v, False) for v in VARIANTS] + [("srformer", True)])
def test_continuing_from_returned_past_key_values(family, variant, lean_cache):
    """Generation resumed from the cache of a first call (whose SRformer state is reused, not rebuilt)
    equals one uninterrupted call."""
    model = model_for(family, variant, lean_cache)
    ids, mask = batch(model)
    whole = generate(model, ids, mask, output_logits=True)
    first = generate(model, ids, mask, max_new_tokens=6)
    assert all(first.past_key_values.is_updated.values())
    # transformers' contract for encoder-decoder models: the full decoder sequence with a decoder
    # attention mask covering it (generate() then feeds only the token the cache lacks). Without the
    # mask it feeds the whole sequence again, and given only the new token it prepends the decoder
    # start token: both change an unconverted model's logits too.
    resumed = generate(
        model, ids, mask, max_new_tokens=NEW_TOKENS - 6, decoder_input_ids=first.sequences,
        decoder_attention_mask=torch.ones_like(first.sequences), past_key_values=first.past_key_values,
        output_logits=True,
    )
    assert torch.equal(resumed.sequences, whole.sequences)
    resumed_logits, whole_logits = torch.stack(resumed.logits, 1).double(), torch.stack(whole.logits, 1).double()[:, 6:]
    tolerance = relative_tolerance(model) * whole_logits.abs().max().item()
    assert (resumed_logits - whole_logits).abs().max().item() <= tolerance


# ----------------------------------------------------------------------------------- cache implementations
STATIC = [(*layout, "greedy") for layout in ALL_LAYOUTS] + [
    ("srformer", False, "sampling"), ("srformer", False, "beam"), ("srformer", True, "beam")
]


@pytest.mark.parametrize("variant,lean_cache,strategy", STATIC)
def test_static_cache(family, variant, lean_cache, strategy):
    """cache_implementation='static': transformers' StaticCache holds the self attention; the
    cross-attention part keeps one SRformerCacheLayer per layer (the state is fixed-size per sequence)."""
    model = model_for(family, variant, lean_cache)
    ids, mask = batch(model)
    settings = {**STRATEGIES, "beam": dict(num_beams=3, num_return_sequences=2)}[strategy]
    out = generate(model, ids, mask, cache_implementation="static", output_logits=strategy != "beam", **settings)
    if strategy != "beam":
        assert_logits_match_teacher_forcing(model, ids, mask, out)
    assert type(out.past_key_values.self_attention_cache).__name__ == "StaticCache"
    assert torch.equal(out.sequences, generate(model, ids, mask, **settings).sequences)


@pytest.mark.skipif(not torch.cuda.is_available(), reason="transformers' cache offloading needs a CUDA device")
@pytest.mark.parametrize("cache_implementation", ["offloaded", "offloaded_static"])
@pytest.mark.parametrize("variant", ["srformer", "linear"])
def test_offloaded_caches_on_cuda(family, variant, cache_implementation):
    model = copy.deepcopy(model_for(family, variant)).cuda()
    ids, mask = (tensor.cuda() for tensor in batch(model))
    out = generate(model, ids, mask, cache_implementation=cache_implementation, num_beams=3)
    assert torch.equal(out.sequences, generate(model, ids, mask, num_beams=3).sequences)


# ----------------------------------------------------------------------------------- extra outputs
@pytest.mark.parametrize("variant", VARIANTS)
def test_output_hidden_states_equal_teacher_forcing(family, variant):
    model = model_for(family, variant)
    ids, mask = batch(model)
    out = generate(model, ids, mask, output_hidden_states=True)
    reference = teacher_forced(model, ids, mask, out.sequences, output_hidden_states=True)
    num_layers = len(reference.decoder_hidden_states)
    assert len(out.decoder_hidden_states) == NEW_TOKENS
    assert all(len(step) == num_layers for step in out.decoder_hidden_states)
    stepwise = torch.stack([torch.cat([step[layer] for step in out.decoder_hidden_states], dim=1)
                            for layer in range(num_layers)])
    expected = torch.stack(reference.decoder_hidden_states)
    tolerance = relative_tolerance(model) * expected.abs().max().item()
    assert (stepwise - expected).abs().max().item() <= tolerance
    assert torch.equal(out.encoder_hidden_states[-1], reference.encoder_last_hidden_state)


def test_output_attentions_under_sdpa_behaves_as_the_unconverted_model(family):
    """Under sdpa transformers returns no attention weights for any layer (it warns); converted models
    do the same (weights are computed under eager only, as transformers does)."""
    model = model_for(family, "srformer")
    ids, mask = batch(model)
    plain = BUILDERS[family]().double()
    converted_out = generate(model, ids, mask, output_attentions=True)
    plain_out = generate(plain, ids, mask, output_attentions=True)
    for name in ("cross_attentions", "decoder_attentions"):
        assert [len(step) for step in getattr(converted_out, name)] == [len(step) for step in getattr(plain_out, name)]


# ----------------------------------------------------------------------------------- not shipped locally
HUB_ONLY = {
    GenerationMode.CONTRASTIVE_SEARCH: dict(penalty_alpha=0.6, top_k=4),
    GenerationMode.GROUP_BEAM_SEARCH: dict(num_beams=4, num_beam_groups=2, diversity_penalty=1.0),
    GenerationMode.CONSTRAINED_BEAM_SEARCH: dict(num_beams=2, force_words_ids=[[5]]),
    GenerationMode.DOLA_GENERATION: dict(dola_layers="low"),
}


@pytest.mark.parametrize("mode", list(HUB_ONLY), ids=lambda mode: mode.value)
def test_strategies_moved_to_the_hub_are_not_run_locally(mode):
    """The installed transformers ships these strategies only as Hub ``custom_generate`` repositories
    (trust_remote_code=True and Hub access); docs/usage.md's matrix says so. If a later transformers
    brings one back, this fails and the strategy needs its own test and matrix row."""
    assert "/" in GENERATION_MODES_MAPPING[mode]
    model = model_for("t5", "srformer")
    ids, mask = batch(model)
    with pytest.raises(ValueError, match="trust_remote_code=True"):
        generate(model, ids, mask, max_new_tokens=2, min_new_tokens=0, **HUB_ONLY[mode])
