"""``knn`` searching a faiss index of the encoder output (``knn_index``): the exhaustive index gives the exact top-k,
the inverted file with every cell probed gives the same, a few probes never read padding, one index per input
serves every layer and beam, the runtime-option plumbing, the memory estimate and the bad input."""

from __future__ import annotations

import builtins
import copy

import pytest
import torch

import srformer
from srformer.attention.content import content_base_state
from srformer.attention.knn import IndexedKNNState, KNNCrossAttention
from srformer.attention.projection import HeadProjection
from srformer.config import SRformerConfig
from srformer.models.memory_estimate import estimate_decode_memory
from tests.attention.rows_cases import assert_generation_matches
from tests.models.conftest import BUILDERS, converted, padded_batch, plain_generation_config

pytest.importorskip("faiss")
from srformer.attention import knn_index  # noqa: E402 - after the skip: the module's search needs faiss

BATCH, HEADS, LENGTH, HIDDEN, HEAD_DIM = 3, 2, 40, 8, 4


def _dyadic(generator: torch.Generator, *shape: int, bits: int = 4, span: int = 8) -> torch.Tensor:
    """Float32 multiples of 2**-bits in [-span, span]: small sums and products of them are exact in float32, so every
    score is computed without rounding, by torch and by faiss alike."""
    return torch.randint(-span << bits, (span << bits) + 1, shape, generator=generator).float() / (1 << bits)


def _inputs(seed: int = 0):
    """Hidden states (B, k, D) with left and right padding and an empty example, a per-head projection with small
    integer weights (exact scores), one decoder query per head, and the real-position mask."""
    generator = torch.Generator().manual_seed(seed)
    hidden = _dyadic(generator, BATCH, LENGTH, HIDDEN)
    valid = torch.ones(BATCH, LENGTH, dtype=torch.bool)
    valid[1, :7] = False  # left padding
    valid[2] = False  # an empty document
    weight = torch.randint(-2, 3, (HEADS * HEAD_DIM, HIDDEN), generator=generator).float()
    key, value = torch.nn.Linear(HIDDEN, HEADS * HEAD_DIM), torch.nn.Linear(HIDDEN, HEADS * HEAD_DIM)
    with torch.no_grad():
        key.weight.copy_(weight)
        key.bias.copy_(_dyadic(generator, HEADS * HEAD_DIM))
        value.weight.copy_(_dyadic(generator, HEADS * HEAD_DIM, HIDDEN))
        value.bias.zero_()
    projection = HeadProjection.from_linear(key, value, HEADS, HEAD_DIM)
    assert projection is not None
    queries = _dyadic(generator, BATCH, HEADS, 1, HEAD_DIM, bits=2, span=2)
    return hidden, valid, projection, queries


def _module(**settings) -> KNNCrossAttention:
    return KNNCrossAttention(SRformerConfig("knn", segment_size=4, **settings), HEAD_DIM, scale=0.5)


def _project_rows(hidden: torch.Tensor, projection: HeadProjection):
    def project_rows(positions: torch.Tensor):
        batch, heads, count = positions.shape
        rows = hidden.gather(1, positions.reshape(batch, heads * count, 1).expand(-1, -1, hidden.shape[-1]))
        return projection.project(rows.view(batch, heads, count, -1))

    return project_rows


def _all_keys(hidden: torch.Tensor, projection: HeadProjection):
    """Every position's keys and values, (B, H, k, d), from the per-head projection."""
    with torch.no_grad():
        return projection.project(hidden[:, None].expand(-1, HEADS, -1, -1))


