"""srformer.training.pretrain: examples, resume (bit-identical weights), the log, and bad input."""

from __future__ import annotations

import json

import pytest
import torch
from safetensors.torch import load_file
from transformers import AutoModelForSeq2SeqLM, AutoTokenizer

from srformer.data.pairs import load_aclsum
from srformer.training.pretrain import LOG_NAME, PLOT_NAME, RECIPE_NAME, pretrain
from srformer.training.pretrain_data import PretrainExamples, PretrainRecipe, parse_objective_mix
from srformer.training.settings import TrainingSettings
from srformer.training.trainer import SRformerTrainer

SENTINELS = list(range(500, 600))


class SimulatedKill(RuntimeError):
    """Raised from inside the training loop to stand in for a killed process."""


@pytest.fixture(scope="module")
def documents() -> list[str]:
    return [pair.document for pair in load_aclsum("train")[:10]]


def recipe(**overrides) -> PretrainRecipe:
    values = dict(model="bart-tiny", max_source_length=32, vocab_size=300, curriculum_start=8, curriculum_hold=0.1,
                  curriculum_end=0.6, eval_documents=2, eval_every=4)
    return PretrainRecipe(**{**values, **overrides})


def settings(**overrides) -> TrainingSettings:
    values = dict(max_steps=12, batch_size=4, learning_rate=1e-3, warmup_steps=2, save_every=3, log_every=2,
                  seed=5, progress=False)
    return TrainingSettings(**{**values, **overrides})


def test_examples_follow_the_curriculum_and_the_mix():
    documents = [list(range(3, 203)), list(range(203, 253))]
    mix = recipe(max_source_length=64, curriculum_start=8, curriculum_hold=0.25, curriculum_end=0.75)
    examples = PretrainExamples(documents, mix, max_steps=8, examples_per_step=10, seed=1, sentinel_ids=SENTINELS,
                                eos_id=1)
    assert len(examples) == 80
    objectives = []
    for index in range(len(examples)):
        objective, example = examples.example(index)
        objectives.append(objective)
        step = index // 10
        assert len(example["input_ids"]) <= mix.source_length(step, 8)
        assert example["input_ids"][-1] == example["labels"][-1] == 1
        if objective == "copy":
            assert example["labels"] == example["input_ids"]  # the whole window fits the target length
        assert examples[index] == example  # a pure function of the index
    assert {"span", "copy"} == set(objectives)
    first, last = examples[0], examples[79]
    assert len(first["input_ids"]) <= 8 and len(examples.example(79)[1]["input_ids"]) > 8
    assert last == examples[-1]
    only_copy = PretrainExamples(documents, recipe(objective_mix={"copy": 1.0}), max_steps=8, examples_per_step=2,
                                 seed=0, sentinel_ids=SENTINELS, eos_id=1)
    assert {only_copy.example(i)[0] for i in range(16)} == {"copy"}
    mixed = recipe(max_source_length=64, objective_mix={"copy": 1.0, "passage": 1.0})
    with_passages = PretrainExamples(documents, mixed, max_steps=8, examples_per_step=10, seed=0,
                                     sentinel_ids=SENTINELS, eos_id=1)
    drawn = [with_passages.example(i) for i in range(80)]
    assert {objective for objective, _ in drawn} == {"copy", "passage"}
    for objective, example in drawn:
        source, target = example["input_ids"][:-1], example["labels"][:-1]
        assert any(source[i:i + len(target)] == target for i in range(len(source) - len(target) + 1))
        if objective == "passage":
            assert len(target) <= 48
    passages = [example for objective, example in drawn if objective == "passage"]
    assert any(example["labels"][0] != example["input_ids"][0] for example in passages)  # not from the top


