"""The content-based sparse attentions (``reformer``, ``routing``): what the shared matrices over ``NAMED_SETTINGS``
do not cover (``tests/attention/test_variants.py``, ``tests/models/test_variants.py`` run them at default settings,
where chunks and clusters of 64 hold every key of the tiny inputs): chunks and clusters smaller than the input and
several hash rounds against the float64 reference, the fixed number of keys a step reads, the empty-bucket rule,
the attention weights, the seeded buffers saved with the model, and routing's online k-means (moving average in
training only)."""

from __future__ import annotations

import pytest
import torch

import srformer
from srformer.attention.weights import cross_attention_weights
from srformer.config import named_config
from srformer.models import cross_attention_modules
from tests.attention.test_srformer import _incremental, _inputs
from tests.attention.test_variants import _module, _reference
from tests.models.conftest import BUILDERS, converted, decoder_inputs, padded_batch
from tests.models.test_exactness import teacher_forced_logits
from tests.tolerance import assert_exact


def test_reformer_rounds_match_the_reference_in_both_paths_and_paddings():
    module = _module("reformer", scale=0.5, num_buckets=4, hash_rounds=3, chunk_size=2)
    assert module.rotations.shape == (3, 4, 2)
    lengths = [9, 5, 1, 0]
    queries, keys, values, valid = _inputs(4, 2, 9, 7, 4, lengths, seed=5)
    parallel, _ = module(queries, module.init_state(keys, values, valid))
    assert_exact(parallel, _reference(module, queries, keys, values, valid), "parallel")
    incremental, _ = _incremental(module, queries, module.init_state(keys, values, valid))
    assert_exact(incremental, parallel, "incremental")
    assert torch.equal(parallel[3], torch.zeros_like(parallel[3]))  # an empty document: output 0
    roll = [9 - n for n in lengths]
    left = torch.stack([valid[b].roll(r) for b, r in enumerate(roll)])
    left_keys = torch.stack([keys[b].roll(r, dims=1) for b, r in enumerate(roll)])
    left_values = torch.stack([values[b].roll(r, dims=1) for b, r in enumerate(roll)])
    assert_exact(module(queries, module.init_state(left_keys, left_values, left))[0], parallel, "left padding")


def test_reformer_sparsity_and_the_empty_bucket_rule():
    """With one key per bucket-direction, queries see only their bucket; a query whose bucket holds no real key
    attends the chunk at its insertion point and the next, unmasked: here every real key (two keys, w = 64)."""
    module = _module("reformer", head_dim=2, num_buckets=2)
    with torch.no_grad():
        module.rotations.copy_(torch.tensor([[[1.0], [0.0]]]))  # bucket 0 for x_0 > 0, bucket 1 for x_0 < 0
    keys = torch.tensor([[[[1.0, 0.0], [2.0, 1.0], [-1.0, 0.5]]]], dtype=torch.float64)
    values = torch.tensor([[[[1.0, 0.0], [0.0, 1.0], [7.0, 7.0]]]], dtype=torch.float64)
    queries = torch.tensor([[[[0.5, 1.0], [-2.0, 0.0]]]], dtype=torch.float64)
    state = module.init_state(keys, values, None)
    assert state.sorted_buckets.tolist() == [[[[0, 0, 1]]]] and state.order.tolist() == [[[[0, 1, 2]]]]
    output, _ = module(queries, state)
    assert_exact(output[0, 0, 1], values[0, 0, 2], "bucket 1 holds key 2 alone")
    weights = torch.softmax(keys[0, 0, :2] @ queries[0, 0, 0], dim=0)
    assert_exact(output[0, 0, 0], weights @ values[0, 0, :2], "bucket 0 holds keys 0 and 1")
    padded = torch.tensor([[True, True, False]])
    state = module.init_state(keys, values, padded)
    assert state.sorted_buckets.tolist() == [[[[0, 0, 2]]]]  # padding sorts last with bucket b
    output, _ = module(queries[:, :, 1:], state)
    full = torch.softmax(keys[0, 0, :2] @ queries[0, 0, 1], dim=0) @ values[0, 0, :2]
    assert_exact(output[0, 0, 0], full, "an empty bucket: every real key")