@pytest.mark.parametrize("kind,settings", [("flat", {}), ("ivf", {"index_lists": 5, "index_probes": 5})])
@pytest.mark.parametrize("top_keys", [1, 6, 50])
def test_an_exhaustive_index_gives_the_exact_top_keys_and_output(kind, settings, top_keys):
    """``flat``, and ``ivf`` probing every cell, retrieve exactly the keys of the exact search (scores here are
    exact in float32 and distinct at the cut, so the two agree without a tie rule) and give the same output."""
    hidden, valid, projection, queries = _inputs()
    exact = _module(top_keys=top_keys)
    indexed = _module(top_keys=top_keys, knn_index=kind, index_min_keys=1, **settings)
    keys, values = _all_keys(hidden, projection)
    scores = torch.einsum("bhqd,bhkd->bhqk", queries, keys).masked_fill(~valid[:, None, None, :], float("-inf"))
    ranked = scores[:2].sort(dim=-1, descending=True).values
    cut = min(top_keys, LENGTH - 7)
    if cut < LENGTH - 7:  # the premise: no tie at the cut, so the top set is unique
        assert (ranked[..., cut - 1] > ranked[..., cut]).all()

    state = indexed.indexed_state(hidden, valid, projection)
    assert isinstance(state, IndexedKNNState) and state.index.kind == kind
    with torch.no_grad():
        output, _ = indexed.step(queries, state, position=0, project_rows=_project_rows(hidden, projection))
    expected, _ = exact.step(queries, exact.init_state(keys, values, valid), position=0)
    tolerance = 8 * torch.finfo(torch.float32).eps * float(values.abs().max())
    assert (output - expected).abs().max().item() <= tolerance
    assert torch.equal(output[2], torch.zeros_like(output[2]))  # the empty document reads nothing

    positions, found = state.index.search(projection.hidden_queries(queries).flatten(1, 2), state.slot, top_keys)
    exact_positions, mask = exact.slots(queries, content_base_state(keys, values, valid))
    for b in range(2):
        for h in range(HEADS):
            assert positions[b, h][found[b, h]].tolist() == exact_positions[b, h, 0][mask[b, h, 0]].tolist()


def test_an_inverted_file_with_few_probes_reads_real_keys_only():
    hidden, valid, projection, queries = _inputs(seed=3)
    module = _module(top_keys=8, knn_index="ivf", index_min_keys=1, index_lists=6, index_probes=1)
    state = module.indexed_state(hidden, valid, projection)
    assert state is not None
    positions, found = state.index.search(projection.hidden_queries(queries).flatten(1, 2), state.slot, 8)
    for b in range(BATCH):
        real = valid[b].nonzero().flatten().tolist()
        for h in range(HEADS):
            chosen = positions[b, h][found[b, h]].tolist()
            assert set(chosen) <= set(real)
            assert len(set(chosen)) == len(chosen)  # no key twice for one query
    assert not found[2].any()
    output, _ = module.step(queries, state, position=0, project_rows=_project_rows(hidden, projection))
    assert torch.isfinite(output).all()


def test_short_inputs_take_the_exact_state_and_the_setting_is_checked():
    hidden, valid, projection, _ = _inputs()
    assert _module(knn_index="flat").indexed_state(hidden, valid, projection) is None  # 40 tokens < 16,384
    assert _module().indexed_state(hidden, valid, projection) is None  # no index asked for
    with pytest.raises(ValueError, match="knn_index"):
        SRformerConfig("knn", knn_index="hnsw")
    for name in ("index_min_keys", "index_lists", "index_probes"):
        with pytest.raises(ValueError, match=name):
            SRformerConfig("knn", knn_index="ivf", **{name: 0})


def test_a_missing_faiss_is_named_with_its_extra(monkeypatch):
    real_import = builtins.__import__

    def no_faiss(name, *args, **kwargs):
        if name == "faiss":
            raise ImportError("No module named 'faiss'")
        return real_import(name, *args, **kwargs)

    monkeypatch.setattr(knn_index, "faiss_available", lambda: False)
    monkeypatch.setattr("srformer.attention.knn.faiss_available", lambda: False)
    monkeypatch.setattr(builtins, "__import__", no_faiss)
    monkeypatch.delitem(__import__("sys").modules, "faiss", raising=False)
    model = BUILDERS["bart"]()
    with pytest.raises(ImportError, match=r"srformer\[index\]"):
        srformer.convert(copy.deepcopy(model), SRformerConfig("knn", knn_index="flat"))
    exact = srformer.convert(copy.deepcopy(model), SRformerConfig("knn"))  # the exact search needs no faiss
    with pytest.raises(ImportError, match=r"srformer\[index\]"):
        srformer.set_runtime_options(exact, knn_index="ivf")


