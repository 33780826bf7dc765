"""Operator calls and host syncs of generate() (:mod:`srformer.benchmarks.operator_count`), and the budgets the
segment mechanisms and the accelerator steps of ``knn`` and ``block-topk`` keep: on a GPU an eager step costs about
one launch per aten call whatever the input length, so a count that grows with the input, or a step far above full
attention's, is a cost on every GPU."""

from __future__ import annotations

import pytest
import torch

from srformer.attention import quest, step_choice
from srformer.benchmarks.operator_count import (
    OperatorCounter,
    count_calls,
    count_generation_operators,
    long_input_model,
)
from srformer.benchmarks.variants import t5_config
from srformer.models import cross_attention
from srformer.models.convert import set_runtime_options

LENGTHS = (1024, 4096)  # 64 and 256 segments of 16 tokens


def _counts(name: str, as_on_accelerator: bool = True, **runtime):
    """Counts at each of LENGTHS, each on a fresh model (a module keeps small index tensors per batch size and
    block count, made at their first use: a model that has seen another length would skip one); ``runtime``:
    :func:`~srformer.models.convert.set_runtime_options`."""
    counts = []
    for length in LENGTHS:
        model = long_input_model(name, shape="t5-tiny", segment_size=16, target_length=16)
        if runtime:
            set_runtime_options(model, **runtime)
        counts.append(count_generation_operators(model, length, as_on_accelerator=as_on_accelerator))
    return counts


@pytest.fixture(scope="module")
def full():
    return _counts("full")


@pytest.fixture(scope="module")
def per_token_budget(full):
    """The per-token budget of the benchmark's shape (1.25x full attention's calls, t5-small) carried to t5-tiny's
    models: full's count plus, per decoder layer, a quarter of t5-small full's calls per token over its layers
    (about 21 calls: a budget of 1.25x full's on t5-tiny's 2 layers would allow 27, more than t5-small allows)."""
    small = count_generation_operators(long_input_model("full", shape="t5-small", segment_size=16, target_length=16),
                                       LENGTHS[0])
    allowance = 0.25 * small.calls_per_token / t5_config("t5-small").num_decoder_layers
    return [reference.calls_per_token + allowance * t5_config("t5-tiny").num_decoder_layers for reference in full]


def test_the_counter_counts_calls_and_syncs():
    x = torch.ones(3)
    _, calls = count_calls(lambda: (x + 1).sum().item())
    assert calls["aten.add"] == 1 and calls["aten.sum"] == 1 and calls["aten._local_scalar_dense"] == 1
    with OperatorCounter() as counter:
        torch.equal(x, x + 0)
        x[x > 0]  # a boolean index: nonzero, sized by the data
    assert counter.syncs >= 2 and counter.total >= 4


@pytest.mark.filterwarnings("ignore:An encoder input has")
@pytest.mark.parametrize("name", ["quest-tree", "block-topk-b4"])
def test_the_calls_per_token_are_the_steady_ones_on_a_fresh_model(name):
    """A module that makes its step's index tables at its first generation (per input length here) does not
    have them subtracted from the calls per token: a fresh model and one that has generated already count the
    same per token (counted on the first generations, quest-tree's were 11 calls per token too few)."""
    model = long_input_model(name, shape="t5-tiny", segment_size=16, target_length=16)
    fresh = count_generation_operators(model, LENGTHS[0])
    warm = count_generation_operators(model, LENGTHS[0])
    assert fresh.calls_per_token == warm.calls_per_token
    assert fresh.first_step_calls > warm.first_step_calls  # the tables: made once, in the first step


def test_full_attention_counts_do_not_depend_on_the_input_length(full):
    assert full[0].first_step_calls == full[1].first_step_calls > 0
    assert full[0].calls_per_token == full[1].calls_per_token > 0
    layers = t5_config("t5-tiny").num_decoder_layers
    assert full[0].calls_per_token > 10 * layers  # the whole decoder is counted, not one layer