def test_reformer_chunks_cut_a_large_bucket_and_a_step_reads_a_fixed_number_of_keys():
    """d = 2, b = 2 (bucket 0 for x_0 > 0), w = 2. Sorted places: the keys of bucket 0 (positions 0, 2, 3, 5, 6)
    then bucket 1 (1, 4). A bucket-0 query reads chunks 0 and 1 (places 0-3: positions 0, 2, 3, 5, not 6); a
    bucket-1 query starts at place 5, chunk 2 (places 4, 5) and chunk 3 (place 6): positions 6 (masked, bucket 0),
    1 and 4. Every step gathers R * 2w = 4 slots whatever k."""
    module = _module("reformer", head_dim=2, num_buckets=2, chunk_size=2)
    with torch.no_grad():
        module.rotations.copy_(torch.tensor([[[1.0], [0.0]]]))
    keys = torch.tensor([[1, 0], [-1, 0], [2, 1], [1, 1], [-2, 1], [1, -1], [3, 0]], dtype=torch.float64)[None, None]
    values = torch.randn(1, 1, 7, 2, generator=torch.Generator().manual_seed(0), dtype=torch.float64)
    queries = torch.tensor([[[[1.0, 0.5], [-1.0, 0.0]]]], dtype=torch.float64)
    state = module.init_state(keys, values, None)
    assert state.order.tolist() == [[[[0, 2, 3, 5, 6, 1, 4]]]]
    positions, mask = module.slots(queries, state)
    assert positions.shape == (1, 1, 2, 4)
    assert positions[mask].tolist() == [0, 2, 3, 5, 1, 4]
    output, _ = module(queries, state)
    for t, attended in ((0, [0, 2, 3, 5]), (1, [1, 4])):
        weights = torch.softmax(keys[0, 0, attended] @ queries[0, 0, t], dim=0)
        assert_exact(output[0, 0, t], weights @ values[0, 0, attended], f"query {t}")
    assert_exact(output, _reference(module, queries, keys, values, None), "reference")
    long_keys = torch.randn(1, 1, 40, 2, dtype=torch.float64)
    assert module.slots(queries, module.init_state(long_keys, long_keys, None))[0].shape == (1, 1, 2, 4)


def test_reformer_weights_are_the_softmax_the_output_takes():
    """The weights (output_attentions) reproduce the output (O = A V) and equal the reference's own weights:
    the reference's output for one-hot values (V = I, d = k) is its weight matrix."""
    module = _module("reformer", head_dim=6, scale=0.7, num_buckets=4, hash_rounds=2, chunk_size=1)
    queries, keys, values, valid = _inputs(2, 2, 6, 5, 6, [6, 4], seed=2)
    state = module.init_state(keys, values, valid)
    weights = cross_attention_weights(module, queries, keys, state, start_position=0, key_valid=valid)
    assert_exact(torch.matmul(weights, values), module(queries, state)[0], "O = A V")
    one_hot = torch.eye(6, dtype=torch.float64).expand(2, 2, 6, 6)
    assert_exact(weights, _reference(module, queries, keys, one_hot, valid), "reference weights")
    assert (weights[1, :, :, 4:] == 0).all()  # padding


def test_reformer_gradients_reach_queries_keys_and_values_but_not_the_rotations():
    module = _module("reformer", num_buckets=4)
    queries, keys, values, valid = _inputs(2, 2, 7, 4, 4, [7, 3], seed=1)
    for tensor in (queries, keys, values):
        tensor.requires_grad_(True)
    module(queries, module.init_state(keys, values, valid))[0].sum().backward()
    for tensor in (queries, keys, values):
        assert torch.isfinite(tensor.grad).all() and tensor.grad.abs().sum() > 0
    assert (values.grad[1, :, 3:] == 0).all()  # padding gets none
    assert not list(module.parameters()) and not module.rotations.requires_grad


def test_reformer_rotations_come_from_the_seed_and_are_saved_with_the_model(tmp_path):
    first, again = _module("reformer"), _module("reformer")
    other = _module("reformer", content_seed=1)
    assert torch.equal(first.rotations, again.rotations) and not torch.equal(first.rotations, other.rotations)
    assert "rotations" in first.state_dict()
    model = converted(BUILDERS["bart"](), variant="reformer", num_buckets=4)
    for _, _, layer in cross_attention_modules(model):  # rotations unlike any seed's draw: must come from the file
        with torch.no_grad():
            layer.srformer.rotations.uniform_(-1.0, 1.0)
    model.save_pretrained(tmp_path)
    loaded = srformer.from_pretrained(str(tmp_path))
    for (_, _, saved), (_, _, reloaded) in zip(
        cross_attention_modules(model), cross_attention_modules(loaded), strict=True
    ):
        assert torch.equal(saved.srformer.rotations, reloaded.srformer.rotations)
    ids, mask = padded_batch(model)
    dec = decoder_inputs(model, ids.shape[0], 6)
    assert_exact(teacher_forced_logits(loaded, ids, mask, dec), teacher_forced_logits(model, ids, mask, dec))