def test_sentence_objectives_use_the_sentence_starts():
    # 4 documents of sentences [5-token sentences with distinct tokens], the sentence starts every 5 tokens
    documents = [list(range(3 + 100 * d, 63 + 100 * d)) for d in range(4)]
    starts = [list(range(0, 60, 5)) for _ in documents]
    mix = recipe(max_source_length=48, curriculum_start=48, max_target_length=24,
                 objective_mix={"cued": 1.0, "gap": 1.0, "reorder": 1.0, "marked": 1.0})
    examples = PretrainExamples(documents, mix, max_steps=4, examples_per_step=10, seed=3, sentinel_ids=SENTINELS,
                                eos_id=1, sentence_starts=starts)
    seen = set()
    for index in range(len(examples)):
        objective, example = examples.example(index)
        seen.add(objective)
        source, target = example["input_ids"][:-1], example["labels"][:-1]
        assert len(example["input_ids"]) <= 48 and len(example["labels"]) <= 24
        if objective == "cued":
            cue = source[:source.index(SENTINELS[0])]
            assert (cue[0] - 3) % 5 == 0 or cue[0] == source[source.index(SENTINELS[0]) + 1]  # a sentence start
            assert target[0] == cue[-1] + 1  # the sentence goes on after its cue
        elif objective == "gap":
            assert SENTINELS[1] in source and target
        elif objective == "marked":
            at = source.index(SENTINELS[2])
            assert source[at + 1:at + 1 + len(target)] == target  # the sentence after the marker
            assert (target[0] - 3) % 5 == 0 or at == 0  # a sentence start (or the window's first, partial one)
            # a whole 5-token sentence, or the window's cut first or last piece
            assert len(target) <= 5 and (len(target) == 5 or at == 0 or at + 1 + len(target) == len(source))
        else:
            assert objective == "reorder" and set(target) <= set(source)
    assert seen == {"cued", "gap", "reorder", "marked"}
    with pytest.raises(ValueError, match="sentence_starts"):
        PretrainExamples(documents, mix, max_steps=4, examples_per_step=10, seed=3, sentinel_ids=SENTINELS, eos_id=1)


def test_span_and_copy_examples_do_not_depend_on_sentence_starts():
    documents = [list(range(3, 203))]
    mix = recipe(max_source_length=64)
    plain = PretrainExamples(documents, mix, max_steps=8, examples_per_step=4, seed=2, sentinel_ids=SENTINELS,
                             eos_id=1)
    with_starts = PretrainExamples(documents, mix, max_steps=8, examples_per_step=4, seed=2, sentinel_ids=SENTINELS,
                                   eos_id=1, sentence_starts=[[0, 50, 100]])
    assert [plain.example(i) for i in range(32)] == [with_starts.example(i) for i in range(32)]


@pytest.mark.slow
def test_sentence_objectives_are_measured_on_held_out_documents(documents, tmp_path, one_thread):
    mix = recipe(max_source_length=64, curriculum_start=16, curriculum_hold=0.25,
                 objective_mix={"span": 1.0, "cued": 1.0, "gap": 1.0, "reorder": 1.0})
    result = pretrain(documents, mix, tmp_path, settings(max_steps=8, save_every=4))
    assert [entry["step"] for entry in result.objective_history] == [4, 8]
    last = result.objective_history[-1]
    for name in ("span", "cued", "gap", "reorder"):
        assert 0.0 <= last[f"heldout_{name}_accuracy"] <= 1.0 and last[f"heldout_{name}_tokens"] > 0
    assert json.loads((tmp_path / LOG_NAME).read_text())["objective_eval"] == result.objective_history


def test_objective_mix_parsing():
    assert parse_objective_mix("span=0.7, copy=0.3") == {"span": 0.7, "copy": 0.3}
    for bad, message in (("span", "NAME=WEIGHT"), ("mask=1", "NAME=WEIGHT"), ("span=x", "not a number"),
                         ("span=-1", ">= 0"), ("span=0", "positive weight")):
        with pytest.raises(ValueError, match=message):
            parse_objective_mix(bad)


def test_recipe_rejects_bad_settings():
    with pytest.raises(ValueError, match="curriculum_growth"):
        recipe(curriculum_growth="cubic")
    with pytest.raises(ValueError, match="curriculum_hold"):
        recipe(curriculum_hold=0.8, curriculum_end=0.5)
    with pytest.raises(ValueError, match="curriculum_end"):
        recipe().check_steps(1)


