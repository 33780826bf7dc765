"""Bad input files not covered by test_data_pairs.py: bytes that are not UTF-8, malformed CSV
(unclosed quotes, extra cells), and the counted skip of all-empty CSV rows."""

from __future__ import annotations

import json
import re
import shutil
from pathlib import Path

import pytest

from srformer.data import load_pairs

SHARED_DATA = Path(__file__).resolve().parents[3] / "shared" / "data"

GOOD = json.dumps({"document": "A document.", "summary": "A summary."})


def test_non_utf8_jsonl_line_names_file_line_and_fix(tmp_path):
    path = tmp_path / "d.jsonl"
    latin1 = json.dumps({"document": "Caf\u00e9 owners", "summary": "s"}, ensure_ascii=False).encode("latin-1")
    path.write_bytes(GOOD.encode() + b"\n" + GOOD.encode() + b"\n" + latin1 + b"\n")
    with pytest.raises(
        ValueError,
        match=r"d\.jsonl, line 3: not valid UTF-8 \(byte 0xe9 at byte 18 of the line: invalid continuation byte\); "
        r"save the file as UTF-8, e\.g\. `iconv -f latin1 -t utf-8 d\.jsonl > fixed\.jsonl`",
    ):
        load_pairs(path)


def test_non_utf8_csv_names_the_line(tmp_path):
    path = tmp_path / "d.csv"
    path.write_bytes(b"document,summary\nfirst doc,first sum\nsecond doc,caf\xe9\n")
    with pytest.raises(ValueError, match=r"d\.csv, line 3: not valid UTF-8 \(byte 0xe9"):
        load_pairs(path)


def test_non_utf8_json_list_names_the_line(tmp_path):
    path = tmp_path / "d.json"
    path.write_bytes(b'[\n {"document": "a", "summary": "b"},\n {"document": "\xff", "summary": "c"}\n]\n')
    with pytest.raises(ValueError, match=r"d\.json, line 3: not valid UTF-8 \(byte 0xff"):
        load_pairs(path)


def test_utf8_bom_is_accepted(tmp_path):
    path = tmp_path / "d.jsonl"
    path.write_bytes(b"\xef\xbb\xbf" + GOOD.encode() + b"\n")
    assert load_pairs(path)[0].document == "A document."


def test_csv_unclosed_quote_is_an_error_not_a_swallowed_file(tmp_path):
    path = tmp_path / "d.csv"
    path.write_text('document,summary\nok doc,ok sum\nbad doc,"never closed\nnext doc,next sum\n', encoding="utf-8")
    with pytest.raises(
        ValueError,
        match=r"d\.csv, the row starting at line 3: malformed CSV \(unexpected end of data\); a quoted cell must end "
        r"with a closing quote",
    ):
        load_pairs(path)


def test_csv_text_after_a_closing_quote_is_an_error(tmp_path):
    path = tmp_path / "d.csv"
    path.write_text('document,summary\n"quoted" tail,sum\n', encoding="utf-8")
    with pytest.raises(ValueError, match=r"line 2: malformed CSV \(',' expected after '\"'\).*double the quotes"):
        load_pairs(path)


def test_csv_row_with_more_cells_than_the_header(tmp_path):
    path = tmp_path / "d.csv"
    path.write_text("document,summary\nA doc, with a comma,sum\n", encoding="utf-8")
    with pytest.raises(
        ValueError,
        match=re.escape("d.csv, row 1 (line 2): the row has 1 more cell(s) than the header (['document', 'summary']); "
                        "quote cells that contain commas"),
    ):
        load_pairs(path)


def test_csv_rows_of_empty_cells_are_skipped_and_counted(tmp_path):
    path = tmp_path / "d.csv"
    path.write_text("document,summary\ndoc 1,sum 1\n,\ndoc 2,sum 2\n , \n\ndoc 3,sum 3\n", encoding="utf-8")
    with pytest.warns(UserWarning, match=r"d\.csv: skipped 2 row\(s\) whose cells are all empty \(rows 2, 4\)"):
        pairs = load_pairs(path)
    assert [p.document for p in pairs] == ["doc 1", "doc 2", "doc 3"]
    with pytest.warns(UserWarning, match=r"skipped 1 row\(s\).*\(rows 2\)"):  # reported when stopping early too
        assert len(load_pairs(path, max_examples=2)) == 2


def test_real_jsonl_with_a_broken_line_names_it(tmp_path):
    source = SHARED_DATA / "scitldr" / "validation.jsonl"
    if not source.is_file():
        pytest.skip(f"shared data file {source} is absent")
    path = tmp_path / "scitldr.jsonl"
    shutil.copy(source, path)
    lines = path.read_bytes().splitlines(keepends=True)
    lines[41] = lines[41][: len(lines[41]) // 2] + b"\n"  # a record cut in the middle, as by a full disk
    path.write_bytes(b"".join(lines))
    with pytest.raises(ValueError, match=r"scitldr\.jsonl, line 42: malformed JSON \(.*one complete JSON object"):
        load_pairs(path)
