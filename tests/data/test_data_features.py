"""Tests for srformer.data.encode_pairs and TruncationReport."""

from __future__ import annotations

import warnings

import pytest
import transformers

from srformer.data import SummaryPair, TruncationReport, encode_pairs, train_unigram_tokenizer

SENTENCE = "the cat sat on a mat while dogs ran in parks and birds sang songs over green hills"
WORDS = SENTENCE.split(" ")


@pytest.fixture(scope="module")
def tokenizer():
    texts = [" ".join(WORDS[i:] + WORDS[:i]) for i in range(len(WORDS))] * 10
    return train_unigram_tokenizer(texts + ["summarize: " + t for t in texts], vocab_size=120)


def make_pairs(doc_words: list[int], sum_words: list[int]) -> list[SummaryPair]:
    return [
        SummaryPair(" ".join(WORDS[:d]), " ".join(WORDS[:s]), str(i))
        for i, (d, s) in enumerate(zip(doc_words, sum_words, strict=True))
    ]


def test_features_without_truncation(tokenizer):
    pairs = make_pairs([3, 5], [2, 1])
    with warnings.catch_warnings():
        warnings.simplefilter("error")
        features, report = encode_pairs(
            tokenizer, pairs, max_source_length=512, max_target_length=64
        )
    assert report == TruncationReport(2, 0, 0, 512, 64)
    for feature, pair in zip(features, pairs, strict=True):
        assert set(feature) == {"input_ids", "attention_mask", "labels"}
        assert feature["input_ids"] == tokenizer(pair.document)["input_ids"]
        assert feature["labels"] == tokenizer(text_target=pair.summary)["input_ids"]
        assert feature["attention_mask"] == [1] * len(feature["input_ids"])
        assert feature["input_ids"][-1] == feature["labels"][-1] == tokenizer.eos_token_id


def test_source_prefix(tokenizer):
    pairs = make_pairs([4], [2])
    features, _ = encode_pairs(
        tokenizer, pairs, max_source_length=512, max_target_length=64, source_prefix="summarize: "
    )
    assert features[0]["input_ids"] == tokenizer("summarize: " + pairs[0].document)["input_ids"]


def test_truncation_counts_and_warning(tokenizer):
    pairs = make_pairs([2, 18, 18, 1], [1, 1, 18, 12])
    src_lengths = [len(tokenizer(p.document)["input_ids"]) for p in pairs]
    tgt_lengths = [len(tokenizer(text_target=p.summary)["input_ids"]) for p in pairs]
    # limits chosen so that exactly pairs 1, 2 (sources) and 2, 3 (targets) are too long
    max_src = min(src_lengths[1], src_lengths[2]) - 1
    max_tgt = min(tgt_lengths[2], tgt_lengths[3]) - 1
    assert max(src_lengths[0], src_lengths[3]) <= max_src
    assert max(tgt_lengths[0], tgt_lengths[1]) <= max_tgt
    with pytest.warns(
        UserWarning,
        match=rf"4 examples: 2 sources \(50\.0%\) longer than {max_src} tokens truncated, "
        rf"2 targets \(50\.0%\) longer than {max_tgt} tokens truncated; raise max_source_length",
    ):
        features, report = encode_pairs(
            tokenizer, pairs, max_source_length=max_src, max_target_length=max_tgt
        )
    assert report == TruncationReport(4, 2, 2, max_src, max_tgt)
    for index, feature in enumerate(features):
        assert len(feature["input_ids"]) <= max_src and len(feature["labels"]) <= max_tgt
        assert feature["input_ids"][-1] == tokenizer.eos_token_id
        # a target cut at the limit does not end: no </s> to learn to stop there
        assert (feature["labels"][-1] == tokenizer.eos_token_id) == (index in (0, 1))
        assert len(feature["attention_mask"]) == len(feature["input_ids"])
    assert len(features[1]["input_ids"]) == max_src
    assert (
        features[1]["input_ids"]
        == tokenizer(pairs[1].document, truncation=True, max_length=max_src)["input_ids"]
    )
    assert features[0]["input_ids"] == tokenizer(pairs[0].document)["input_ids"]
    assert features[3]["labels"] == tokenizer(text_target=pairs[3].summary)["input_ids"][:max_tgt]


def test_warn_false_is_silent(tokenizer):
    with warnings.catch_warnings():
        warnings.simplefilter("error")
        _, report = encode_pairs(
            tokenizer, make_pairs([18], [18]), max_source_length=3, max_target_length=3, warn=False
        )
    assert (report.truncated_sources, report.truncated_targets) == (1, 1)


def test_collator_pads_features(tokenizer):
    features, _ = encode_pairs(
        tokenizer, make_pairs([2, 9], [1, 6]), max_source_length=256, max_target_length=256
    )
    batch = transformers.DataCollatorForSeq2Seq(tokenizer, padding=True)(features)
    assert batch["input_ids"].shape[0] == 2
    assert batch["input_ids"][0, -1].item() == tokenizer.pad_token_id
    assert batch["labels"][0, -1].item() == -100


@pytest.mark.parametrize(
    ("src", "tgt", "name"),
    [(0, 8, "max_source_length"), (8, 0, "max_target_length"), (-3, 8, "max_source_length")],
)
def test_bad_lengths(tokenizer, src, tgt, name):
    with pytest.raises(ValueError, match=rf"{name} must be a positive number of tokens"):
        encode_pairs(tokenizer, make_pairs([2], [1]), max_source_length=src, max_target_length=tgt)


def test_empty_pairs(tokenizer):
    with pytest.raises(ValueError, match="pairs is empty"):
        encode_pairs(tokenizer, [], max_source_length=8, max_target_length=8)


def test_report_summary_format():
    report = TruncationReport(
        num_examples=10,
        truncated_sources=3,
        truncated_targets=0,
        max_source_length=512,
        max_target_length=64,
    )
    assert report.summary() == (
        "10 examples: 3 sources (30.0%) longer than 512 tokens truncated, "
        "0 targets (0.0%) longer than 64 tokens truncated"
    )
