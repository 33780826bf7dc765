"""``segment_size="auto"``: the segment size follows the input, ``s = ceil(longest real length / target_length)``,
and a model with it computes exactly what the same model with that int segment size computes."""

from __future__ import annotations

import pytest
import torch

import srformer
from tests.models.conftest import BUILDERS, converted, padded_batch, plain_generation_config
from tests.registry_cases import segmented_mechanisms

SEGMENTED = segmented_mechanisms()


@pytest.mark.parametrize("longest,target_length,expected", [(0, 8, 1), (1, 8, 1), (8, 8, 1), (9, 8, 2),
                                                             (24, 8, 3), (262_144, 128, 2048)])
def test_the_segment_size_follows_the_longest_input(longest, target_length, expected):
    config = srformer.SRformerConfig("srformer", segment_size="auto", target_length=target_length)
    assert config.for_input_length(longest).segment_size == expected
    assert srformer.SRformerConfig("srformer", segment_size=5).for_input_length(longest).segment_size == 5


def test_a_bad_segment_size_names_auto_as_the_other_choice():
    with pytest.raises(ValueError, match="segment_size.*'auto'"):
        srformer.SRformerConfig("srformer", segment_size="longest")


def test_a_setting_smaller_than_the_resolved_segment_size_is_refused_when_it_is_resolved():
    config = srformer.SRformerConfig("window", segment_size="auto", target_length=4, window_size=6)
    assert config.for_input_length(20).segment_size == 5
    with pytest.raises(ValueError, match="window_size"):
        config.for_input_length(40)


@pytest.mark.parametrize("variant", SEGMENTED)
def test_auto_equals_the_int_segment_size_of_the_longest_input(family, variant):
    """Logits of a padded batch (longest 24 tokens, target length 8: s = 3), and greedy generate(), bit for bit."""
    base = BUILDERS[family]()
    ids, mask = padded_batch(base)
    models = []
    for segment_size in ("auto", 3):
        torch.manual_seed(7)  # the same initial values of the mechanism's own parameters
        models.append(converted(base, variant=variant, segment_size=segment_size, target_length=8))
    with torch.no_grad():
        logits = [m(input_ids=ids, attention_mask=mask, decoder_input_ids=ids[:, :5]).logits for m in models]
        assert torch.equal(logits[0], logits[1]), variant
        config = plain_generation_config(models[0], max_new_tokens=6, min_new_tokens=6)
        outputs = [m.generate(input_ids=ids, attention_mask=mask, generation_config=config) for m in models]
    assert torch.equal(outputs[0], outputs[1]), variant


def test_each_new_input_gets_its_own_segment_size():
    model = converted(BUILDERS["t5"](), variant="srformer", segment_size="auto", target_length=8, lean_cache=True)
    attention = next(m for m in model.modules() if hasattr(m, "configured"))
    config = plain_generation_config(model, max_new_tokens=3, min_new_tokens=3)
    with torch.no_grad():
        for length, expected in ((16, 2), (40, 5), (8, 1)):
            ids, mask = padded_batch(model, lengths=(length,))
            model.generate(input_ids=ids, attention_mask=mask, generation_config=config)
            assert attention.settings.segment_size == expected
    assert attention.configured.segment_size == "auto"
    assert model.config.srformer["segment_size"] == "auto"
