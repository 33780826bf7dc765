"""torch.compile (fullgraph) and torch.export of converted models: no graph break, no data-dependent host sync.

Three entry points, each on tiny float64 T5 and BART models with real segmentation and a padded batch
(see ``tests/models/test_generation_strategies.py``):

* ``generate(cache_implementation="static", compile_config=CompileConfig(fullgraph=True))``: how
  transformers compiles the decoding step. transformers only compiles on an accelerator unless
  ``compile_config._compile_all_devices`` is set (its own switch, used here to run on CPU).
* ``torch.compile(model, fullgraph=True)`` on the teacher-forced forward, gradients included.
* ``torch.export.export`` of the converted model's teacher-forced forward.

``fullgraph=True`` makes any graph break (a host sync such as ``int(tensor)``, a data-dependent
branch) an error, so these tests fail on any sync left in the forward or step path. The backend is
``aot_eager``: dynamo captures the whole graph and AOT autograd functionalises it (the same capture
inductor compiles), then the captured ATen graph runs without code generation, so the tests stay fast;
one slow test runs inductor itself. The compiled graphs run the same float64 ATen ops as eager, so
compiled == eager to ``exact_tolerance`` (float64 rounding-order differences at most).
"""

from __future__ import annotations

import functools

import pytest
import torch
from torch._dynamo.utils import counters
from transformers import CompileConfig

from srformer.attention import quest, step_choice
from srformer.attention.knn_loki import LokiKNNState
from srformer.attention.knn_rows import RowsKNNState
from srformer.attention.quest import QuestRowsState
from srformer.attention.step_choice import STEP_KINDS
from srformer.core import NAMED_SETTINGS
from srformer.models.convert import set_runtime_options
from tests.models.conftest import BUILDERS, converted, decoder_inputs
from tests.models.test_generation_strategies import DECODER_GAIN, SETTINGS, batch, generate, model_for
from tests.tolerance import (
    FLOAT32_UNIT_ROUNDOFF,
    assert_exact,
    exact_tolerance,
    float32_tolerance,
    magnitude,
    max_difference,
)

CASES = [
    ("t5", "srformer", False), ("bart", "srformer", False), ("t5", "segmented", False), ("bart", "segmented", False),
    ("t5", "linear", False), ("bart", "linear", False), ("t5", "xl", False), ("bart", "longt5", False),
    ("t5", "srformer", True), ("bart", "segmented", True),  # lean_cache layout
    ("t5", "window", False), ("bart", "strided", False), ("t5", "star", False), ("bart", "fastformer", False),
]


def compiled_generate(model, backend: str, inputs=None):
    """5 new tokens generated with transformers' compiled step (static cache, ``fullgraph``, ``backend``) and in eager
    mode from the padded ``inputs`` (``(ids, mask)``; default :func:`batch`), and the graphs dynamo compiled."""
    ids, mask = batch(model) if inputs is None else inputs
    compile_config = CompileConfig(backend=backend, fullgraph=True, mode=None, dynamic=False)
    compile_config._compile_all_devices = True
    torch._dynamo.reset()
    counters.clear()
    try:
        compiled = generate(
            model, ids, mask, max_new_tokens=5, cache_implementation="static", compile_config=compile_config,
            output_logits=True,
        )
        graphs = counters["stats"]["unique_graphs"]
    finally:
        torch._dynamo.reset()
    eager = generate(model, ids, mask, max_new_tokens=5, cache_implementation="static", output_logits=True)
    return compiled, eager, graphs


@pytest.mark.parametrize("family,variant,lean", CASES)
def test_fullgraph_static_cache_generate_equals_eager(family, variant, lean):
    model = model_for(family, variant, lean)
    compiled, eager, graphs = compiled_generate(model, "aot_eager")
    assert graphs >= 1, "generate() did not compile the decoder step"
    assert torch.equal(compiled.sequences, eager.sequences)
    compiled_logits, eager_logits = torch.stack(compiled.logits, 1), torch.stack(eager.logits, 1)
    # generate() reports float32 logits of the float64 model: the float64 results agree to exact_tolerance,
    # and each side then rounds to float32 once (u32 relative each, so at most 2 u32 |logit| apart).
    tolerance = exact_tolerance(eager_logits) + 2 * FLOAT32_UNIT_ROUNDOFF * magnitude(eager_logits)
    assert max_difference(compiled_logits, eager_logits) <= tolerance


