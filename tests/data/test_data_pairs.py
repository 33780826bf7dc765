"""Tests for srformer.data.pairs: file loaders, hub fallback and their error messages."""

from __future__ import annotations

import csv
import json
import re
from pathlib import Path

import pytest

from srformer.data import SummaryPair, load_pairs

SHARED_XSUM = Path(__file__).resolve().parents[3] / "shared" / "data" / "xsum_sample"


def write_jsonl(path: Path, records: list[object], blank_lines: bool = False) -> Path:
    lines = [json.dumps(record) for record in records]
    text = ("\n\n" if blank_lines else "\n").join(lines) + "\n"
    path.write_text(text, encoding="utf-8")
    return path


def write_csv(path: Path, header: list[str], rows: list[list[str]]) -> Path:
    with path.open("w", encoding="utf-8", newline="") as handle:
        writer = csv.writer(handle)
        writer.writerow(header)
        writer.writerows(rows)
    return path


# ------------------------------------------------------------------ successful loading


def test_jsonl_default_fields_ids_and_blank_lines(tmp_path):
    path = write_jsonl(
        tmp_path / "d.jsonl",
        [
            {"id": "a", "document": "First doc.", "summary": "One."},
            {"id": 7, "document": "  Second doc.\n", "summary": "Two.", "extra": 1},
            {"document": "Third doc.", "summary": "Three."},
        ],
        blank_lines=True,
    )
    pairs = load_pairs(path)
    assert pairs == [
        SummaryPair("First doc.", "One.", "a"),
        SummaryPair("Second doc.", "Two.", "7"),
        SummaryPair("Third doc.", "Three.", None),
    ]


def test_jsonl_custom_fields_and_max_examples(tmp_path):
    records = [{"text": f"doc {i}", "tldr": f"sum {i}"} for i in range(5)]
    path = write_jsonl(tmp_path / "d.jsonl", records)
    pairs = load_pairs(str(path), document_field="text", summary_field="tldr", max_examples=2)
    assert [p.document for p in pairs] == ["doc 0", "doc 1"]
    assert [p.summary for p in pairs] == ["sum 0", "sum 1"]


def test_json_list_with_custom_fields(tmp_path):
    path = tmp_path / "d.json"
    path.write_text(
        json.dumps(
            [{"article": "A.", "highlights": "a", "id": "x"}, {"article": "B.", "highlights": "b"}]
        ),
        encoding="utf-8",
    )
    pairs = load_pairs(path, document_field="article", summary_field="highlights")
    assert pairs == [SummaryPair("A.", "a", "x"), SummaryPair("B.", "b")]


def test_json_file_holding_json_lines(tmp_path):
    path = write_jsonl(
        tmp_path / "d.json",
        [{"document": "A.", "summary": "a"}, {"document": "B.", "summary": "b"}],
    )
    assert [p.document for p in load_pairs(path)] == ["A.", "B."]


def test_csv_custom_fields_with_quoted_newlines(tmp_path):
    path = write_csv(
        tmp_path / "d.csv",
        ["id", "body", "abstract"],
        [["1", "Line one,\nline two.", "First.\nSecond."], ["2", "Other doc.", "Other."]],
    )
    pairs = load_pairs(path, document_field="body", summary_field="abstract")
    assert pairs == [
        SummaryPair("Line one,\nline two.", "First.\nSecond.", "1"),
        SummaryPair("Other doc.", "Other.", "2"),
    ]


def test_shared_xsum_sample_validation():
    folder = SHARED_XSUM
    if not folder.is_dir():
        pytest.skip(f"shared data folder {folder} is absent")
    pairs = load_pairs(folder / "validation.jsonl")
    assert len(pairs) == 100
    assert all(p.document and p.summary and p.id for p in pairs)
    assert len({p.id for p in pairs}) == 100


# ------------------------------------------------------------------ file errors


def test_missing_file_with_extension(tmp_path):
    missing = tmp_path / "nope.jsonl"
    with pytest.raises(FileNotFoundError, match=r"nope\.jsonl.*does not exist"):
        load_pairs(missing)


def test_missing_relative_file_is_not_a_hub_name():
    with pytest.raises(FileNotFoundError, match="does not exist"):
        load_pairs("data/train.csv")


def test_unsupported_extension(tmp_path):
    path = tmp_path / "d.txt"
    path.write_text("hello\n", encoding="utf-8")
    with pytest.raises(
        ValueError, match=r"d\.txt.*unsupported file extension '\.txt'.*\.jsonl, \.json, \.csv"
    ):
        load_pairs(path)


