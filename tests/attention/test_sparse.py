"""Mechanism-specific tests of the sparse-pattern mechanisms over the segment schedule (``bigbird``,
``compressive``, ``adaptive``, ``bp``): their settings against their float64 references
(:mod:`srformer.attention.naive.sparse`) in both paths and paddings, their seeds and tables, and where their
gradients go. The registry matrices (``tests/attention/test_variants.py``, ``tests/models/``) cover them at
their default settings."""

from __future__ import annotations

import pytest
import torch

import srformer
from srformer.attention import naive
from srformer.attention.bigbird import block_priority, random_block_table
from srformer.attention.variants import build_cross_attention
from srformer.config import named_config
from tests.attention.test_srformer import _incremental, _inputs
from tests.attention.test_variants import _module, _reference
from tests.models.conftest import BUILDERS, converted, decoder_inputs, padded_batch
from tests.models.test_exactness import teacher_forced_logits
from tests.tolerance import assert_exact, exact_tolerance


def _left_padded(keys, values, valid, lengths):
    """The same examples with their padding moved to the left."""
    k = valid.shape[1]
    left = torch.stack([torch.roll(valid[b], k - n) for b, n in enumerate(lengths)])
    left_keys = torch.stack([torch.roll(keys[b], k - n, dims=1) for b, n in enumerate(lengths)])
    left_values = torch.stack([torch.roll(values[b], k - n, dims=1) for b, n in enumerate(lengths)])
    return left_keys, left_values, left


def _check_against_reference(module):
    """Parallel and incremental paths against the float64 reference, right and left padding, an empty row."""
    lengths = [11, 6, 1, 0]
    queries, keys, values, valid = _inputs(4, 2, 11, 9, 4, lengths)
    parallel, _ = module(queries, module.init_state(keys, values, valid))
    tol = exact_tolerance(parallel)
    assert (parallel - _reference(module, queries, keys, values, valid)).abs().max().item() <= tol
    incremental, _ = _incremental(module, queries, module.init_state(keys, values, valid))
    assert (parallel - incremental).abs().max().item() <= tol
    left_keys, left_values, left = _left_padded(keys, values, valid, lengths)
    left_output, _ = module(queries, module.init_state(left_keys, left_values, left))
    assert (left_output - parallel).abs().max().item() <= tol
    assert parallel[3].abs().max() == 0  # the empty document: an empty memory


# ------------------------------------------------------------------ bigbird
@pytest.mark.filterwarnings("ignore:An encoder input has")
@pytest.mark.parametrize(
    "segment_size,global_tokens,random_blocks,seed",
    [(3, 6, 3, 0), (2, 1, 2, 7), (3, 4, 0, 0), (4, 20, 1, 3), (1, 2, 5, 1), (2, 3, 9, 2)],
)
def test_bigbird_of_any_pattern_matches_the_reference_in_both_paths_and_paddings(
    segment_size, global_tokens, random_blocks, seed
):
    """Global tokens inside, across and beyond segments (g = 20 > k), no random block, more random blocks
    than candidates, skipped segments (s = 1: m = 11 > T)."""
    module = _module(
        "bigbird", segment_size, 6, scale=0.5, num_global_tokens=global_tokens, num_random_blocks=random_blocks,
        random_blocks_seed=seed,
    )
    _check_against_reference(module)


def test_bigbird_random_table_is_the_references_choice_and_example_independent():
    """The module's table (torch int64 hashes, top-r) equals the reference's (Python integers, sorted lists)
    for every segment of inputs of 1 .. 12 segments, whatever the batch's largest input."""
    for seed, g, s, r in [(0, 8, 4, 3), (12345, 1, 2, 2), (2**32 - 1, 5, 1, 4)]:
        segments = torch.arange(1, 13)
        blocks, valid = random_block_table(segments, 12, g, s, r, seed)
        for b, m in enumerate(segments.tolist()):
            for i in range(m):
                chosen = blocks[b, i][valid[b, i]].tolist()
                assert chosen == naive.bigbird_random_blocks(seed, i, m, g, s, r), (seed, m, i)
        alone, alone_valid = random_block_table(torch.tensor([5]), 5, g, s, r, seed)  # batch of one: M = 5
        assert torch.equal(alone[0][alone_valid[0]], blocks[4, :5][valid[4, :5]])