#: The long-input picks (docs/choosing.md), by named setting: their selection (top-k over keys, leaves, groups or
#: blocks) must stay inside one graph too.
PICKS = [("t5", "knn"), ("bart", "knn"), ("t5", "quest-tree"), ("t5", "block-topk-b4"), ("bart", "quest-tree"),
         ("t5", "quest-b2"), ("bart", "quest-b2")]


def assert_eager_tokens_and_logits(compiled, eager, inductor: bool = False) -> None:
    """The compiled generation's tokens are eager's and its logits within float64 rounding of them (plus one float32
    rounding of their magnitude). ``inductor``: plus T5's RMSNorm, which computes its variance in float32 even in a
    float64 model, and inductor's fused kernel sums the d_model = 32 squares in another order than eager: a float32
    sum of 32 terms on each side (float32_tolerance), amplified by the decoder after it (DECODER_GAIN, as in the
    generate() matrix). A state mixed up between rows or steps moves the logits by O(0.1), far above this bound."""
    assert torch.equal(compiled.sequences, eager.sequences)
    compiled_logits, eager_logits = torch.stack(compiled.logits, 1), torch.stack(eager.logits, 1)
    tolerance = exact_tolerance(eager_logits) + 2 * FLOAT32_UNIT_ROUNDOFF * magnitude(eager_logits)
    if inductor:
        tolerance = tolerance + DECODER_GAIN * float32_tolerance(eager_logits, terms=32)
    assert max_difference(compiled_logits, eager_logits) <= tolerance


def _knn_rows(family: str):
    """knn with ``knn_index="rows"`` at every length (3 keys per query and head), float64."""
    model = converted(BUILDERS[family]("sdpa").double(), variant="knn", top_keys=3, **SETTINGS)
    set_runtime_options(model, knn_index="rows", index_min_keys=1)
    return model


@functools.cache
def _pick(family: str, name: str):
    base = BUILDERS[family]("sdpa").double()
    torch.manual_seed(1)
    return converted(base, **{**NAMED_SETTINGS[name], **SETTINGS})


#: Each pick with each of its decoder steps (a CPU and an accelerator step, srformer.attention.step_choice).
PICK_STEPS = [(family, name, step) for family, name in PICKS for step in STEP_KINDS]


@pytest.mark.parametrize("family,name,step", PICK_STEPS)
def test_the_picks_decode_in_one_graph_for_every_position(family, name, step, monkeypatch):
    """Static cache, fullgraph: one graph serves all five decoder positions (no recompilation as the position
    moves), and its tokens and logits are eager's."""
    monkeypatch.setattr(step_choice, "STEP_OVERRIDE", step)
    compiled, eager, graphs = compiled_generate(_pick(family, name), "aot_eager")
    assert graphs == 1
    assert_eager_tokens_and_logits(compiled, eager)


@pytest.mark.parametrize("family,name", [("t5", "quest-b2"), ("bart", "quest-tree")])
@pytest.mark.parametrize("step", STEP_KINDS)
def test_quest_reading_encoder_rows_decodes_in_one_graph(family, name, step, monkeypatch):
    """The layout of long inputs (``rows_min_keys``: bounds only, rows read from the encoder output through the
    absorbed form) compiles too: one graph for all five positions, eager's tokens and logits."""
    monkeypatch.setattr(step_choice, "STEP_OVERRIDE", step)
    base = BUILDERS[family]("sdpa").double()
    torch.manual_seed(1)
    model = converted(base, **{**NAMED_SETTINGS[name], **SETTINGS})
    set_runtime_options(model, rows_min_keys=1)
    compiled, eager, graphs = compiled_generate(model, "aot_eager")
    assert graphs == 1
    assert type(eager.past_key_values.cross_attention_cache.layers[0].state) is QuestRowsState
    assert_eager_tokens_and_logits(compiled, eager)


