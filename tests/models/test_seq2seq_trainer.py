"""A converted model used unchanged with transformers.Seq2SeqTrainer: training steps, then
predict(predict_with_generate=True), whose ids must equal model.generate with the same settings."""

from __future__ import annotations

import random

import pytest
import torch
from tokenizers import Tokenizer
from tokenizers.models import WordLevel
from transformers import DataCollatorForSeq2Seq, PreTrainedTokenizerFast, Seq2SeqTrainer, Seq2SeqTrainingArguments

from srformer.models import cross_attention_modules
from tests.models.conftest import BUILDERS, VOCAB, converted


def word_tokenizer(model) -> PreTrainedTokenizerFast:
    """A word-level tokenizer over the tiny models' vocabulary (used by the collator for padding)."""
    config = model.config
    specials = {config.pad_token_id: "<pad>", config.eos_token_id: "</s>"}
    vocab = {specials.get(i, f"w{i}"): i for i in range(VOCAB)}
    return PreTrainedTokenizerFast(tokenizer_object=Tokenizer(WordLevel(vocab=vocab, unk_token="w3")),
                                   pad_token="<pad>", eos_token="</s>", unk_token="w3")


def features(model, count: int, seed: int, source_lengths: tuple[int, int] = (10, 30)) -> list[dict[str, list[int]]]:
    """``count`` random examples, sources of ``source_lengths`` tokens (lowest, highest) before the eos."""
    rng = random.Random(seed)
    eos = model.config.eos_token_id
    rows = []
    for _ in range(count):
        source = [rng.randrange(3, VOCAB) for _ in range(rng.randint(*source_lengths))] + [eos]
        target = [rng.randrange(3, VOCAB) for _ in range(rng.randint(3, 8))] + [eos]
        rows.append({"input_ids": source, "attention_mask": [1] * len(source), "labels": target})
    return rows


@pytest.mark.parametrize("num_beams", [1, 2])
def test_seq2seq_trainer_trains_and_predicts_like_generate(family, num_beams, tmp_path):
    model = converted(BUILDERS[family](), variant="srformer", segment_size=8, target_length=12)
    check_trainer_trains_and_predicts_like_generate(model, num_beams, tmp_path)


def check_trainer_trains_and_predicts_like_generate(
    model, num_beams: int, tmp_path, source_lengths: tuple[int, int] = (10, 30)
) -> None:
    """Three ``Seq2SeqTrainer`` steps train every RAF parameter of the converted ``model`` (an ``srformer`` model),
    and ``predict(predict_with_generate=True)`` returns the ids ``model.generate`` returns with the same settings;
    sources of ``source_lengths`` tokens (:func:`features`)."""
    before = {name: p.detach().clone() for name, p in model.named_parameters() if ".srformer." in name}
    tokenizer = word_tokenizer(model)
    collator = DataCollatorForSeq2Seq(tokenizer, model=model, label_pad_token_id=-100)
    args = Seq2SeqTrainingArguments(
        output_dir=str(tmp_path), max_steps=3, per_device_train_batch_size=4, per_device_eval_batch_size=5,
        learning_rate=1e-2, predict_with_generate=True, report_to=[], use_cpu=True, save_strategy="no",
        disable_tqdm=True, seed=0,
    )
    trainer = Seq2SeqTrainer(model=model, args=args,
                             train_dataset=features(model, 12, seed=0, source_lengths=source_lengths),
                             data_collator=collator, processing_class=tokenizer)
    result = trainer.train()
    assert result.global_step == 3 and torch.isfinite(torch.tensor(result.training_loss))
    # The RAF parameters of every layer were trained.
    assert all(not torch.equal(p.detach(), before[name]) for name, p in model.named_parameters() if name in before)
    assert len(before) == 3 * len(cross_attention_modules(model))

    # one evaluation batch: the same padding as the collator below
    test = features(model, 5, seed=1, source_lengths=source_lengths)
    settings = dict(max_new_tokens=8, min_new_tokens=8, num_beams=num_beams, do_sample=False)
    prediction = trainer.predict(test, **settings)
    assert prediction.metrics["test_loss"] > 0

    model.eval()
    batch = collator(test)
    with torch.no_grad():
        expected = model.generate(input_ids=batch["input_ids"], attention_mask=batch["attention_mask"], **settings)
    predicted = torch.as_tensor(prediction.predictions)
    predicted = predicted.masked_fill(predicted == -100, model.config.pad_token_id)
    width = max(predicted.shape[1], expected.shape[1])
    pad = model.config.pad_token_id
    assert torch.equal(torch.nn.functional.pad(predicted, (0, width - predicted.shape[1]), value=pad),
                       torch.nn.functional.pad(expected, (0, width - expected.shape[1]), value=pad))
    assert expected.shape[1] == 9  # 8 new tokens after the start token: a real comparison