@pytest.mark.filterwarnings("ignore:An encoder input has")
@pytest.mark.parametrize("name,runtime", [
    ("segmented", {}), ("srformer", {}), ("knn", {}), ("block-topk-b4", {}), ("quest-b2", {}),
    ("quest-b2", {"rows_min_keys": 1}), ("knn", {"knn_index": "rows", "index_min_keys": 1}),
    ("knn", {"knn_index": "loki", "index_min_keys": 1}),
], ids=["segmented", "srformer", "knn", "block-topk-b4", "quest-b2", "quest-b2-encoder-rows", "knn-rows",
        "knn-loki"])
def test_mechanisms_keep_their_operator_budgets(name, runtime, full, per_token_budget):
    """What a GPU runs (the NaN/inf check deferred, and the accelerator steps of knn, block-topk and quest, as on
    any accelerator): per token within the budget (``per_token_budget``: 261.6 calls at t5-tiny); a first step
    whose calls do not grow with the input (no loop over segments: srformer's RAF recurrence is one operator) and
    stay within 3x full's; no host sync beyond full's, per token or in the first step. Measured (t5-tiny, 1k and
    4k tokens; full 219 per token, 270 first step; per token counted after a first generation): segmented 224,
    first step 367; srformer 244, 513; knn 232, 321; block-topk-b4 244, 471; quest-b2 (its leaf step) 246, 555
    with keys and values kept, and 260, 581 reading encoder rows (the absorbed form: the query through W_k, the
    mix through W_v); knn-rows (the encoder output searched in torch, the same absorbed form) 242, 315; knn-loki
    (a principal basis's channels, then the candidates' rows) 260, 463."""
    counts = _counts(name, **runtime)
    for count, reference, budget in zip(counts, full, per_token_budget, strict=True):
        assert count.calls_per_token <= budget, (budget, count.summary())
        assert count.first_step_calls <= 3 * reference.first_step_calls, count.summary()
        assert count.syncs_per_token <= reference.syncs_per_token, count.per_token_by_operator
        assert count.first_step_syncs <= reference.first_step_syncs, count.first_step_by_operator
    assert counts[0].first_step_calls == counts[1].first_step_calls, [c.summary() for c in counts]
    assert counts[0].calls_per_token == counts[1].calls_per_token


@pytest.mark.filterwarnings("ignore:An encoder input has")
def test_on_the_cpu_the_check_reads_one_flag_per_layer_at_the_first_step(full):
    """The CPU default checks each new state at once: one host read per layer (free on a CPU: nothing to wait
    for), none per token."""
    count = _counts("srformer", as_on_accelerator=False)[0]
    layers = t5_config("t5-tiny").num_decoder_layers
    assert cross_attention.FINITE_CHECK_OVERRIDE is None  # the count restored the device's choice
    assert step_choice.STEP_OVERRIDE is None
    assert count.first_step_syncs == full[0].first_step_syncs + layers
    assert count.syncs_per_token == full[0].syncs_per_token


def test_srformer_first_step_runs_the_recurrence_as_one_call_per_layer():
    count = _counts("srformer")[1]
    layers = t5_config("t5-tiny").num_decoder_layers
    assert count.first_step_by_operator.get("srformer.raf_scan_") == layers


@pytest.mark.parametrize("tokens", [(2, 5), (1, 1), (1,)])
def test_bad_token_counts_are_refused(tokens):
    model = long_input_model("full", shape="t5-tiny")
    with pytest.raises(ValueError, match="`tokens`"):
        count_generation_operators(model, 16, tokens=tokens)


def test_an_unknown_variant_is_refused_with_the_choices():
    with pytest.raises(ValueError, match="Unknown long-input variant 'nope'; choose from full"):
        long_input_model("nope")