def test_directory_is_rejected(tmp_path):
    with pytest.raises(ValueError, match="is a directory"):
        load_pairs(tmp_path)


def test_malformed_json_line(tmp_path):
    path = tmp_path / "d.jsonl"
    path.write_text(
        '{"document": "a", "summary": "b"}\n\n{"document": "a", "summ\n', encoding="utf-8"
    )
    with pytest.raises(
        ValueError, match=r"d\.jsonl, line 3: malformed JSON.*one complete JSON object"
    ):
        load_pairs(path)


def test_malformed_json_file_reports_line(tmp_path):
    path = tmp_path / "d.json"
    path.write_text('{"document": "a", "summary": "b"}\nnot json\n', encoding="utf-8")
    with pytest.raises(ValueError, match=r"d\.json, line 2: malformed JSON"):
        load_pairs(path)


def test_json_line_that_is_not_an_object(tmp_path):
    path = write_jsonl(tmp_path / "d.jsonl", [{"document": "a", "summary": "b"}, ["a", "b"]])
    with pytest.raises(ValueError, match=r"line 2: expected a JSON object, got list"):
        load_pairs(path)


def test_json_list_item_that_is_not_an_object(tmp_path):
    path = tmp_path / "d.json"
    path.write_text(json.dumps([{"document": "a", "summary": "b"}, "oops"]), encoding="utf-8")
    with pytest.raises(
        ValueError, match=r"item 2 of the top-level list: expected a JSON object, got str"
    ):
        load_pairs(path)


def test_missing_document_field_lists_fields_and_fix(tmp_path):
    path = write_jsonl(tmp_path / "d.jsonl", [{"article": "a", "summary": "b"}])
    with pytest.raises(ValueError) as info:
        load_pairs(path)
    message = str(info.value)
    assert "d.jsonl, line 1" in message
    assert "no document field 'document'" in message
    assert "['article', 'summary']" in message
    assert "document_field=" in message and "--document-field" in message


def test_missing_summary_field_in_csv_names_row(tmp_path):
    path = write_csv(tmp_path / "d.csv", ["document", "abstract"], [["doc", "sum"]])
    with pytest.raises(
        ValueError,
        match=r"d\.csv, row 1 \(line 2\): no summary field 'summary'.*\['document', 'abstract'\].*"
        r"summary_field=<name> \(CLI: --summary-field <name>\)",
    ):
        load_pairs(path)


def test_field_that_is_not_a_string(tmp_path):
    path = write_jsonl(
        tmp_path / "d.jsonl",
        [{"document": "a", "summary": "b"}, {"document": ["a"], "summary": "b"}],
    )
    with pytest.raises(
        ValueError, match=r"line 2: the document field 'document' must be a string, got list"
    ):
        load_pairs(path)


@pytest.mark.parametrize("field", ["document", "summary"])
def test_whitespace_only_text(tmp_path, field):
    record = {"document": "a", "summary": "b", field: " \n\t "}
    path = write_jsonl(tmp_path / "d.jsonl", [{"document": "x", "summary": "y"}, record])
    with pytest.raises(
        ValueError,
        match=rf"d\.jsonl, line 2: the {field} field '{field}' is empty or whitespace only",
    ):
        load_pairs(path)


def test_empty_csv_cell(tmp_path):
    path = write_csv(tmp_path / "d.csv", ["document", "summary"], [["doc", "sum"], ["doc", ""]])
    with pytest.raises(ValueError, match=r"row 2 \(line 3\): the summary field 'summary' is empty"):
        load_pairs(path)


def test_short_csv_row(tmp_path):
    path = tmp_path / "d.csv"
    path.write_text("id,document,summary\n1,doc\n", encoding="utf-8")
    with pytest.raises(
        ValueError, match=r"row 1 \(line 2\): the row has fewer columns than the header"
    ):
        load_pairs(path)


@pytest.mark.parametrize(
    ("name", "content"),
    [("d.jsonl", "\n\n"), ("d.json", "[]"), ("d.csv", "document,summary\n"), ("e.jsonl", "")],
)
def test_file_with_no_examples(tmp_path, name, content):
    path = tmp_path / name
    path.write_text(content, encoding="utf-8")
    with pytest.raises(ValueError, match=re.escape(name) + r": the file holds no examples"):
        load_pairs(path)