@pytest.mark.parametrize("rows_min_keys", [None, 1], ids=["keys", "encoder-rows"])
def test_quest_trees_gathered_group_step_decodes_in_one_graph(rows_min_keys, monkeypatch):
    """The group leaf step's gathered route (the chosen groups' slots only; forced here, compiled and eager) compiles
    too: one graph for all five positions, eager's tokens and logits."""
    monkeypatch.setattr(step_choice, "STEP_OVERRIDE", "accelerator")
    monkeypatch.setattr(quest, "GATHER_SLOTS_RATIO_EAGER", 0)
    monkeypatch.setattr(quest, "GATHER_SLOTS_RATIO_COMPILED", 0)
    base = BUILDERS["bart"]("sdpa").double()
    torch.manual_seed(1)
    model = converted(base, **{**NAMED_SETTINGS["quest-tree"], **SETTINGS})
    set_runtime_options(model, rows_min_keys=rows_min_keys)
    mechanisms = [m for m in model.modules() if isinstance(m, quest.QuestCrossAttention)]
    assert mechanisms and all(m.uses_leaf_step(torch.device("cpu")) for m in mechanisms)  # the group leaf step runs
    compiled, eager, graphs = compiled_generate(model, "aot_eager")
    assert graphs == 1
    assert_eager_tokens_and_logits(compiled, eager)


@pytest.mark.parametrize("family", ["t5", "bart"])
def test_knn_reading_encoder_rows_decodes_in_one_graph(family):
    """``knn_index="rows"`` (the encoder output searched in torch, no keys or values kept): one graph for all five
    positions, eager's tokens and logits."""
    compiled, eager, graphs = compiled_generate(_knn_rows(family), "aot_eager")
    assert graphs == 1
    assert type(eager.past_key_values.cross_attention_cache.layers[0].state) is RowsKNNState
    assert_eager_tokens_and_logits(compiled, eager)


@pytest.mark.parametrize("family", ["t5", "bart"])
def test_knn_through_low_rank_keys_decodes_in_one_graph(family):
    """``knn_index="loki"`` with a first stage that drops keys (one direction, four candidates per head): one graph
    for all five positions, eager's tokens and logits."""
    model = converted(BUILDERS[family]("sdpa").double(), variant="knn", top_keys=3, **SETTINGS)
    set_runtime_options(model, knn_index="loki", index_min_keys=1, index_rank=1, index_candidates=4)
    compiled, eager, graphs = compiled_generate(model, "aot_eager")
    assert graphs == 1
    assert type(eager.past_key_values.cross_attention_cache.layers[0].state) is LokiKNNState
    assert_eager_tokens_and_logits(compiled, eager)


@pytest.mark.parametrize(("family", "key_rank"), [("t5", None), ("bart", None), ("t5", 4)])
def test_knn_through_pages_of_low_rank_keys_decodes_in_one_graph(family, key_rank):
    """``knn_index="loki"`` with pages (pages of 3 keys, two read; their keys ranked on the bounds' 2 channels or on
    all 4 kept, ``index_key_rank``): one graph for all five positions, eager's tokens and logits."""
    model = converted(BUILDERS[family]("sdpa").double(), variant="knn", top_keys=3, **SETTINGS)
    set_runtime_options(model, knn_index="loki", index_min_keys=1, index_rank=2, index_candidates=4, index_page=3,
                        index_pages=2, index_key_rank=key_rank)
    compiled, eager, graphs = compiled_generate(model, "aot_eager")
    assert graphs == 1
    state = eager.past_key_values.cross_attention_cache.layers[0].state
    assert type(state) is LokiKNNState and state.paged is not None
    assert_eager_tokens_and_logits(compiled, eager)


@pytest.mark.slow
def test_fullgraph_static_cache_generate_with_inductor_equals_eager():
    """inductor's generated C++ code (fused, reordered float64 arithmetic) for the SRformer step."""
    model = model_for("t5", "srformer")
    compiled, eager, graphs = compiled_generate(model, "inductor")
    assert graphs >= 1
    assert_eager_tokens_and_logits(compiled, eager, inductor=True)


