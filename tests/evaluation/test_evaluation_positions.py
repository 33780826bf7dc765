"""srformer.evaluation.positions: which source sentence each output sentence was copied from, and where it sits in
the model's input."""

from __future__ import annotations

import pytest
import transformers
from tokenizers import Tokenizer
from tokenizers.models import WordLevel
from tokenizers.pre_tokenizers import Whitespace

from srformer.evaluation.positions import copied_sentence_offsets, pool_source_positions, source_position_summary

SOURCE = ("Cats sleep most of the day. Dogs bark at the mailman every morning. Owls hunt mice at night. "
          "Birds sing before the sun rises.")


@pytest.fixture(scope="module")
def tokenizer():
    words = sorted(set(SOURCE.replace(".", " .").split()))
    backend = Tokenizer(WordLevel({t: i for i, t in enumerate(["<pad>", "</s>", "<unk>", *words])}, unk_token="<unk>"))
    backend.pre_tokenizer = Whitespace()
    return transformers.PreTrainedTokenizerFast(tokenizer_object=backend, pad_token="<pad>", eos_token="</s>",
                                                unk_token="<unk>")


def test_each_output_sentence_is_traced_to_the_sentence_it_copies():
    output = "Owls hunt mice at night. Something never written in the source. Cats sleep most of the day."
    offsets = copied_sentence_offsets(output, SOURCE)
    assert offsets == [SOURCE.index("Owls"), None, 0]
    # a sentence with half of its 3-grams from one source sentence still counts; fewer does not
    assert copied_sentence_offsets("Dogs bark at the zebra.", SOURCE) == [SOURCE.index("Dogs")]
    assert copied_sentence_offsets("Dogs bark loudly at zebras.", SOURCE) == [None]
    with pytest.raises(ValueError, match="min_share"):
        copied_sentence_offsets("x", SOURCE, min_share=0)


def test_positions_are_counted_per_window_of_tokens(tokenizer):
    # tokens: "Cats sleep most of the day ." 0-6, "Dogs ... morning ." 7-14, "Owls hunt mice at night ." 15-20,
    # "Birds ..." 21-
    outputs = ["Owls hunt mice at night. Cats sleep most of the day.", "Birds sing before the sun rises. Nothing."]
    summary = source_position_summary(outputs, [SOURCE, SOURCE], tokenizer, window=8)
    assert summary == {"output_sentences": 4, "copied": 3, "beyond_first_window": pytest.approx(2 / 3),
                       "histogram": [1, 1, 1], "window": 8}
    with pytest.raises(ValueError, match="align"):
        source_position_summary(outputs, [SOURCE], tokenizer)


def test_summaries_of_several_seeds_pool_their_counts():
    first = {"output_sentences": 4, "copied": 3, "beyond_first_window": 2 / 3, "histogram": [1, 1, 1], "window": 8}
    second = {"output_sentences": 2, "copied": 1, "beyond_first_window": 0.0, "histogram": [1], "window": 8}
    assert pool_source_positions([first, second]) == {
        "output_sentences": 6, "copied": 4, "beyond_first_window": 0.5, "histogram": [2, 1, 1], "window": 8}
    with pytest.raises(ValueError, match="different windows"):
        pool_source_positions([first, {**second, "window": 4}])