@pytest.mark.filterwarnings("ignore:An encoder input has")
@pytest.mark.parametrize("name", ["knn", "block-topk-b4"])
def test_on_the_cpu_knn_and_block_topk_run_their_cpu_step(name, full):
    """Counted as this device runs them (the CPU): the CPU step, more calls per token than the accelerator step
    and one host read per layer and token (top_positions' tie check, free on a CPU); the count restores the
    device's choice."""
    on_the_cpu = _counts(name, as_on_accelerator=False)[0]
    accelerator = _counts(name)[0]
    layers = t5_config("t5-tiny").num_decoder_layers
    assert step_choice.STEP_OVERRIDE is None
    assert on_the_cpu.calls_per_token > accelerator.calls_per_token
    assert on_the_cpu.syncs_per_token == full[0].syncs_per_token + layers == accelerator.syncs_per_token + layers


PAGES = {"knn_index": "loki", "index_min_keys": 1, "index_page": 16, "index_pages": 256}


@pytest.mark.filterwarnings("ignore:An encoder input has")
def test_knn_loki_pages_is_sync_free_and_costs_three_calls_a_layer_more(full):
    """``knn-loki-pages``'s step: the same calls at 1k and 4k tokens, no host sync beyond full attention's, per token
    3 calls per layer more than ``knn-loki`` (the page stage's two fused channel sums, two ``topk`` and the slots'
    positions, in place of one ``embedding_bag`` with its index arithmetic); its first step within 3x full's
    calls."""
    pages = _counts("knn", **PAGES)
    loki = _counts("knn", knn_index="loki", index_min_keys=1)
    for count, reference, flat in zip(pages, full, loki, strict=True):
        assert count.calls_per_token == flat.calls_per_token + 3 * t5_config("t5-tiny").num_decoder_layers
        assert count.syncs_per_token <= reference.syncs_per_token, count.per_token_by_operator
        assert count.first_step_syncs <= reference.first_step_syncs, count.first_step_by_operator
        assert count.first_step_calls <= 3 * reference.first_step_calls, count.summary()
    assert pages[0].calls_per_token == pages[1].calls_per_token


@pytest.mark.filterwarnings("ignore:An encoder input has")
def test_knn_loki_pages_keeps_the_per_token_budget(per_token_budget):
    """The per-token budget (1.25x full's calls), for ``knn-loki-pages``: 250 calls per token at t5-tiny against
    261.6."""
    for count, budget in zip(_counts("knn", **PAGES), per_token_budget, strict=True):
        assert count.calls_per_token <= budget, (budget, count.summary())


@pytest.mark.filterwarnings("ignore:An encoder input has")
def test_quest_tree_group_leaf_step_keeps_the_budget_and_is_sync_free(full, per_token_budget):
    """quest-tree's accelerator step (``QuestCrossAttention.group_leaf_step``: segments of whole leaves, and groups
    that always hold its ``r`` candidates) keeping keys and values: per token the same calls at 1k and 4k tokens,
    within the budget, no host sync beyond full attention's (measured, t5-tiny: 250 per token at both lengths
    against a budget of 261.6, full 219; counted on a model that has generated before, as the calls per token
    are)."""
    counts = _counts("quest-tree")
    for count, reference, budget in zip(counts, full, per_token_budget, strict=True):
        assert count.calls_per_token <= budget, (budget, count.summary())
        assert count.syncs_per_token <= reference.syncs_per_token, count.per_token_by_operator
    assert counts[0].calls_per_token == counts[1].calls_per_token, [c.summary() for c in counts]


@pytest.mark.filterwarnings("ignore:An encoder input has")
@pytest.mark.parametrize("rows_min_keys", [None, 1], ids=["keys", "encoder-rows"])
def test_quest_tree_gathered_group_step_is_sync_free_and_costs_twelve_calls_a_layer_more(full, rows_min_keys,
                                                                                        monkeypatch):
    """The group leaf step's gathered route (the chosen groups' slots only, taken from 131,072 tokens in eager mode;
    forced here): per token the same calls at 1k and 4k tokens, no host sync beyond full attention's, and 12 calls
    per layer more than the route that scores every slot (t5-tiny's 2 layers: 24 per token)."""
    runtime = {} if rows_min_keys is None else {"rows_min_keys": rows_min_keys}
    masked = _counts("quest-tree", **runtime)
    monkeypatch.setattr(quest, "GATHER_SLOTS_RATIO_EAGER", 0)
    gathered = _counts("quest-tree", **runtime)
    for count, reference, other in zip(gathered, full, masked, strict=True):
        assert count.syncs_per_token <= reference.syncs_per_token, count.per_token_by_operator
        assert count.calls_per_token == other.calls_per_token + 12 * t5_config("t5-tiny").num_decoder_layers
    assert gathered[0].calls_per_token == gathered[1].calls_per_token, [c.summary() for c in gathered]