def test_bigbird_seed_changes_the_blocks_and_hash_is_exact_in_int64():
    first, _ = random_block_table(torch.tensor([16]), 16, 0, 1, 3, 0)
    other, _ = random_block_table(torch.tensor([16]), 16, 0, 1, 3, 1)
    assert not torch.equal(first, other)
    # the hash by hand for seed 0, i = 0, j = 0: mix32(mix32(mix32(0))) = 0 (0 is a fixed point)
    assert block_priority(0, torch.tensor(0), torch.tensor(0)).item() == 0
    large = block_priority(2**32 - 1, torch.tensor(10**6), torch.arange(4))
    assert ((large >= 0) & (large < 2**32)).all()


def test_bigbird_seed_is_saved_with_the_model(tmp_path):
    model = converted(
        BUILDERS["t5"](), variant="bigbird", segment_size=4, target_length=12, num_global_tokens=2,
        num_random_blocks=1, random_blocks_seed=11,
    )
    ids, mask = padded_batch(model, lengths=(24, 17))
    dec = decoder_inputs(model, ids.shape[0], 8)
    model.save_pretrained(tmp_path)
    loaded = srformer.from_pretrained(str(tmp_path))
    assert srformer.models.srformer_config_of(loaded).random_blocks_seed == 11
    logits = teacher_forced_logits(model, ids, mask, dec)
    assert_exact(teacher_forced_logits(loaded, ids, mask, dec), logits, "reloaded")
    reseeded = converted(
        BUILDERS["t5"](), variant="bigbird", segment_size=4, target_length=12, num_global_tokens=2,
        num_random_blocks=1, random_blocks_seed=12,
    )
    assert (teacher_forced_logits(reseeded, ids, mask, dec) - logits).abs().max() > 1e-6  # the seed matters


def test_bigbird_gradient_reaches_the_global_scheduled_and_random_positions_only():
    module = _module("bigbird", 2, 8, num_global_tokens=1, num_random_blocks=1, random_blocks_seed=0)
    queries, keys, values, _ = _inputs(1, 1, 12, 1, 4, [12])
    keys.requires_grad_(True)
    module(queries, module.init_state(keys, values, None))[0].sum().backward()  # t = 0: segment 0 of m = 6
    (random_block,) = naive.bigbird_random_blocks(0, 0, 6, 1, 2, 1)
    expected = {0, 1, 2 * random_block, 2 * random_block + 1}
    touched = keys.grad[0, 0].abs().sum(-1) > 0
    assert touched.tolist() == [p in expected for p in range(12)]


def test_bigbird_settings_are_checked_and_saved():
    for bad in (dict(num_global_tokens=0), dict(num_random_blocks=-1), dict(random_blocks_seed=-1),
                dict(random_blocks_seed=2**32), dict(num_random_blocks=1.5), dict(num_global_tokens=True)):
        with pytest.raises(ValueError, match=next(iter(bad))):
            named_config("bigbird", **bad)
    with pytest.raises(ValueError, match="num_random_blocks"):
        named_config("window", num_random_blocks=2)
    config = named_config("bigbird", segment_size=4, num_global_tokens=3, num_random_blocks=0, random_blocks_seed=9)
    default = named_config("bigbird", segment_size=4)
    for settings, expected in ((config, (3, 0, 9)), (default, (8, 3, 0))):
        resolved = (settings.resolved_global_tokens(), settings.resolved_random_blocks())
        assert (*resolved, settings.resolved_random_blocks_seed()) == expected
    assert type(config).from_dict(config.to_dict()) == config