@pytest.mark.parametrize("family", ["t5", "bart"])
@pytest.mark.parametrize("kind", ["flat", "ivf"])
def test_generate_with_an_index_reading_every_key_equals_the_exact_search(family, kind, monkeypatch):
    """Greedy and beam search through the index (``top_keys`` above the input, every cell probed) equal the exact
    ``knn``; one index is built per input for all layers, one per example for all its beams."""
    model = converted(BUILDERS[family](), variant="knn", top_keys=64)
    ids, mask = padded_batch(model)
    builds = []
    real_build = knn_index.build_encoder_index

    def counting(*args, **kwargs):
        index = real_build(*args, **kwargs)
        builds.append(len(index.examples))
        return index

    monkeypatch.setattr("srformer.attention.knn.build_encoder_index", counting)
    assert_generation_matches(model, ids, mask, reference={"knn_index": None}, tolerance=1e-4, through=dict(
        knn_index=kind, index_min_keys=1, index_lists=4, index_probes=4))
    # once for every layer, for greedy and for beam search; the beams of an example share its index
    assert builds == [3, 3], builds


def test_runtime_options_saving_and_the_memory_estimate(tmp_path):
    model = converted(BUILDERS["bart"](), variant="knn")
    srformer.set_runtime_options(model, knn_index="ivf", index_probes=8)
    assert srformer.SRformerConfig.from_dict(model.config.srformer).knn_index == "ivf"
    model.save_pretrained(tmp_path)
    loaded = srformer.from_pretrained(str(tmp_path), SRformerConfig("knn", raf_linear_init_scale=1.0,
                                                                    raf_threshold_init=1e-3))
    config = srformer.SRformerConfig.from_dict(loaded.config.srformer)
    assert config.knn_index is None  # the settings asked for at loading win, as for the other runtime options
    with pytest.raises(ValueError, match="index_probes"):
        srformer.set_runtime_options(converted(BUILDERS["bart"](), variant="linear"), index_probes=8)

    shape = model.config
    exact = estimate_decode_memory(SRformerConfig("knn"), shape, 1, 1 << 18, torch.float32)
    indexed = estimate_decode_memory(SRformerConfig("knn", knn_index="flat"), shape, 1, 1 << 18, torch.float32)
    assert indexed.states == (1 << 18) * (shape.d_model + 1) * 4  # one index, no per-layer keys
    assert exact.states > indexed.states
    short = estimate_decode_memory(SRformerConfig("knn", knn_index="flat"), shape, 1, 1000, torch.float32)
    assert short == estimate_decode_memory(SRformerConfig("knn"), shape, 1, 1000, torch.float32)


def test_the_cache_size_counts_the_shared_index_once():
    from srformer.benchmarks.generation import cross_attention_cache_bytes

    model = converted(BUILDERS["bart"](), variant="knn", knn_index="flat", index_min_keys=1)
    ids, mask = padded_batch(model)
    with torch.no_grad():
        encoded = model.get_encoder()(input_ids=ids, attention_mask=mask).last_hidden_state
        output = model.generate(encoder_outputs=srformer_outputs(encoded), attention_mask=mask,
                                generation_config=plain_generation_config(model, max_new_tokens=3,
                                                                          return_dict_in_generate=True))
    states = [layer.state for layer in output.past_key_values.cross_attention_cache.layers]
    assert len(states) == 2 and all(isinstance(state, IndexedKNNState) for state in states)
    assert states[0].index is states[1].index  # one index for both layers
    per_layer = sum(state.nbytes() for state in states)
    expected = per_layer + encoded.numel() * encoded.element_size() + states[0].index.nbytes
    assert cross_attention_cache_bytes(output.past_key_values, encoded) == expected
    assert states[0].index.nbytes == int(mask.sum()) * encoded.shape[-1] * 4  # float32 rows of the real tokens


def srformer_outputs(encoded: torch.Tensor):
    from transformers.modeling_outputs import BaseModelOutput

    return BaseModelOutput(last_hidden_state=encoded)
