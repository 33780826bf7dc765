"""`srformer copy-reach` end to end on a tiny random T5 checkpoint read in windows."""

from __future__ import annotations

import json

import pytest

from srformer.cli.main import main
from srformer.data.pairs import load_aclsum
from tests.tiny_t5 import save_tiny_t5


@pytest.fixture(scope="module")
def checkpoint_and_data(tmp_path_factory):
    folder = tmp_path_factory.mktemp("reach")
    pairs = load_aclsum("train")[:6]
    save_tiny_t5(folder / "model", [p.document for p in pairs], dropout_rate=0.0)
    data = folder / "docs.jsonl"
    data.write_text("".join(json.dumps({"id": p.id, "document": p.document, "summary": p.summary}) + "\n"
                            for p in pairs))
    return folder / "model", data


def test_copy_reach_writes_the_rows_per_start_and_window(checkpoint_and_data, tmp_path, capsys):
    model, data = checkpoint_and_data
    output = tmp_path / "out" / "reach.json"
    status = main(["copy-reach", "--checkpoint", str(model), "--data", str(data), "--output", str(output),
                   "--max-source-length", "64", "--encoder-window", "32", "--window-overlap", "0", "--span", "16",
                   "--cue", "4", "--documents", "3"])
    assert status == 0
    record = json.loads(output.read_text())
    assert [row["start"] for row in record["rows"]] == [0, 16, 32, 48]  # stride: half the window
    assert [row["window"] for row in record["rows"]] == [0, 0, 1, 1]
    assert record["documents"] == 3 and all(row["tokens"] == 3 * 12 for row in record["rows"])
    assert record["window_keep_starts"] == [0, 32] and record["encoder_window"] == 32
    assert all(0 <= row["accuracy"] <= 1 for row in record["rows"])
    assert output.with_suffix(".png").is_file() and output.with_suffix(".md").read_text() in capsys.readouterr().out


def test_an_input_read_whole_has_no_windows(checkpoint_and_data, tmp_path):
    model, data = checkpoint_and_data
    output = tmp_path / "reach.json"
    assert main(["copy-reach", "--checkpoint", str(model), "--data", str(data), "--output", str(output),
                 "--max-source-length", "64", "--span", "16", "--stride", "24"]) == 0
    record = json.loads(output.read_text())
    assert [row["start"] for row in record["rows"]] == [0, 24, 48]
    assert record["encoder_window"] is None and record["summary"]["beyond_first_window"] is None


@pytest.mark.parametrize(("extra", "message"), [
    (["--cue", "64"], "--cue"), (["--span", "1"], "--span"), (["--stride", "0"], "--stride"),
    (["--max-source-length", "100000"], "--max-source-length 100000"),
])
def test_bad_options_are_refused_by_name(checkpoint_and_data, tmp_path, capsys, extra, message):
    model, data = checkpoint_and_data
    status = main(["copy-reach", "--checkpoint", str(model), "--data", str(data), "--output",
                   str(tmp_path / "r.json"), "--max-source-length", "64", *extra])
    assert status == 2
    assert message in capsys.readouterr().err