@pytest.mark.slow
def test_killed_and_resumed_pretraining_matches_an_uninterrupted_run(documents, tmp_path, monkeypatch, one_thread):
    reference = pretrain(documents, recipe(), tmp_path / "full", settings())

    original = SRformerTrainer.training_step
    calls = {"n": 0}

    def dying_step(self, *args, **kwargs):
        calls["n"] += 1
        if calls["n"] == 8:  # after the checkpoint of step 6
            raise SimulatedKill("killed in step 8")
        return original(self, *args, **kwargs)

    monkeypatch.setattr(SRformerTrainer, "training_step", dying_step)
    with pytest.raises(SimulatedKill):
        pretrain(documents, recipe(), tmp_path / "split", settings())
    monkeypatch.setattr(SRformerTrainer, "training_step", original)
    state = json.loads((tmp_path / "split" / "checkpoint" / "trainer_state.json").read_text())
    assert state["global_step"] == 6
    resumed = pretrain(documents, recipe(), tmp_path / "split", settings(), resume=True)

    weights = [load_file(tmp_path / name / "model.safetensors") for name in ("full", "split")]
    assert weights[0].keys() == weights[1].keys()
    assert all(torch.equal(weights[0][key], weights[1][key]) for key in weights[0])
    assert resumed.steps == reference.steps == 12
    assert resumed.loss_history == reference.loss_history
    assert resumed.copy_history == reference.copy_history
    assert [entry["step"] for entry in reference.copy_history] == [4, 8, 12]
    assert reference.copy_history[-1]["source_length"] == 32

    log = json.loads((tmp_path / "split" / LOG_NAME).read_text())
    assert log["steps"] == 12 and log["copy_eval"] == reference.copy_history and log["steps_per_second"] > 0
    assert (tmp_path / "split" / PLOT_NAME).stat().st_size > 0
    assert json.loads((tmp_path / "split" / RECIPE_NAME).read_text()) == recipe().to_dict()
    # a normal checkpoint with its tokenizer (the sentinels included)
    tokenizer = AutoTokenizer.from_pretrained(tmp_path / "split")
    model = AutoModelForSeq2SeqLM.from_pretrained(tmp_path / "split")
    assert model.config.vocab_size == len(tokenizer) == 300 + 100
    assert tokenizer.convert_tokens_to_ids("<extra_id_99>") == 399


def test_resume_with_other_settings_or_a_replaced_tokenizer_is_refused(documents, tmp_path, one_thread):
    first = pretrain(documents, recipe(), tmp_path, settings(time_budget_seconds=1e-9))  # one step, a checkpoint
    assert first.steps == 1 and first.stopped_by == "time_budget"
    with pytest.raises(ValueError, match="--vocab-size: saved 300, requested 320"):
        pretrain(documents, recipe(vocab_size=320), tmp_path, settings(), resume=True)
    with pytest.raises(ValueError, match="--model: saved 'bart-tiny', requested 't5-tiny'"):
        pretrain(documents, recipe(model="t5-tiny"), tmp_path, settings(), resume=True)
    with pytest.raises(ValueError, match="already holds a training checkpoint"):
        pretrain(documents, recipe(), tmp_path, settings())
    tokenizer = AutoTokenizer.from_pretrained(tmp_path)
    tokenizer.add_special_tokens({"additional_special_tokens": ["<extra>"]})
    tokenizer.save_pretrained(tmp_path)
    with pytest.raises(ValueError, match="token embeddings but the tokenizer"):
        pretrain(documents, recipe(), tmp_path, settings(), resume=True)


def test_bad_model_and_too_few_documents(documents, tmp_path):
    with pytest.raises(ValueError, match="named config"):
        pretrain(documents, recipe(model="t5-large"), tmp_path, settings())
    with pytest.raises(ValueError, match="--eval-documents 2"):
        pretrain(documents[:2], recipe(), tmp_path, settings())
    assert not any(tmp_path.iterdir())  # nothing written before the checks


@pytest.mark.slow
def test_a_second_stage_continues_the_first_base_with_other_objectives(documents, tmp_path, one_thread):
    pretrain(documents, recipe(curriculum_hold=0.25), tmp_path / "stage1", settings(max_steps=8, save_every=4))
    stage2 = recipe(init_from=str(tmp_path / "stage1"), model="not-a-named-config", curriculum_start=32,
                    objective_mix={"cued": 1.0, "gap": 1.0, "reorder": 1.0})
    first = pretrain(documents, stage2, tmp_path / "stage2", settings(time_budget_seconds=1e-9, warmup_steps=0))
    assert first.steps == 1
    # the stage-1 tokenizer is kept, and the model started from the stage-1 weights: one small step away from them
    assert (tmp_path / "stage1" / "tokenizer.json").read_text() == (tmp_path / "stage2" / "tokenizer.json").read_text()
    before = load_file(tmp_path / "stage1" / "model.safetensors")
    after = load_file(tmp_path / "stage2" / "checkpoint" / "model.safetensors")
    distance = max(float((before[key] - after[key]).abs().max()) for key in before if key in after)
    assert 0 < distance < 0.01  # one AdamW step at a learning rate of 1e-3 moves each weight by about 1e-3
    with pytest.raises(ValueError, match="--init-from: saved"):
        pretrain(documents, recipe(), tmp_path / "stage2", settings(), resume=True)
    with pytest.raises(ValueError, match="no model there"):
        pretrain(documents, recipe(init_from=str(tmp_path / "nothing")), tmp_path / "other", settings())
