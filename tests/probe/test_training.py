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
    curriculum_lengths,
    model_inputs,
    predict,
    predict_stepwise,
    train_model,
)

VOCAB = ProbeVocabulary()
RECALL4 = TaskSpec("recall", 4)
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


def _schedule(min_segments: int, *, length: int = 128, segment_size: int = 8, start: int = 8, steps: int = 100,
              task: TaskSpec = RECALL4) -> list[int]:
    settings = TrainSettings(steps=steps, curriculum_start=start, curriculum_hold=0.5, curriculum_ramp=0.3,
                             min_curriculum_segments=min_segments)
    return curriculum_lengths(settings, task, VOCAB, length=length, segment_size=segment_size)


def test_the_segment_floor_starts_the_curriculum_at_that_many_segments_and_it_still_reaches_the_length():
    floored = _schedule(2)
    assert len(floored) == 100 and floored == sorted(floored)
    assert floored[:50] == [16] * 50 and min(floored) == 16  # two 8-token segments from the first step
    assert floored[80:] == [128] * 20 and 16 < floored[65] < 128
    assert min(_schedule(4, length=512, segment_size=32)) == 128  # four 32-token segments


def test_one_segment_is_no_floor_and_the_previous_schedule():
    old = [curriculum_length(step, 100, start=8, final=128, ramp=0.3, hold=0.5) for step in range(100)]
    assert _schedule(1) == old and old[0] == 8
    # below one segment (s=32, start 8) the old schedule is kept too: 1 adds no floor
    assert _schedule(1, length=512, segment_size=32)[0] == 8
    assert _schedule(1, task=TaskSpec("aggregate", 4))[0] == TaskSpec("aggregate", 4).min_length(VOCAB)


def test_the_floor_is_capped_at_the_cells_length():
    assert _schedule(4, length=24, segment_size=8) == [24] * 100  # 4 segments = 32 tokens > k
    # a floor below the start changes nothing
    assert _schedule(2, length=48, segment_size=16, start=40) == _schedule(1, length=48, segment_size=16, start=40)
    assert all(k <= 24 for k in _schedule(8, length=24))


def test_no_curriculum_ignores_the_floor_and_a_bad_floor_is_rejected():
    assert _schedule(4, start=0) == [128] * 100
    with pytest.raises(ValueError, match="min_curriculum_segments"):
        _schedule(0)


def test_training_uses_the_floored_schedule():
    lengths: list[int] = []
    settings = TrainSettings(steps=4, batch_size=2, warmup=1, curriculum_start=8, curriculum_hold=0.5,
                             curriculum_ramp=0.25, min_curriculum_segments=3)
    train_model(build_model(VOCAB, TINY, seed=0), TaskSpec("recall", 2), VOCAB, settings, length=48,
                segment_size=8, target_length=5, seed=0, on_step=lambda step, loss, length: lengths.append(length))
    assert lengths == curriculum_lengths(settings, TaskSpec("recall", 2), VOCAB, length=48, segment_size=8)
    assert lengths[0] == 24 and lengths[-1] == 48


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
    passed = model_inputs(model, plain)
    assert "overlay_ids" not in plain and passed.keys() == plain.keys()
    assert all(torch.equal(passed[name], plain[name]) and passed[name].device == model.device for name in plain)


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


@pytest.mark.parametrize("variant", ["full", "srformer", "knn"])
def test_stepwise_prediction_through_the_cache_equals_teacher_forcing(variant):
    from srformer.config import named_config
    from srformer.models.convert import convert

    model = build_model(VOCAB, TINY, seed=1)
    if variant != "full":
        model = convert(model, named_config(variant, segment_size=8, target_length=6))
    examples = batch_examples(TaskSpec("recall", 2), VOCAB, seed=4, step=0, batch_size=3, length=48, segment_size=8,
                              target_length=6)
    with torch.no_grad():
        assert predict_stepwise(model, examples, VOCAB, batch_size=2) == predict(model, examples, VOCAB)


def test_bad_budget_is_rejected():
    with pytest.raises(ValueError, match="steps"):
        train_model(build_model(VOCAB, TINY, seed=0), TaskSpec("copy", 1), VOCAB, TrainSettings(steps=-1),
                    length=8, segment_size=4, target_length=2, seed=0)
    with pytest.raises(ValueError, match="batch_size"):
        train_model(build_model(VOCAB, TINY, seed=0), TaskSpec("copy", 1), VOCAB, TrainSettings(steps=0, batch_size=0),
                    length=8, segment_size=4, target_length=2, seed=0)