@pytest.mark.slow
@pytest.mark.parametrize("step", STEP_KINDS)
def test_quest_b2_decodes_with_inductor_as_eager(step, monkeypatch):
    """The long-input pick through inductor's generated code, with each step: one graph for every position, eager's
    tokens, and its logits within the bound of the SRformer inductor test above (T5's RMSNorm sums reordered)."""
    monkeypatch.setattr(step_choice, "STEP_OVERRIDE", step)
    compiled, eager, graphs = compiled_generate(_pick("t5", "quest-b2"), "inductor")
    assert graphs == 1
    assert_eager_tokens_and_logits(compiled, eager, inductor=True)


@pytest.mark.slow
def test_knn_rows_decodes_with_inductor_as_eager():
    """The long-input pick through inductor's generated code: one graph for every position, eager's tokens, and its
    logits within the bound of the SRformer inductor test above (T5's RMSNorm sums reordered)."""
    compiled, eager, graphs = compiled_generate(_knn_rows("t5"), "inductor")
    assert graphs == 1
    assert_eager_tokens_and_logits(compiled, eager, inductor=True)


@pytest.mark.slow
def test_knn_loki_pages_decodes_with_inductor_as_eager():
    """The long-input pick through inductor's generated code, its first stage reading two pages of three keys
    (the fused operators of ``srformer.attention.gathered``, opaque calls in the graph): one graph for every
    position, eager's tokens, and its logits within the bound of the SRformer inductor test above."""
    model = converted(BUILDERS["t5"]("sdpa").double(), variant="knn", top_keys=3, **SETTINGS)
    set_runtime_options(model, knn_index="loki", index_min_keys=1, index_rank=2, index_candidates=4, index_page=3,
                        index_pages=2)
    compiled, eager, graphs = compiled_generate(model, "inductor")
    assert graphs == 1
    assert_eager_tokens_and_logits(compiled, eager, inductor=True)


def _teacher_forced_inputs(model):
    ids, mask = batch(model, lengths=(24, 17, 9))
    return dict(input_ids=ids, attention_mask=mask, decoder_input_ids=decoder_inputs(model, ids.shape[0], 13))


@pytest.mark.parametrize("family,variant", [(f, v) for f, v, lean in CASES if not lean])
def test_fullgraph_compiled_forward_and_gradients_equal_eager(family, variant):
    model = model_for(family, variant)
    inputs = _teacher_forced_inputs(model)
    parameters = [p for p in model.parameters() if p.requires_grad]

    def loss_and_logits(**kwargs):
        logits = model(**kwargs, use_cache=False).logits
        return logits.pow(2).mean(), logits.detach()

    def loss_and_gradients(function):
        loss, logits = function(**inputs)
        return logits, torch.autograd.grad(loss, parameters, allow_unused=True)

    eager_logits, eager_gradients = loss_and_gradients(loss_and_logits)
    torch._dynamo.reset()
    try:
        compiled_logits, compiled_gradients = loss_and_gradients(
            torch.compile(loss_and_logits, fullgraph=True, backend="aot_eager")
        )
    finally:
        torch._dynamo.reset()
    assert_exact(compiled_logits, eager_logits, "logits")
    for parameter_gradient, reference in zip(compiled_gradients, eager_gradients, strict=True):
        if reference is None:
            assert parameter_gradient is None
        else:
            assert_exact(parameter_gradient, reference, "gradient")


@pytest.mark.parametrize("family,variant", [(f, v) for f, v, lean in CASES if not lean])
def test_export_equals_eager(family, variant):
    model = model_for(family, variant)
    inputs = _teacher_forced_inputs(model)
    with torch.no_grad():
        eager = model(**inputs, use_cache=False).logits
        program = torch.export.export(model, (), dict(inputs, use_cache=False))
        exported = program.module()(**inputs, use_cache=False).logits
    assert_exact(exported, eager, "exported logits")
