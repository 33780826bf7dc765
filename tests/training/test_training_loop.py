"""End-to-end behaviour of srformer.training.train on a tiny random T5 (CPU).

Interruption is simulated without any test hook in the library: a forward pre-hook on the model
raises ``SimulatedKill`` when the N-th micro-batch starts, i.e. the process "dies" mid-step, after
some checkpoints were written and with un-checkpointed steps lost. The resumed call gets a freshly
initialised model (different seed), so its weights can only come from the checkpoint. Both calls use
the same ``TrainingSettings`` (``max_steps`` of the full run), so the learning-rate schedule has the
full length in both.
"""

from __future__ import annotations

import json

import pytest
import torch
from transformers import PreTrainedTokenizerFast, T5ForConditionalGeneration

from srformer.training import TrainingSettings, find_checkpoint, train


class SimulatedKill(RuntimeError):
    """Raised from inside the training loop to stand in for a killed process."""


def kill_at_forward(model: torch.nn.Module, call_number: int):
    calls = {"n": 0}

    def hook(_module, _args, _kwargs):
        calls["n"] += 1
        if calls["n"] == call_number:
            raise SimulatedKill(f"killed at forward call {call_number}")

    return model.register_forward_pre_hook(hook, with_kwargs=True)


def assert_same_weights(a: torch.nn.Module, b: torch.nn.Module) -> None:
    state_a, state_b = a.state_dict(), b.state_dict()
    assert state_a.keys() == state_b.keys()
    for name in state_a:
        assert torch.equal(state_a[name], state_b[name]), name


def settings_for(**overrides) -> TrainingSettings:
    base = dict(max_steps=8, learning_rate=1e-2, warmup_steps=2, batch_size=4, save_every=4, log_every=2,
                progress=False, seed=3)
    base.update(overrides)
    return TrainingSettings(**base)


def test_loss_decreases_on_repeated_data(make_model, make_features, tmp_path, tokenizer):
    model = make_model()
    data = make_features(4) * 4
    settings = TrainingSettings(max_steps=40, learning_rate=1e-2, batch_size=4, log_every=5, save_every=100,
                                progress=False)
    result = train(model, tokenizer, data, tmp_path / "run", settings, save_final=False)
    assert result.steps == 40
    assert result.stopped_by == "max_steps"
    assert [step for step, _ in result.loss_history] == list(range(5, 41, 5))
    first, last = result.loss_history[0][1], result.loss_history[-1][1]
    assert last < 0.5 * first
    assert result.final_loss == last
    assert not model.training


@pytest.mark.parametrize(
    ("accumulation", "save_every", "kill_at", "dropout"),
    [
        # 3 batches/epoch: kill during step 6 (epoch 1), resume from the step-4 checkpoint (epoch 1, batch 1).
        (1, 4, 6, 0.0),
        # 3 batches/epoch, 2 steps/epoch: kill at micro-batch 8 (step 5), resume from step 3 (mid-epoch 1).
        (2, 3, 8, 0.0),
        # Same with dropout: the global torch RNG must be restored from the checkpoint too.
        (2, 3, 8, 0.3),
    ],
)
def test_interrupted_and_resumed_run_matches_uninterrupted(make_model, tmp_path, tokenizer, features, accumulation,
                                                          save_every, kill_at, dropout):
    settings = settings_for(gradient_accumulation_steps=accumulation, save_every=save_every)

    reference = make_model(dropout=dropout)
    expected = train(reference, tokenizer, features, tmp_path / "full", settings, save_final=False)

    victim = make_model(dropout=dropout)
    handle = kill_at_forward(victim, kill_at)
    with pytest.raises(SimulatedKill):
        train(victim, tokenizer, features, tmp_path / "split", settings, save_final=False)
    handle.remove()
    assert not victim.training
    state = json.loads((find_checkpoint(tmp_path / "split") / "trainer_state.json").read_text())
    assert 0 < state["global_step"] < settings.max_steps

    resumed = make_model(seed=123, dropout=dropout)  # weights must come from the checkpoint
    result = train(resumed, tokenizer, features, tmp_path / "split", settings, resume=True, save_final=False)

    assert_same_weights(reference, resumed)
    assert result.steps == expected.steps == 8
    assert result.loss_history == expected.loss_history
    assert result.final_loss == expected.final_loss


def test_time_budget_stops_with_checkpoint_and_resume_matches(make_model, tmp_path, tokenizer, features):
    settings = settings_for()
    reference = make_model()
    train(reference, tokenizer, features, tmp_path / "full", settings, save_final=False)

    budgeted = settings_for(time_budget_seconds=1e-9)
    first = train(make_model(), tokenizer, features, tmp_path / "split", budgeted, save_final=False)
    assert first.stopped_by == "time_budget"
    assert first.steps == 1
    state = json.loads((tmp_path / "split" / "checkpoint" / "trainer_state.json").read_text())
    assert state["global_step"] == 1
    assert [(entry["step"], entry["loss"]) for entry in state["log_history"] if "loss" in entry] == [
        (1, first.final_loss)
    ]

    resumed = make_model(seed=7)
    second = train(resumed, tokenizer, features, tmp_path / "split", settings, resume=True, save_final=False)
    assert second.stopped_by == "max_steps"
    assert second.steps == 8
    assert second.seconds >= first.seconds
    assert_same_weights(reference, resumed)


