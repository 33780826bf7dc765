"""srformer.training.oracle_targets and `srformer oracle-targets`: the greedy oracle of what the encoder reads, as a
data file that resumes after a cut line and is refused when it holds other documents."""

from __future__ import annotations

import json

import pytest
import transformers
from tokenizers import Tokenizer
from tokenizers.models import WordLevel
from tokenizers.pre_tokenizers import Whitespace

from srformer.cli.main import main
from srformer.data.pairs import SummaryPair, load_pairs
from srformer.evaluation.baselines import extractive_oracle
from srformer.training.oracle_targets import oracle_target, readable_prefix, write_oracle_targets

DOCUMENT = ("The weather was mild. Cats sleep most of the day. Dogs bark at the mailman. "
            "Owls hunt mice at night. Cats also purr when they sleep.")
REFERENCE = "Cats sleep and purr. Owls hunt at night."

PAIRS = [
    SummaryPair(document=DOCUMENT, summary=REFERENCE, id="a"),
    SummaryPair(document="Nothing here matches. Not one word.", summary="Zebras gallop.", id="b"),
    SummaryPair(document="Dogs bark. Dogs run fast. Birds sing.", summary="Dogs run.", id="c"),
]


@pytest.fixture(scope="module")
def tokenizer():
    words = sorted({w for pair in PAIRS for w in (pair.document + " " + pair.summary).replace(".", " .").split()})
    backend = Tokenizer(WordLevel({t: i for i, t in enumerate(["<pad>", "</s>", "<unk>", *words])}, unk_token="<unk>"))
    backend.pre_tokenizer = Whitespace()
    return transformers.PreTrainedTokenizerFast(tokenizer_object=backend, pad_token="<pad>", eos_token="</s>",
                                                unk_token="<unk>")


def test_the_target_is_the_greedy_oracle_within_the_reference_words():
    target = oracle_target(DOCUMENT, REFERENCE)
    assert target == extractive_oracle(DOCUMENT, REFERENCE, len(REFERENCE.split()))
    lines = target.splitlines()
    assert lines and all(line in DOCUMENT for line in lines)
    assert "Owls hunt mice at night." in lines and "The weather was mild." not in lines
    assert [DOCUMENT.index(line) for line in lines] == sorted(DOCUMENT.index(line) for line in lines)
    assert sum(len(line.split()) for line in lines) <= len(REFERENCE.split())


def test_the_oracle_only_sees_what_the_encoder_reads(tokenizer):
    # "The weather was mild ." and "Cats sleep most of the day" are 11 tokens: the owls are beyond them
    readable = readable_prefix(DOCUMENT, tokenizer, 11)
    assert readable == "The weather was mild. Cats sleep most of the day"
    assert "Owls" not in oracle_target(readable, REFERENCE)
    assert readable_prefix(DOCUMENT, tokenizer, None) == DOCUMENT
    assert readable_prefix(DOCUMENT, None, 11) == DOCUMENT


def test_the_file_resumes_after_a_cut_line_and_refuses_other_documents(tmp_path):
    output = tmp_path / "oracle.jsonl"
    stats = write_oracle_targets(PAIRS, output, progress=False)
    assert (stats["documents"], stats["written"]) == (3, 2)  # "b" shares no word with its reference
    whole = output.read_bytes()
    records = [json.loads(line) for line in whole.splitlines()]
    assert [r["id"] for r in records] == ["a", "c"]
    assert records[0]["reference"] == REFERENCE and records[0]["document"] == DOCUMENT
    output.write_bytes(whole[: len(whole) - 7])  # the last line cut by a kill
    write_oracle_targets(PAIRS, output, progress=False)
    assert output.read_bytes() == whole
    with pytest.raises(ValueError, match="holds targets of other documents"):
        write_oracle_targets([SummaryPair(DOCUMENT, REFERENCE, "z")], output, progress=False)
    with pytest.raises(ValueError, match="unique id"):
        write_oracle_targets([PAIRS[0], PAIRS[0]], tmp_path / "other.jsonl", progress=False)


def test_the_command_writes_a_file_train_reads(tmp_path, tokenizer, capsys):
    data = tmp_path / "train.jsonl"
    data.write_text("".join(json.dumps({"id": p.id, "document": p.document, "summary": p.summary}) + "\n"
                            for p in PAIRS))
    tokenizer.save_pretrained(tmp_path / "tok")
    output = tmp_path / "out" / "oracle.jsonl"
    assert main(["oracle-targets", "--data", str(data), "--output", str(output), "--tokenizer", str(tmp_path / "tok"),
                 "--max-source-length", "11", "--no-progress"]) == 0
    assert "2 of 3 documents have an oracle target" in capsys.readouterr().out
    pairs = load_pairs(str(output))
    assert [p.id for p in pairs] == ["a", "c"] and "Owls" not in pairs[0].summary
    assert main(["oracle-targets", "--data", str(data), "--output", str(tmp_path / "x.jsonl"),
                 "--max-source-length", "11"]) == 2
    assert "--tokenizer" in capsys.readouterr().err
