"""srformer.evaluation.corpus in one process: the same summaries as generate_summaries, a resume that decodes only
what is missing (also after a line cut by a kill), and refusals that name what changed. The runs across processes
are in tests/cli/test_cli_distributed_generation.py."""

from __future__ import annotations

import json

import pytest
import torch
import transformers
from tokenizers import Tokenizer
from tokenizers.models import WordLevel
from tokenizers.pre_tokenizers import Whitespace

from srformer.evaluation import generation
from srformer.evaluation.corpus import PARTIAL_FORMAT, discard_partial, generate_corpus
from srformer.evaluation.generation import generate_summaries, plan_batches

WORDS = ["the", "a", "cat", "dog", "fox", "bird", "sat", "ran", "on", "over", "mat", "log", "tree", "big", "red", "."]
DOCUMENTS = [
    " ".join(WORDS[(3 * i + j) % len(WORDS)] for j in range(2 + (5 * i) % 11)) for i in range(11)
]
SETTINGS = {"max_new_tokens": 5, "batch_size": 3, "max_source_length": 12, "progress": False}


@pytest.fixture(scope="module")
def tokenizer():
    vocab = {token: i for i, token in enumerate(["<pad>", "</s>", "<unk>", *WORDS])}
    backend = Tokenizer(WordLevel(vocab, unk_token="<unk>"))
    backend.pre_tokenizer = Whitespace()
    return transformers.PreTrainedTokenizerFast(tokenizer_object=backend, pad_token="<pad>", eos_token="</s>",
                                                unk_token="<unk>")


def _model(tokenizer, seed: int = 3):
    torch.manual_seed(seed)
    config = transformers.T5Config(
        vocab_size=len(tokenizer), d_model=32, d_ff=64, num_layers=2, num_decoder_layers=2, num_heads=2, d_kv=16,
        decoder_start_token_id=0, pad_token_id=0, eos_token_id=1, initializer_factor=5.0,
    )
    return transformers.T5ForConditionalGeneration(config).eval()


@pytest.fixture(scope="module")
def model(tokenizer):
    return _model(tokenizer)


class CountingDecoder(generation.BatchDecoder):
    """BatchDecoder that counts its batches and fails at batch number ``fail_at`` (a stand-in for a kill)."""

    calls: list[list[str]] = []
    fail_at: int | None = None

    def __call__(self, sources):
        if CountingDecoder.fail_at is not None and len(CountingDecoder.calls) == CountingDecoder.fail_at:
            raise KeyboardInterrupt("stopped")
        CountingDecoder.calls.append(list(sources))
        return super().__call__(sources)


@pytest.fixture
def counting(monkeypatch):
    monkeypatch.setattr("srformer.evaluation.corpus.BatchDecoder", CountingDecoder)
    CountingDecoder.calls, CountingDecoder.fail_at = [], None
    return CountingDecoder


def stop_after(counting, batches: int, model, tokenizer, partial, **settings) -> list[list[str]]:
    """Run ``generate_corpus`` on DOCUMENTS into ``partial`` until it is stopped before its batch number ``batches``
    (a stand-in for a kill); returns the sources of the batches it decoded, with the counter reset."""
    counting.calls, counting.fail_at = [], batches
    with pytest.raises(KeyboardInterrupt):
        generate_corpus(model, tokenizer, DOCUMENTS, partial_file=partial, **settings)
    decoded = list(counting.calls)
    counting.calls, counting.fail_at = [], None
    return decoded


def test_one_process_gives_the_summaries_of_generate_summaries(model, tokenizer, tmp_path):
    expected = generate_summaries(model, tokenizer, DOCUMENTS, **SETTINGS)
    got = generate_corpus(model, tokenizer, DOCUMENTS, partial_file=tmp_path / "out.partial", **SETTINGS)
    assert got.summaries == expected.summaries
    assert len(set(got.summaries)) > 3  # the random model's outputs differ, so the order check means something
    assert got.num_new_tokens == expected.num_new_tokens and got.seconds > 0
    lines = (tmp_path / "out.partial").read_text().splitlines()
    assert json.loads(lines[0])["format"] == PARTIAL_FORMAT
    assert len(lines) == 1 + 4  # the header, then one line per batch of 3 (11 documents)
    discard_partial(tmp_path / "out.partial")
    assert not (tmp_path / "out.partial").exists()


