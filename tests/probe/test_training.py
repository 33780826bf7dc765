"""Probe training helpers: curriculum, batches, collation, the loop's bad input."""

from __future__ import annotations

import pytest
import torch

from srformer.probe.tasks import ProbeVocabulary, TaskSpec
from srformer.probe.training import (
    ModelShape,
    TrainSettings,
    batch_examples,
    build_model,
    collate,
    curriculum_length,
    model_inputs,
    predict,
    train_model,
)

VOCAB = ProbeVocabulary()
TINY = ModelShape(d_model=16, d_ff=32, num_layers=1, num_decoder_layers=1, num_heads=2, d_kv=8)


def test_curriculum_grows_linearly_then_stays():
    lengths = [curriculum_length(step, 100, start=64, final=512, ramp=0.5) for step in range(100)]
    assert lengths[0] == 64 and lengths[50:] == [512] * 50
    assert lengths == sorted(lengths) and all(k % 8 == 0 for k in lengths)
    assert curriculum_length(3, 100, start=64, final=512, ramp=0.0) == 512


def test_curriculum_holds_the_start_length_first():
    lengths = [curriculum_length(step, 100, start=64, final=512, ramp=0.25, hold=0.5) for step in range(100)]
    assert lengths[:50] == [64] * 50 and lengths[75:] == [512] * 25
    assert lengths == sorted(lengths) and 64 < lengths[60] < 512
    assert curriculum_length(99, 100, start=64, final=512, ramp=0.0, hold=0.5) == 512


def test_batches_are_a_function_of_seed_and_step():
    kwargs = {"batch_size": 3, "length": 64, "segment_size": 8, "target_length": 9}
    spec = TaskSpec("recall", 4)
    first = batch_examples(spec, VOCAB, seed=1, step=5, **kwargs)
    assert first == batch_examples(spec, VOCAB, seed=1, step=5, **kwargs)
    assert first != batch_examples(spec, VOCAB, seed=1, step=6, **kwargs)


def test_collate_appends_eos_and_masks_padding():
    examples = batch_examples(TaskSpec("copy", 2), VOCAB, seed=0, step=0, batch_size=2, length=16, segment_size=8,
                              target_length=3)
    batch = collate(examples, VOCAB)
    assert batch["input_ids"].shape == (2, 16) and bool(batch["attention_mask"].all())
    assert batch["labels"][:, -1].tolist() == [VOCAB.eos_id] * 2
    assert batch["labels"][0, :2].tolist() == list(examples[0].target)


def test_recall_overlay_is_added_to_the_encoder_input_embedding():
    examples = batch_examples(TaskSpec("recall", 2), VOCAB, seed=0, step=0, batch_size=2, length=48, segment_size=8,
                              target_length=5)
    batch = collate(examples, VOCAB)
    assert batch["overlay_ids"].tolist() == [list(e.overlay) for e in examples]
    model = build_model(VOCAB, TINY, seed=0)
    inputs = model_inputs(model, batch)
    assert "input_ids" not in inputs and "overlay_ids" not in inputs
    table = model.get_input_embeddings().weight
    for b, example in enumerate(examples):
        for position, (token, extra) in enumerate(zip(example.source, example.overlay, strict=True)):
            expected = table[token] + (table[extra] if extra >= 0 else 0)
            assert torch.equal(inputs["inputs_embeds"][b, position], expected)
    plain = collate(batch_examples(TaskSpec("copy", 2), VOCAB, seed=0, step=0, batch_size=2, length=16,
                                   segment_size=8, target_length=3), VOCAB)
    assert "overlay_ids" not in plain and model_inputs(model, plain) is plain


def test_training_runs_and_prediction_has_target_length():
    model = build_model(VOCAB, TINY, seed=0)
    before = [p.detach().clone() for p in model.parameters()]
    spec = TaskSpec("recall", 2)
    summary = train_model(model, spec, VOCAB, TrainSettings(steps=2, batch_size=2, warmup=1, curriculum_start=40),
                          length=48, segment_size=8, target_length=5, seed=0)
    assert summary["steps"] == 2 and summary["final_loss"] > 0
    assert any(not torch.equal(a, b) for a, b in zip(before, model.parameters(), strict=True))
    examples = batch_examples(spec, VOCAB, seed=9, step=0, batch_size=3, length=48, segment_size=8, target_length=6)
    assert [len(p) for p in predict(model, examples, VOCAB)] == [4, 4, 4]


def test_bad_budget_is_rejected():
    with pytest.raises(ValueError, match="steps"):
        train_model(build_model(VOCAB, TINY, seed=0), TaskSpec("copy", 1), VOCAB, TrainSettings(steps=0),
                    length=8, segment_size=4, target_length=2, seed=0)
