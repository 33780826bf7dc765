"""`srformer split` and the --split-by-id option of train, evaluate and compare."""

from __future__ import annotations

import json

import pytest

from srformer.cli import compare_command
from srformer.cli.data_source import load_data
from srformer.cli.main import build_parser, main
from srformer.data.pairs import load_pairs
from srformer.data.split import parse_split_spec, split_by_id

SPEC = "train=0.6,validation=0.2,test=0.2"


@pytest.fixture
def data_file(tmp_path):
    path = tmp_path / "all.jsonl"
    rows = [{"id": f"a-{i}", "text": f"document {i}", "abstract": f"summary {i}", "category": "x"} for i in range(60)]
    path.write_text("".join(json.dumps(r) + "\n" for r in rows))
    return path


def _expected(path, part):
    pairs = load_pairs(path, document_field="text", summary_field="abstract")
    return split_by_id(pairs, parse_split_spec(SPEC))[part]


def test_split_command_writes_the_parts(data_file, tmp_path, capsys):
    out = tmp_path / "parts"
    args = ["split", "--data", str(data_file), "--output-dir", str(out), "--fractions", SPEC,
            "--document-field", "text", "--summary-field", "abstract"]
    assert main(args) == 0
    printed = capsys.readouterr().out
    for part in ("train", "validation", "test"):
        written = load_pairs(out / f"{part}.jsonl")
        assert written == _expected(data_file, part)
        assert f"{part}: {len(written)} examples" in printed
    assert main(args) == 2  # never overwrites
    assert "exist already" in capsys.readouterr().err


@pytest.mark.parametrize(
    "rows,fractions,message",
    [
        ([{"id": "a", "document": "d", "summary": "s"}], "train=0.9,test=0.2", "sum to 1.1"),
        ([{"id": "a", "document": "d", "summary": "s"}, {"document": "d", "summary": "s"}], SPEC,
         "example 2 has no id"),
        ([{"id": "a", "document": "d", "summary": "s"}, {"id": "a", "document": "e", "summary": "t"}], SPEC,
         "'a' appears twice"),
    ],
)
def test_split_command_reports_bad_input(tmp_path, capsys, rows, fractions, message):
    path = tmp_path / "bad.jsonl"
    path.write_text("".join(json.dumps(r) + "\n" for r in rows))
    assert main(["split", "--data", str(path), "--output-dir", str(tmp_path / "o"), "--fractions", fractions]) == 2
    assert message in capsys.readouterr().err


@pytest.mark.parametrize("command,default_part", [("train", "train"), ("evaluate", "test")])
def test_train_and_evaluate_read_one_part(data_file, command, default_part):
    base = [command, "--data", str(data_file), "--split-by-id", SPEC, "--document-field", "text",
            "--summary-field", "abstract", "--output", "x"]
    base += ["--model", "t5-tiny", "--variant", "full"] if command == "train" else ["--checkpoint", "x"]
    args = build_parser().parse_args(base)
    assert load_data(args, default_split=default_part) == _expected(data_file, default_part)
    args = build_parser().parse_args([*base, "--split", "validation"])
    assert load_data(args, default_split=default_part) == _expected(data_file, "validation")
    args = build_parser().parse_args([*base, "--split", "val"])
    with pytest.raises(ValueError, match="choose one of train, validation, test"):
        load_data(args, default_split=default_part)


def test_compare_reads_its_train_and_test_parts(data_file):
    args = build_parser().parse_args([
        "compare", "--train-data", str(data_file), "--test-data", str(data_file), "--split-by-id", SPEC,
        "--test-split", "validation", "--document-field", "text", "--summary-field", "abstract",
        "--max-test-examples", "3", "--output", "x",
    ])
    assert compare_command._load(args.train_data, args.train_split, args, None) == _expected(data_file, "train")
    assert compare_command._load(args.test_data, args.test_split, args, 3) == _expected(data_file, "validation")[:3]
    with pytest.raises(ValueError, match="'aclsum' has its own splits"):
        compare_command._load("aclsum", "train", args, None)