def test_zero_steps_leave_the_model_as_it_is(monkeypatch):
    """convert+0: no optimizer, no forward pass, the weights and the mode unchanged; warm-up ``min(50, 0 // 10)``
    is 0 and no schedule is built."""
    model = _srformer()
    model.eval()
    before = {name: tensor.clone() for name, tensor in model.state_dict().items()}
    monkeypatch.setattr(torch.optim, "AdamW", lambda *a, **k: pytest.fail("an optimizer was built"))
    monkeypatch.setattr(type(model), "forward", lambda *a, **k: pytest.fail("a forward pass was run"))
    settings = TrainSettings(steps=0, batch_size=2, warmup=min(50, 0 // 10), curriculum_start=0)
    summary = train_model(model, TaskSpec("recall", 2), VOCAB, settings, length=48, segment_size=8, target_length=6,
                          seed=0, on_step=lambda *a: pytest.fail("a step was reported"), diagnostics_every=1)
    assert summary == {"steps": 0, "seconds": 0.0, "final_loss": None, "diagnostics": []}
    assert not model.training
    after = model.state_dict()
    assert after.keys() == before.keys() and all(torch.equal(after[name], before[name]) for name in before)


def _srformer(seed: int = 0):
    from srformer.config import named_config
    from srformer.models.convert import convert

    return convert(build_model(VOCAB, TINY, seed=seed), named_config("srformer", segment_size=8, target_length=6))


def test_training_records_recurrent_term_diagnostics_on_its_own_batches():
    from srformer.evaluation.recurrent_term import recurrent_layers

    spec = TaskSpec("recall", 2)
    settings = TrainSettings(steps=5, batch_size=2, warmup=1, curriculum_start=40)
    kwargs = {"length": 48, "segment_size": 8, "target_length": 6, "seed": 0}
    summary = train_model(_srformer(), spec, VOCAB, settings, diagnostics_every=2, **kwargs)
    diagnostics = summary["diagnostics"]
    assert [d["step"] for d in diagnostics] == [0, 2, 4]
    assert [d["length"] for d in diagnostics] == [curriculum_length(s, 5, start=40, final=48, ramp=0.5)
                                                  for s in (0, 2, 4)]
    for entry in diagnostics:
        assert len(entry["layers"]) == TINY.num_decoder_layers and entry["loss"] > 0
        for layer in entry["layers"]:
            assert 0.0 <= layer["firing_fraction"] <= 1.0 and 0.0 <= layer["discarded_input"] <= 1.0
            assert layer["recurrent_to_softmax"] >= 0.0 and layer["grad_weight"] >= 0.0
    # Step 0's gradients are those of the step's own batch before clipping: the same model, batch and backward
    # by hand give the same numbers.
    model = _srformer()
    examples = batch_examples(spec, VOCAB, seed=0, step=0, batch_size=2, length=diagnostics[0]["length"],
                              segment_size=8, target_length=6)
    loss = model(**model_inputs(model, collate(examples, VOCAB))).loss
    loss.backward()
    raf = recurrent_layers(model)[0].raf
    assert diagnostics[0]["loss"] == loss.item()
    weight_grad = float(torch.linalg.vector_norm(raf.linear.weight.grad.double()))  # the monitor's float64 norm
    assert diagnostics[0]["layers"][0]["grad_weight"] == weight_grad
    assert diagnostics[0]["layers"][0]["grad_threshold"] == abs(float(raf.threshold.grad))
    short = train_model(_srformer(), spec, VOCAB, TrainSettings(steps=4, batch_size=2, warmup=1,
                                                               curriculum_start=40), diagnostics_every=2, **kwargs)
    assert [d["step"] for d in short["diagnostics"]] == [0, 2, 3]  # and the last step
    plain = train_model(build_model(VOCAB, TINY, seed=0), spec, VOCAB, settings, diagnostics_every=2, **kwargs)
    assert plain["diagnostics"] == []
    with pytest.raises(ValueError, match="diagnostics_every"):
        train_model(_srformer(), spec, VOCAB, settings, diagnostics_every=-1, **kwargs)


def test_diagnose_changes_no_parameter_and_leaves_no_gradient():
    from srformer.probe.training import diagnose

    model = _srformer()
    before = {name: p.detach().clone() for name, p in model.named_parameters()}
    examples = batch_examples(TaskSpec("recall", 2), VOCAB, seed=3, step=0, batch_size=3, length=48, segment_size=8,
                              target_length=6)
    result = diagnose(model, examples, VOCAB)
    assert result is not None and result["examples"] == 3 and result["length"] == 48
    assert len(result["layers"]) == 1 and result["layers"][0]["grad_weight"] is not None
    assert all(p.grad is None and torch.equal(p, before[name]) for name, p in model.named_parameters())
    assert diagnose(build_model(VOCAB, TINY, seed=0), examples, VOCAB) is None