def test_bad_max_examples(tmp_path):
    path = write_jsonl(tmp_path / "d.jsonl", [{"document": "a", "summary": "b"}])
    with pytest.raises(ValueError, match="max_examples must be a positive integer"):
        load_pairs(path, max_examples=0)


# ------------------------------------------------------------------ hub datasets


def test_hub_failure_becomes_runtime_error(monkeypatch):
    import datasets

    calls = []

    def offline(*args, **kwargs):
        calls.append((args, kwargs))
        raise ConnectionError("Couldn't reach the Hugging Face Hub")

    monkeypatch.setattr(datasets, "load_dataset", offline)
    with pytest.raises(
        RuntimeError,
        match=r"could not load hub dataset 'no-such-org/no-such-set'.*offline.*local JSONL or CSV",
    ):
        load_pairs("no-such-org/no-such-set", split="validation")
    assert calls[0][1]["split"] == "validation"


def test_hub_cnn_dailymail_config_and_fields(monkeypatch):
    import datasets

    seen = {}

    def fake(name, config=None, *, split):
        seen.update(name=name, config=config, split=split)
        return datasets.Dataset.from_list(
            [
                {"article": f"Article {i}.", "highlights": f"High {i}.", "id": f"c{i}"}
                for i in range(4)
            ]
        )

    monkeypatch.setattr(datasets, "load_dataset", fake)
    pairs = load_pairs("cnn_dailymail", max_examples=3)
    assert seen == {"name": "cnn_dailymail", "config": "3.0.0", "split": "train"}
    assert pairs[0] == SummaryPair("Article 0.", "High 0.", "c0")
    assert len(pairs) == 3


def test_hub_missing_field_names_row(monkeypatch):
    import datasets

    monkeypatch.setattr(
        datasets,
        "load_dataset",
        lambda name, config=None, *, split: datasets.Dataset.from_list(
            [{"text": "a", "summary": "b"}]
        ),
    )
    with pytest.raises(
        ValueError,
        match=r"hub dataset 'xsum', split 'test', row 1: no document field 'document'.*"
        r"\['text', 'summary'\]",
    ):
        load_pairs("xsum", split="test")


_COMPRESSORS = {".gz": "gzip", ".bz2": "bz2", ".xz": "lzma"}


def _compress(path: Path, suffix: str) -> Path:
    import importlib

    target = path.with_name(path.name + suffix)
    with importlib.import_module(_COMPRESSORS[suffix]).open(target, "wb") as handle:
        handle.write(path.read_bytes())
    path.unlink()
    return target


@pytest.mark.parametrize("suffix", [".gz", ".bz2", ".xz"])
@pytest.mark.parametrize("kind", ["jsonl", "json", "csv"])
def test_compressed_files_read_as_their_plain_form(tmp_path, kind, suffix):
    records = [{"document": "first document", "summary": "first"}, {"document": "second one", "summary": "second"}]
    plain = tmp_path / f"data.{kind}"
    if kind == "jsonl":
        write_jsonl(plain, records)
    elif kind == "json":
        plain.write_text(json.dumps(records), encoding="utf-8")
    else:
        write_csv(plain, ["document", "summary"], [[r["document"], r["summary"]] for r in records])
    expected = load_pairs(plain)
    compressed = _compress(plain, suffix)
    assert load_pairs(compressed) == expected
    assert load_pairs(compressed, max_examples=1) == expected[:1]


@pytest.mark.parametrize("suffix", [".gz", ".xz"])
def test_compressed_files_keep_line_numbered_errors(tmp_path, suffix):
    path = tmp_path / "bad.jsonl"
    path.write_text('{"document": "a", "summary": "b"}\n{"document": "c"\n', encoding="utf-8")
    with pytest.raises(ValueError, match=r"line 2: malformed JSON"):
        load_pairs(_compress(path, suffix))
    raw = tmp_path / "latin.csv"
    raw.write_bytes("document,summary\nok,fine\ncaf\xe9,bad\n".encode("latin-1"))
    with pytest.raises(ValueError, match=r"line 3: not valid UTF-8"):
        load_pairs(_compress(raw, suffix))


def test_an_unknown_format_inside_a_compression_is_named(tmp_path):
    path = tmp_path / "data.txt"
    path.write_text("hello\n", encoding="utf-8")
    with pytest.raises(ValueError, match=r"unsupported file extension '\.txt\.gz'.*compressed"):
        load_pairs(_compress(path, ".gz"))