def test_a_resumed_run_decodes_only_the_missing_batches(model, tokenizer, tmp_path, counting):
    partial = tmp_path / "out.partial"
    expected = generate_summaries(model, tokenizer, DOCUMENTS, **SETTINGS).summaries
    first = stop_after(counting, 2, model, tokenizer, partial, **SETTINGS)
    assert len(partial.read_text().splitlines()) == 1 + 2
    got = generate_corpus(model, tokenizer, DOCUMENTS, partial_file=partial, **SETTINGS)
    assert got.summaries == expected
    assert len(counting.calls) == 2 and not set(map(tuple, first)) & set(map(tuple, counting.calls))
    counting.calls = []
    again = generate_corpus(model, tokenizer, DOCUMENTS, partial_file=partial, **SETTINGS)  # all done: nothing runs
    assert again.summaries == expected and counting.calls == []
    assert again.num_new_tokens == got.num_new_tokens and again.seconds == pytest.approx(got.seconds)


def test_a_line_cut_by_a_kill_is_decoded_again_and_the_file_stays_readable(model, tokenizer, tmp_path, counting):
    partial = tmp_path / "out.partial"
    expected = generate_summaries(model, tokenizer, DOCUMENTS, **SETTINGS).summaries
    stop_after(counting, 3, model, tokenizer, partial, **SETTINGS)
    lines = partial.read_bytes().splitlines(keepends=True)
    partial.write_bytes(b"".join(lines[:-1]) + lines[-1][: len(lines[-1]) // 2])  # the last batch half written
    assert generate_corpus(model, tokenizer, DOCUMENTS, partial_file=partial, **SETTINGS).summaries == expected
    assert len(counting.calls) == 2  # the cut batch and the one never started
    records = [json.loads(line) for line in partial.read_text().splitlines()[1:]]
    assert sorted(record["batch"] for record in records) == [0, 1, 2, 3]


@pytest.mark.parametrize(
    ("change", "named"),
    [
        ({"num_beams": 2}, "decoding setting num_beams (1 then, 2 now)"),
        ({"max_new_tokens": 4}, "decoding setting max_new_tokens (5 then, 4 now)"),
        ({"batch_size": 2}, "decoding setting batch_size (3 then, 2 now)"),
        ({"source_prefix": "summarize: "}, "decoding setting source_prefix"),
        ({"documents": DOCUMENTS[:-1]}, "documents (11 then, 10 now"),
        ({"documents": [*DOCUMENTS[:-1], "the cat"]}, "documents (11 then, 11 now"),
        ({"model_seed": 4}, "model weights"),
    ],
)
def test_a_partial_file_of_other_inputs_is_refused_naming_the_change(model, tokenizer, tmp_path, counting, change,
                                                                    named):
    partial = tmp_path / "out.partial"
    stop_after(counting, 1, model, tokenizer, partial, **SETTINGS)
    before = partial.read_bytes()
    settings = {**SETTINGS, **change}
    documents = settings.pop("documents", DOCUMENTS)
    other = _model(tokenizer, settings.pop("model_seed")) if "model_seed" in settings else model
    with pytest.raises(ValueError, match="holds an interrupted run with other inputs") as error:
        generate_corpus(other, tokenizer, documents, partial_file=partial, **settings)
    assert named in str(error.value) and str(partial) in str(error.value)
    assert partial.read_bytes() == before  # nothing lost


def test_a_file_that_is_not_a_partial_file_is_refused(model, tokenizer, tmp_path):
    partial = tmp_path / "out.partial"
    partial.write_text('{"id": 1, "summary": "x"}\n')
    with pytest.raises(ValueError, match="is not a partial file"):
        generate_corpus(model, tokenizer, DOCUMENTS, partial_file=partial, **SETTINGS)


def test_sampled_batches_do_not_depend_on_what_ran_before(model, tokenizer, tmp_path, counting):
    """Batch b is sampled after seeding with seed + b: a resumed run samples the batches it decodes as an
    uninterrupted run does."""
    sampled = {**SETTINGS, "do_sample": True, "seed": 11, "temperature": 20.0}  # flat enough to differ by seed
    expected = generate_corpus(model, tokenizer, DOCUMENTS, **sampled).summaries
    assert expected != generate_corpus(model, tokenizer, DOCUMENTS, **{**sampled, "seed": 12}).summaries
    partial = tmp_path / "out.partial"
    stop_after(counting, 2, model, tokenizer, partial, **sampled)
    torch.manual_seed(999)  # the global generator's state before the call does not matter
    assert generate_corpus(model, tokenizer, DOCUMENTS, partial_file=partial, **sampled).summaries == expected


def test_the_plan_is_length_sorted_batches_of_batch_size(tokenizer):
    batches = plan_batches(tokenizer, DOCUMENTS, max_source_length=12, batch_size=3)
    assert sorted(i for batch in batches for i in batch) == list(range(len(DOCUMENTS)))
    assert [len(batch) for batch in batches] == [3, 3, 3, 2]
    lengths = [min(len(d.split()) + 1, 12) for d in DOCUMENTS]  # words and the end-of-sequence token
    flat = [lengths[i] for batch in batches for i in batch]
    assert flat == sorted(flat, reverse=True)