@pytest.mark.filterwarnings("ignore:An encoder input has")
def test_quest_tree_reading_encoder_rows_keeps_the_budget_and_is_sync_free(full, per_token_budget):
    """The same step reading rows of the encoder output (the layout of long inputs): per token the same calls at 1k
    and 4k tokens, within the budget, no host sync beyond full attention's (measured, t5-tiny: 260 per token against
    a budget of 261.6, full 219: the absorbed form's hidden queries and value projection cost 4 calls per layer
    where the keys layout indexes keys and values)."""
    counts = _counts("quest-tree", rows_min_keys=1)
    for count, reference, budget in zip(counts, full, per_token_budget, strict=True):
        assert count.calls_per_token <= budget, (budget, count.summary())
        assert count.syncs_per_token <= reference.syncs_per_token, count.per_token_by_operator
    assert counts[0].calls_per_token == counts[1].calls_per_token, [c.summary() for c in counts]


@pytest.mark.filterwarnings("ignore:An encoder input has")
@pytest.mark.xfail(strict=True, reason=(
    "quest-tree's tree build makes about 30 calls per layer and level (a level per doubling of the input): "
    "3.7-4.2x full's first step at t5-tiny (989-1,133 calls against 270), 6.2x at t5-small and 65,536 tokens"))
@pytest.mark.parametrize("rows", [False, True], ids=["keys-state", "rows-state"])
def test_quest_tree_first_step_within_three_times_full(rows, full):
    """The first-step budget every other mechanism keeps (3x full's calls), for quest-tree: a known miss, kept as a
    strict expected failure so that a build that meets it turns this test red until the mark is removed."""
    counts = _quest_tree_first_steps(LENGTHS, **({"rows_min_keys": 1} if rows else {}))
    for count, reference in zip(counts, full, strict=True):
        assert count.first_step_calls <= 3 * reference.first_step_calls, (count.first_step_calls,
                                                                          reference.first_step_calls)


def _quest_tree_first_steps(lengths, **runtime):
    counts = []
    for length in lengths:
        model = long_input_model("quest-tree", shape="t5-tiny", segment_size=16, target_length=16)
        if runtime:
            set_runtime_options(model, **runtime)
        counts.append(count_generation_operators(model, length))
    return counts


@pytest.mark.filterwarnings("ignore:An encoder input has")
@pytest.mark.parametrize("rows", [False, True], ids=["keys-state", "rows-state"])
def test_quest_tree_first_step_grows_with_the_tree_depth_only(rows, monkeypatch):
    """Each doubling of the input adds one level to every layer's tree and nothing else: equal increments, within a
    level's budget (30 calls per layer: 12 of them the power iterations' products, whatever their number; a loop over
    heads would multiply it by the heads), no added host sync.
    Reading encoder rows, the bounds are built in at most MAX_BOUNDS_CHUNKS chunks: with a chunk of 64 positions
    the three lengths would take 16, 32 and 64 chunks otherwise."""
    if rows:
        monkeypatch.setattr(quest, "BOUNDS_CHUNK", 64)
    counts = _quest_tree_first_steps((1024, 2048, 4096), **({"rows_min_keys": 1} if rows else {}))
    calls = [count.first_step_calls for count in counts]
    layers = t5_config("t5-tiny").num_decoder_layers
    assert calls[1] - calls[0] == calls[2] - calls[1], calls
    assert 0 < calls[1] - calls[0] <= 30 * layers, calls
    assert len({count.first_step_syncs for count in counts}) == 1