def test_bad_content_settings_name_the_argument():
    for settings, match in (
        (dict(num_buckets=3), "num_buckets"), (dict(num_buckets=0), "num_buckets"),
        (dict(hash_rounds=0), "hash_rounds"), (dict(content_seed=-1), "content_seed"),
        (dict(chunk_size=0), "chunk_size"), (dict(cluster_size=4), "cluster_size"),
    ):
        with pytest.raises(ValueError, match=match):
            named_config("reformer", **settings)
    with pytest.raises(ValueError, match="num_buckets"):
        named_config("segmented", num_buckets=4)
    for settings, match in ((dict(num_clusters=0), "num_clusters"), (dict(centroid_decay=1.0), "centroid_decay"),
                            (dict(num_buckets=4), "num_buckets"), (dict(cluster_size=0), "cluster_size"),
                            (dict(chunk_size=2), "chunk_size")):
        with pytest.raises(ValueError, match=match):
            named_config("routing", **settings)


# ------------------------------------------------------------------ routing
def test_routing_centroids_move_by_the_moving_average_in_training_only():
    """One training forward: mu_c <- lambda mu_c + (1 - lambda) mean{unit queries and real unit keys in c},
    written out per vector here; eval forwards and generation steps leave the centroids alone."""
    module = _module("routing", num_clusters=3, centroid_decay=0.9)
    queries, keys, values, valid = _inputs(2, 2, 6, 4, 4, [6, 3], seed=4)
    state = module.init_state(keys, values, valid)
    before = module.centroids.clone()
    module(queries, state)
    module.step(queries[:, :, :1], state, position=0)
    assert torch.equal(module.centroids, before)  # eval
    module.train()
    module.step(queries[:, :, :1], state, position=0)
    assert torch.equal(module.centroids, before)  # a generation step never updates
    module(queries, state)
    vectors = [q for q in queries.reshape(-1, 4)] + [keys[b, h, j] for b in range(2) for h in range(2)
                                                     for j in range(6) if valid[b, j]]
    expected = before.clone()
    for c in range(3):
        members = []
        for x in vectors:
            unit = x / x.norm()
            distances = [float(((unit - before[i]) ** 2).sum()) for i in range(3)]
            if min(range(3), key=distances.__getitem__) == c:
                members.append(unit)
        if members:
            expected[c] = 0.9 * before[c] + 0.1 * torch.stack(members).mean(0)
    assert_exact(module.centroids, expected, "moving average")
    assert not torch.equal(module.centroids, before)


def test_routing_reads_the_centroids_it_started_with_and_matches_the_reference():
    module = _module("routing", num_clusters=3, cluster_size=3, scale=0.5).train()
    queries, keys, values, valid = _inputs(3, 2, 8, 5, 4, [8, 5, 0], seed=6)
    reference = _reference(module, queries, keys, values, valid)  # the centroids before the update
    output, _ = module(queries, module.init_state(keys, values, valid))
    assert_exact(output, reference, "training forward")
    assert torch.equal(output[2], torch.zeros_like(output[2]))  # an empty document
    weights = cross_attention_weights(module.eval(), queries, keys, module.init_state(keys, values, valid),
                                      start_position=0, key_valid=valid)
    assert_exact(torch.matmul(weights, values), module(queries, module.init_state(keys, values, valid))[0], "A V")


def test_routing_centroids_after_training_are_saved_with_the_model(tmp_path):
    model = converted(BUILDERS["t5"](), variant="routing", num_clusters=4, centroid_decay=0.5)
    ids, mask = padded_batch(model)
    dec = decoder_inputs(model, ids.shape[0], 6)
    initial = [layer.srformer.centroids.clone() for _, _, layer in cross_attention_modules(model)]
    model.train()
    with torch.no_grad():
        model(input_ids=ids, attention_mask=mask, decoder_input_ids=dec)
    model.eval()
    trained = [layer.srformer.centroids.clone() for _, _, layer in cross_attention_modules(model)]
    assert all(not torch.equal(a, b) for a, b in zip(initial, trained, strict=True))
    model.save_pretrained(tmp_path)
    loaded = srformer.from_pretrained(str(tmp_path))
    for centroids, (_, _, layer) in zip(trained, cross_attention_modules(loaded), strict=True):
        assert torch.equal(layer.srformer.centroids, centroids)
    assert_exact(teacher_forced_logits(loaded, ids, mask, dec), teacher_forced_logits(model, ids, mask, dec))


