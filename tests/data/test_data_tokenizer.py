"""Tests for srformer.data.train_unigram_tokenizer."""

from __future__ import annotations

import pytest
import transformers

from srformer.data import load_aclsum, train_unigram_tokenizer


@pytest.fixture(scope="module")
def corpus() -> list[str]:
    pairs = load_aclsum("val")
    return [p.document for p in pairs] + [p.summary for p in pairs]


@pytest.fixture(scope="module")
def tokenizer(corpus):
    return train_unigram_tokenizer(corpus, vocab_size=1000)


def test_special_token_ids(tokenizer):
    assert tokenizer.pad_token_id == 0
    assert tokenizer.eos_token_id == 1
    assert tokenizer.unk_token_id == 2
    assert tokenizer.convert_ids_to_tokens([0, 1, 2]) == ["<pad>", "</s>", "<unk>"]
    assert 900 <= len(tokenizer) <= 1000


def test_eos_appended_and_readable_decode(tokenizer):
    text = "We propose a new method for summarization ."
    ids = tokenizer(text)["input_ids"]
    assert ids[-1] == 1 and ids.count(1) == 1
    assert 2 not in ids
    assert tokenizer.decode(ids, skip_special_tokens=True) == text
    batch = tokenizer(["a b", "longer text here"], text_target=["x", "y z"])
    assert all(seq[-1] == 1 for seq in batch["input_ids"] + batch["labels"])


def test_newlines_kept_and_spaces_collapsed(tokenizer):
    decoded = tokenizer.decode(
        tokenizer("First line .\nSecond  line .")["input_ids"], skip_special_tokens=True
    )
    assert [line.strip() for line in decoded.split("\n")] == ["First line .", "Second line ."]


def test_save_and_autotokenizer_round_trip(tokenizer, corpus, tmp_path):
    tokenizer.save_pretrained(tmp_path)
    loaded = transformers.AutoTokenizer.from_pretrained(tmp_path)
    texts = corpus[:5] + ["Unseen wörds ∑ and\nnewlines ."]
    assert loaded(texts)["input_ids"] == tokenizer(texts)["input_ids"]
    assert (loaded.pad_token_id, loaded.eos_token_id, loaded.unk_token_id) == (0, 1, 2)
    ids = loaded(corpus[0])["input_ids"]
    assert loaded.decode(ids, skip_special_tokens=True) == tokenizer.decode(
        ids, skip_special_tokens=True
    )


def test_generator_input():
    texts = (f"sentence number {i} about topic {i % 7} ." for i in range(200))
    tok = train_unigram_tokenizer(texts, vocab_size=100)
    assert tok("sentence number 3")["input_ids"][-1] == 1


@pytest.mark.parametrize("texts", [[], ["", "  \n"], iter([])])
def test_empty_texts(texts):
    with pytest.raises(ValueError, match="texts is empty"):
        train_unigram_tokenizer(texts)


def test_small_vocab():
    with pytest.raises(
        ValueError, match=r"vocab_size must be at least 100, got 50.*special tokens"
    ):
        train_unigram_tokenizer(["some text"], vocab_size=50)


def test_non_string_text():
    with pytest.raises(TypeError, match=r"texts\[1\] is int"):
        train_unigram_tokenizer(["ok", 3])