# ------------------------------------------------------------------ compressive
@pytest.mark.filterwarnings("ignore:An encoder input has")
@pytest.mark.parametrize("segment_size,rate", [(3, 2), (4, 4), (3, 1), (2, 5), (1, 1), (5, 2)])
def test_compressive_of_any_rate_matches_the_reference_in_both_paths_and_paddings(segment_size, rate):
    """Rates dividing the segment or not (a shorter last window), c = 1 (no compression), c > s (one row per
    segment), skipped segments (s = 1: m = 11 > T)."""
    _check_against_reference(_module("compressive", segment_size, 6, scale=0.5, compression_rate=rate))


def test_compressive_memory_and_compressed_memory_get_no_gradient():
    """s = 2, n = 8 (m = 4), T = 4: position 3 attends segment 3, memory segment 2 and the compressed segments
    0 and 1; only segment 3's keys and values get gradients, and the no-gradient path agrees."""
    module = _module("compressive", segment_size=2, target_length=4, compression_rate=2)
    queries, keys, values, _ = _inputs(1, 1, 8, 4, 4, [8])
    keys.requires_grad_(True)
    values.requires_grad_(True)
    output, _ = module(queries[:, :, 3:4], module.init_state(keys, values, None), start_position=3)
    output.sum().backward()
    assert keys.grad[0, 0, :6].abs().sum() == 0 and values.grad[0, 0, :6].abs().sum() == 0
    assert keys.grad[0, 0, 6:].abs().sum() > 0 and values.grad[0, 0, 6:].abs().sum() > 0
    with torch.no_grad():
        again, _ = module(queries[:, :, 3:4], module.init_state(keys, values, None), start_position=3)
    assert_exact(again, output, "no-gradient path")
    compressed = module.init_state(keys, values, None).compressed_values  # (1, 1, 4, 4): one row per segment
    assert_exact(compressed[0, 0, 1], values[0, 0, 2:4].mean(dim=0), "row of segment 1")


def test_compression_rate_is_checked_and_saved():
    for bad in (0, -2, 1.5, True):
        with pytest.raises(ValueError, match="compression_rate"):
            named_config("compressive", compression_rate=bad)
    with pytest.raises(ValueError, match="compression_rate"):
        named_config("xl", compression_rate=2)
    config = named_config("compressive", segment_size=4, compression_rate=3)
    assert config.resolved_compression_rate() == 3 and named_config("compressive").resolved_compression_rate() == 4
    assert type(config).from_dict(config.to_dict()) == config


# ------------------------------------------------------------------ adaptive span
def _adaptive(segment_size=3, target_length=6, num_heads=2, fractions=None, **settings):
    torch.manual_seed(0)
    config = named_config("adaptive", segment_size=segment_size, target_length=target_length, **settings)
    module = build_cross_attention(config, 4, 0.5, num_heads=num_heads).double()
    if fractions is not None:
        with torch.no_grad():
            module.span_fraction.copy_(torch.tensor(fractions, dtype=torch.float64))
    return module


@pytest.mark.filterwarnings("ignore:An encoder input has")
@pytest.mark.parametrize(
    "segment_size,max_span,ramp,fractions",
    [(3, 6, 3, [0.5, 0.2]), (2, 3, 1, [0.0, 1.3]), (3, 0, 1, [0.5, 0.5]), (4, 5, 2, [0.9, -0.1]),
     (1, 4, 2, [0.3, 0.8])],
)
def test_adaptive_span_per_head_matches_the_reference_in_both_paths_and_paddings(
    segment_size, max_span, ramp, fractions
):
    """Spans below, inside and above [0, S] (clamped), S = 0 (the scheduled segment only), S not a multiple of s,
    skipped segments (s = 1: m = 11 > T); a different span for each head."""
    _check_against_reference(_adaptive(segment_size, max_span=max_span, span_ramp=ramp, fractions=fractions))