def test_routing_in_bf16_matches_the_reference_on_the_same_rounded_inputs():
    """bf16 queries, keys and values (a bf16 model): the clusters are decided in float32 from the bf16 numbers, so
    the float64 reference given the same numbers routes alike; the output then differs only by bf16 rounding of
    the scores, probabilities and the weighted sum: a few units of 2**-8 relative to the values (8 allowed)."""
    module = _module("routing", num_clusters=3, cluster_size=4)
    queries, keys, values, valid = _inputs(2, 2, 8, 5, 4, [8, 5], seed=7)
    low = [t.to(torch.bfloat16) for t in (queries, keys, values)]
    bf16 = _module("routing", num_clusters=3, cluster_size=4).to(torch.bfloat16)
    bf16.centroids = module.centroids.to(torch.bfloat16).double()  # the centroids the bf16 model holds, exactly
    output, _ = bf16(low[0], bf16.init_state(low[1], low[2], valid))
    assert output.dtype == torch.bfloat16
    reference = _reference(bf16, *[t.double() for t in low], valid)
    assert (output.double() - reference).abs().max().item() <= 8 * 2.0**-8 * values.abs().max().item()


def test_routing_clusters_are_balanced_and_a_step_reads_w_keys():
    """Centroids (1, 0) and (0, 1), w = 2. Unit keys at angles 0, 20, 45, 80 and 170 degrees: centroid 0 takes the
    two nearest (0 and 20 degrees: positions 0, 1), centroid 1 the 80- and 45-degree keys (positions 3, 2); the
    170-degree key is in no cluster. A query reads w = 2 keys whatever k."""
    module = _module("routing", head_dim=2, num_clusters=2, cluster_size=2)
    with torch.no_grad():
        module.centroids.copy_(torch.tensor([[1.0, 0.0], [0.0, 1.0]]))
    angles = torch.tensor([0.0, 20.0, 45.0, 80.0, 170.0], dtype=torch.float64).deg2rad()
    keys = torch.stack([angles.cos(), angles.sin()], dim=-1)[None, None] * 2.0
    values = torch.randn(1, 1, 5, 2, generator=torch.Generator().manual_seed(1), dtype=torch.float64)
    state = module.init_state(keys, values, None)
    assert state.members.tolist() == [[[[0, 1], [3, 2]]]]
    queries = torch.tensor([[[[0.2, 1.0], [1.0, -0.1]]]], dtype=torch.float64)  # centroids 1 and 0
    positions, mask = module.slots(queries, state)
    assert positions.tolist() == [[[[3, 2], [0, 1]]]] and bool(mask.all())
    output, _ = module(queries, state)
    for t, attended in ((0, [3, 2]), (1, [0, 1])):
        weights = torch.softmax(keys[0, 0, attended] @ queries[0, 0, t], dim=0)
        assert_exact(output[0, 0, t], weights @ values[0, 0, attended], f"query {t}")
    assert_exact(output, _reference(module, queries, keys, values, None), "reference")
    # one real key: every cluster holds it (slot 1 is masked)
    valid = torch.tensor([[False, False, True, False, False]])
    alone, _ = module(queries, module.init_state(keys, values, valid))
    assert_exact(alone, values[0, 0, 2].expand(1, 1, 2, 2), "one real key")
    long_keys = torch.randn(1, 1, 40, 2, dtype=torch.float64)
    assert module.slots(queries, module.init_state(long_keys, long_keys, None))[0].shape == (1, 1, 2, 2)
    default = _module("routing", head_dim=2, num_clusters=2)  # w = ceil(n / c): 3 places at k = 5, 2 count at n = 4
    with torch.no_grad():
        default.centroids.copy_(module.centroids)
    valid = torch.tensor([[True, True, True, True, False]])
    positions, mask = default.slots(queries, default.init_state(keys, values, valid))
    assert positions.shape == (1, 1, 2, 3) and mask.sum(-1).tolist() == [[[2, 2]]]
    assert positions[mask].tolist() == [3, 2, 0, 1]