def test_resume_when_max_steps_already_reached_takes_no_step(make_model, tmp_path, tokenizer, features):
    settings = settings_for(max_steps=3, warmup_steps=0)
    model = make_model()
    first = train(model, tokenizer, features, tmp_path, settings, save_final=False)
    again_model = make_model(seed=9)
    again = train(again_model, tokenizer, features, tmp_path, settings, resume=True, save_final=False)
    assert again.steps == first.steps == 3
    assert again.loss_history == first.loss_history
    assert_same_weights(model, again_model)
    assert not again_model.training


def test_refuses_to_overwrite_existing_checkpoint(make_model, tmp_path, tokenizer, features):
    settings = settings_for(max_steps=2, warmup_steps=0)
    train(make_model(), tokenizer, features, tmp_path, settings, save_final=False)
    with pytest.raises(ValueError, match="resume"):
        train(make_model(), tokenizer, features, tmp_path, settings)


def test_resume_with_changed_settings_warns(make_model, tmp_path, tokenizer, features):
    train(make_model(), tokenizer, features, tmp_path, settings_for(max_steps=2, warmup_steps=0), save_final=False)
    changed = settings_for(max_steps=4, warmup_steps=0, learning_rate=3e-3)
    with pytest.warns(UserWarning, match="learning_rate"):
        result = train(make_model(), tokenizer, features, tmp_path, changed, resume=True, save_final=False)
    assert result.steps == 4


def test_resume_without_checkpoint_warns_and_starts_fresh(make_model, tmp_path, tokenizer, features):
    settings = settings_for(max_steps=2, warmup_steps=0)
    with pytest.warns(UserWarning, match="no checkpoint"):
        result = train(make_model(), tokenizer, features, tmp_path, settings, resume=True, save_final=False)
    assert result.steps == 2


def test_leftover_swap_directories_are_handled(make_model, tmp_path, tokenizer, features):
    """A kill between the two renames leaves only `.checkpoint-old`, plus a stale temporary directory."""
    settings = settings_for()
    reference = make_model()
    train(reference, tokenizer, features, tmp_path / "full", settings, save_final=False)

    run = tmp_path / "split"
    victim = make_model()
    kill_at_forward(victim, 6)  # dies during step 6; the step-4 checkpoint exists
    with pytest.raises(SimulatedKill):
        train(victim, tokenizer, features, run, settings, save_final=False)
    (run / "checkpoint").rename(run / ".checkpoint-old")
    (run / ".checkpoint-tmp-5").mkdir()
    (run / ".checkpoint-tmp-5" / "half-written.bin").write_bytes(b"\0" * 10)
    assert find_checkpoint(run) == run / ".checkpoint-old"

    with pytest.raises(ValueError, match="resume"):
        train(make_model(), tokenizer, features, run, settings)

    resumed = make_model(seed=5)
    train(resumed, tokenizer, features, run, settings, resume=True, save_final=False)
    assert_same_weights(reference, resumed)
    assert sorted(p.name for p in run.iterdir()) == ["checkpoint"]


def test_final_directory_loads_with_from_pretrained(make_model, tmp_path, tokenizer, features):
    settings = settings_for(max_steps=3, warmup_steps=0, progress=True)
    model = make_model()
    result = train(model, tokenizer, features, tmp_path, settings)

    loaded = T5ForConditionalGeneration.from_pretrained(tmp_path)
    assert_same_weights(model, loaded)
    reloaded_tokenizer = PreTrainedTokenizerFast.from_pretrained(tmp_path)
    assert reloaded_tokenizer("w3 w4")["input_ids"] == tokenizer("w3 w4")["input_ids"]

    summary = json.loads((tmp_path / "training_summary.json").read_text())
    assert summary["steps"] == 3
    assert summary["final_loss"] == pytest.approx(result.final_loss)
    assert summary["seconds"] == pytest.approx(result.seconds)
    # 3 steps of one batch each = exactly one epoch (4 + 4 + 2 examples): every real token counted once.
    assert summary["tokens_seen"] == sum(len(f["input_ids"]) + len(f["labels"]) for f in features)
    assert summary["tokens_seen"] == summary["input_tokens"] + summary["target_tokens"]
    assert (tmp_path / "checkpoint" / "trainer_state.json").is_file()


def test_rejects_bad_features(make_model, tmp_path, tokenizer):
    settings = settings_for(max_steps=1, warmup_steps=0)
    with pytest.raises(ValueError, match="empty"):
        train(make_model(), tokenizer, [], tmp_path, settings)
    with pytest.raises(ValueError, match="labels"):
        train(make_model(), tokenizer, [{"input_ids": [3, 1]}], tmp_path, settings)
    assert not any(tmp_path.iterdir())


def test_an_accumulated_step_logs_the_mean_of_its_micro_batch_losses(make_model, tmp_path, tokenizer, features):
    """T5 takes **kwargs but ignores the Trainer's num_items_in_batch; the Trainer must still divide by the
    accumulation steps (else loss and gradients are doubled here). The same two first batches, taken as one
    accumulated step and as two steps with a learning rate too small to move any float32 weight, give the
    same mean loss up to the rounding of one float32 addition and halving (< 1e-6 relative)."""
    accumulated = train(make_model(), tokenizer, features, tmp_path / "accumulated",
                        settings_for(max_steps=1, warmup_steps=0, batch_size=2, gradient_accumulation_steps=2,
                                     log_every=1), save_final=False)
    separate = train(make_model(), tokenizer, features, tmp_path / "separate",
                     settings_for(max_steps=2, warmup_steps=0, batch_size=2, log_every=2, save_every=2,
                                  learning_rate=1e-30), save_final=False)
    assert accumulated.final_loss == pytest.approx(separate.final_loss, rel=1e-6)
