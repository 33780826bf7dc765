"""Tests for srformer.evaluation.generation, with a tiny random T5 and a word-level tokenizer."""

import pytest
import torch
import transformers
from tokenizers import Tokenizer
from tokenizers.models import WordLevel
from tokenizers.pre_tokenizers import Whitespace

from srformer.evaluation import GenerationResult, generate_summaries

WORDS = [
    "the", "a", "cat", "dog", "fox", "bird", "sat", "ran", "jumped", "flew", "on", "over", "under", "mat", "log",
    "fence", "tree", "quick", "brown", "lazy", "small", "big", "red", "today", "yesterday", "and", "then", "it",
    "was", "very", "happy", "sad", "summarize", ":", ".",
]

DOCUMENTS = [
    "the cat sat on the mat .",
    "a quick brown fox jumped over the lazy dog and then it ran under the big red tree today .",
    "dog",
    "the small bird flew over the fence and it was very happy .",
    "yesterday the big dog sat on a log and then it was sad .",
]


@pytest.fixture(scope="module")
def tokenizer():
    vocab = {token: i for i, token in enumerate(["<pad>", "</s>", "<unk>", *WORDS])}
    backend = Tokenizer(WordLevel(vocab, unk_token="<unk>"))
    backend.pre_tokenizer = Whitespace()
    return transformers.PreTrainedTokenizerFast(
        tokenizer_object=backend, pad_token="<pad>", eos_token="</s>", unk_token="<unk>"
    )


@pytest.fixture(scope="module")
def model(tokenizer):
    # A larger initializer_factor than T5's default 1.0 makes the random model's greedy outputs
    # differ between documents (and end early with EOS for some), so order checks mean something.
    torch.manual_seed(3)
    config = transformers.T5Config(
        vocab_size=len(tokenizer),
        d_model=32,
        d_ff=64,
        num_layers=2,
        num_decoder_layers=2,
        num_heads=2,
        d_kv=16,
        decoder_start_token_id=0,
        pad_token_id=0,
        eos_token_id=1,
        initializer_factor=5.0,
    )
    return transformers.T5ForConditionalGeneration(config)


def _generate(model, tokenizer, documents, **kwargs):
    kwargs.setdefault("max_new_tokens", 6)
    kwargs.setdefault("progress", False)
    return generate_summaries(model, tokenizer, documents, **kwargs)


def test_batched_output_matches_one_by_one(model, tokenizer):
    singles = [_generate(model, tokenizer, [document]) for document in DOCUMENTS]
    batched = _generate(model, tokenizer, DOCUMENTS, batch_size=3)
    assert isinstance(batched, GenerationResult)
    assert batched.summaries == [single.summaries[0] for single in singles]
    # Padding added in a batch is not counted, so the totals agree.
    assert batched.num_new_tokens == sum(single.num_new_tokens for single in singles)
    assert len(set(batched.summaries)) >= 4  # the order check would be vacuous otherwise
    assert batched.seconds > 0
    assert 0 < batched.num_new_tokens <= 6 * len(DOCUMENTS)
    assert batched.tokens_per_second > 0
    for summary in batched.summaries:
        assert summary == summary.strip()
        assert "<pad>" not in summary and "</s>" not in summary


def test_beam_search(model, tokenizer):
    result = _generate(model, tokenizer, DOCUMENTS, batch_size=2, num_beams=2)
    assert len(result.summaries) == len(DOCUMENTS)
    assert result.seconds > 0
    single = _generate(model, tokenizer, [DOCUMENTS[1]], num_beams=2)
    assert single.summaries[0] == result.summaries[1]


def test_sampling_is_reproducible_with_seed(model, tokenizer):
    torch.manual_seed(1)
    first = _generate(model, tokenizer, DOCUMENTS, do_sample=True, top_k=0)
    torch.manual_seed(1)
    second = _generate(model, tokenizer, DOCUMENTS, do_sample=True, top_k=0)
    assert first.summaries == second.summaries


def test_restores_training_mode(model, tokenizer):
    model.train()
    _generate(model, tokenizer, DOCUMENTS[:1])
    assert model.training
    model.eval()
    _generate(model, tokenizer, DOCUMENTS[:1])
    assert not model.training


def test_progress_bar(model, tokenizer, capsys):
    _generate(model, tokenizer, DOCUMENTS[:2], progress=True)
    assert "Generating" in capsys.readouterr().err
    _generate(model, tokenizer, DOCUMENTS[:2], progress=False)
    assert capsys.readouterr().err == ""


def test_errors(model, tokenizer):
    with pytest.raises(ValueError, match="empty"):
        _generate(model, tokenizer, [])
    with pytest.raises(ValueError, match="document 1"):
        _generate(model, tokenizer, ["the cat", "   "])
    with pytest.raises(ValueError, match="document 0"):
        _generate(model, tokenizer, [""])
    with pytest.raises(ValueError, match="batch_size"):
        _generate(model, tokenizer, DOCUMENTS, batch_size=0)
    with pytest.raises(ValueError, match="num_return_sequences"):
        _generate(model, tokenizer, DOCUMENTS, num_beams=2, num_return_sequences=2)


class _EchoModel(torch.nn.Module):
    """Stand-in seq2seq model whose output is known: start token, first input token, EOS, pad.

    The first row of each batch also gets one extra generated token so rows differ in length.
    """

    def __init__(self):
        super().__init__()
        self.weight = torch.nn.Parameter(torch.zeros(1))
        self.config = transformers.PretrainedConfig(is_encoder_decoder=True)
        self.generation_config = transformers.GenerationConfig(eos_token_id=1, pad_token_id=0)
        self.calls = []

    def generate(self, input_ids, attention_mask, **kwargs):
        assert not self.training
        assert torch.is_inference_mode_enabled()
        self.calls.append((input_ids.shape, attention_mask.sum(dim=1).tolist(), kwargs))
        rows = []
        for i, ids in enumerate(input_ids.tolist()):
            if i == 0:
                rows.append([0, ids[0], ids[0], 1])
            else:
                rows.append([0, ids[0], 1, 0])
        return torch.tensor(rows)


def test_order_prefix_kwargs_and_token_count(tokenizer):
    model = _EchoModel()
    documents = ["cat", "dog fox bird", "fox bird", "tree"]
    result = generate_summaries(
        model,
        tokenizer,
        documents,
        batch_size=2,
        max_new_tokens=7,
        source_prefix="summarize : ",
        progress=False,
        length_penalty=0.5,
    )
    # Every echoed first token is the prefix's first word.
    first_rows = "summarize summarize"
    assert result.summaries == [first_rows, first_rows, "summarize", "summarize"]
    # Longest first: batch 1 holds documents 1 and 2, batch 2 documents 0 and 3.
    assert [lengths for _, lengths, _ in model.calls] == [[5, 4], [3, 3]]
    # Per batch: first row 3 tokens (x, x, EOS), second row 2 tokens (x, EOS); padding excluded.
    assert result.num_new_tokens == 2 * (3 + 2)
    for _, _, kwargs in model.calls:
        assert kwargs == {
            "max_new_tokens": 7,
            "num_beams": 1,
            "do_sample": False,
            "length_penalty": 0.5,
        }


def test_truncation(tokenizer):
    model = _EchoModel()
    generate_summaries(model, tokenizer, DOCUMENTS, max_source_length=4, progress=False)
    (shape, lengths, _), = model.calls
    assert shape == (len(DOCUMENTS), 4)
    assert max(lengths) == 4
