"""The content-based sparse attentions (``reformer``): what the shared matrices over ``NAMED_SETTINGS`` do not
cover (``tests/attention/test_variants.py``, ``tests/models/test_variants.py`` run them at default settings):
several hash rounds against the float64 reference, the empty-bucket rule, the attention weights, and the seeded
buffers saved with the model."""

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
    module = _module("reformer", scale=0.5, num_buckets=4, hash_rounds=3)
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
    attends every real key (full attention)."""
    module = _module("reformer", head_dim=2, num_buckets=2)
    with torch.no_grad():
        module.rotations.copy_(torch.tensor([[[1.0], [0.0]]]))  # bucket 0 for x_0 > 0, bucket 1 for x_0 < 0
    keys = torch.tensor([[[[1.0, 0.0], [2.0, 1.0], [-1.0, 0.5]]]], dtype=torch.float64)
    values = torch.tensor([[[[1.0, 0.0], [0.0, 1.0], [7.0, 7.0]]]], dtype=torch.float64)
    queries = torch.tensor([[[[0.5, 1.0], [-2.0, 0.0]]]], dtype=torch.float64)
    state = module.init_state(keys, values, None)
    assert state.key_codes.tolist() == [[[[0, 0, 1]]]]
    output, _ = module(queries, state)
    assert_exact(output[0, 0, 1], values[0, 0, 2], "bucket 1 holds key 2 alone")
    weights = torch.softmax(keys[0, 0, :2] @ queries[0, 0, 0], dim=0)
    assert_exact(output[0, 0, 0], weights @ values[0, 0, :2], "bucket 0 holds keys 0 and 1")
    padded = torch.tensor([[True, True, False]])
    state = module.init_state(keys, values, padded)
    assert state.key_codes.tolist() == [[[[0, 0, -1]]]]
    output, _ = module(queries[:, :, 1:], state)
    full = torch.softmax(keys[0, 0, :2] @ queries[0, 0, 1], dim=0) @ values[0, 0, :2]
    assert_exact(output[0, 0, 0], full, "an empty bucket: every real key")


def test_reformer_weights_are_the_softmax_the_output_takes():
    """The weights (output_attentions) reproduce the output (O = A V) and equal the reference's own weights:
    the reference's output for one-hot values (V = I, d = k) is its weight matrix."""
    module = _module("reformer", head_dim=6, scale=0.7, num_buckets=4, hash_rounds=2)
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
    ):
        with pytest.raises(ValueError, match=match):
            named_config("reformer", **settings)
    with pytest.raises(ValueError, match="num_buckets"):
        named_config("segmented", num_buckets=4)