def test_adaptive_span_gets_a_gradient_per_head_and_the_conversion_gives_one_span_per_head():
    module = _adaptive(2, 8, max_span=4, span_ramp=2, fractions=[0.3, 0.6])
    queries, keys, values, _ = _inputs(1, 2, 12, 4, 4, [12])
    output, _ = module(queries, module.init_state(keys, values, None))
    output.sum().backward()
    gradient = module.span_fraction.grad
    assert gradient is not None and torch.isfinite(gradient).all() and (gradient.abs() > 0).all()
    model = converted(BUILDERS["bart"](), variant="adaptive", segment_size=4, target_length=12)
    for _, _, layer in srformer.models.cross_attention_modules(model):
        assert layer.srformer.span_fraction.shape == (layer.num_heads,)
        assert_exact(layer.srformer.span_fraction.double(), torch.full((layer.num_heads,), 0.5).double(), "init")


def test_adaptive_span_settings_are_checked_and_saved():
    for bad in (dict(max_span=-1), dict(span_ramp=0), dict(span_init=1.5), dict(span_init=-0.1), dict(span_init="0.5")):
        with pytest.raises(ValueError, match=next(iter(bad))):
            named_config("adaptive", **bad)
    with pytest.raises(ValueError, match="span_init"):
        named_config("window", span_init=0.5)
    with pytest.raises(ValueError, match="num_heads"):
        _adaptive(num_heads=0)
    config = named_config("adaptive", segment_size=4, max_span=7, span_ramp=3, span_init=0.25)
    default = named_config("adaptive", segment_size=4)
    assert (config.resolved_max_span(), config.resolved_span_ramp(), config.resolved_span_init()) == (7, 3, 0.25)
    assert (default.resolved_max_span(), default.resolved_span_ramp(), default.resolved_span_init()) == (8, 4, 0.5)
    assert type(config).from_dict(config.to_dict()) == config


# ------------------------------------------------------------------ bp (binary partition)
def test_bp_partition_covers_every_other_segment_once_with_few_nodes():
    """The segment and its nodes cover segments 0 .. m - 1 exactly once, with at most (k + 1) nodes per level and
    side (and a level per halving of m)."""
    for span_nodes in (1, 2, 3):
        for segments in range(1, 40):
            for segment in range(segments):
                nodes = naive.bp_partition(segment, segments, span_nodes)
                covered = [segment] + [
                    j for level, node in nodes for j in range(node * 2**level, min((node + 1) * 2**level, segments))
                ]
                assert sorted(covered) == list(range(segments)), (span_nodes, segments, segment)
                assert len(nodes) <= 2 * (span_nodes + 1) * segments.bit_length()


@pytest.mark.filterwarnings("ignore:An encoder input has")
@pytest.mark.parametrize("segment_size,span_nodes", [(1, 1), (2, 1), (3, 2), (1, 3), (4, 1)])
def test_bp_of_any_node_count_matches_the_reference_in_both_paths_and_paddings(segment_size, span_nodes):
    """Up to 11 segments (four levels), node counts below and above the neighbours available, skipped segments."""
    _check_against_reference(_module("bp", segment_size, 6, scale=0.5, span_nodes=span_nodes))


def test_bp_nodes_carry_gradient_to_every_segment_and_span_nodes_is_checked():
    module = _module("bp", segment_size=1, target_length=8, span_nodes=1)
    queries, keys, values, _ = _inputs(1, 1, 8, 1, 4, [8])
    values.requires_grad_(True)
    module(queries, module.init_state(keys, values, None))[0].sum().backward()  # t = 0: segment 0, nodes cover 1-7
    assert (values.grad[0, 0].abs().sum(-1) > 0).all()
    for bad in (0, -1, 1.5, True):
        with pytest.raises(ValueError, match="span_nodes"):
            named_config("bp", span_nodes=bad)
    with pytest.raises(ValueError, match="span_nodes"):
        named_config("star", span_nodes=2)
    config = named_config("bp", span_nodes=3)
    assert config.resolved_span_nodes() == 3 and named_config("bp").resolved_span_nodes() == 2
    assert type(config).from_dict(config.to_dict()) == config
