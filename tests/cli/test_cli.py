"""The command line end to end on a few real ACLSum documents: train -> evaluate -> summarize, resume."""

from __future__ import annotations

import json

import pytest

from srformer.cli.main import main
from srformer.data.pairs import load_aclsum


@pytest.fixture(scope="module")
def data_files(tmp_path_factory):
    folder = tmp_path_factory.mktemp("data")
    for split, n in (("train", 12), ("test", 4)):
        rows = [{"id": p.id, "text": p.document, "abstract": p.summary} for p in load_aclsum(split)[:n]]
        (folder / f"{split}.jsonl").write_text("".join(json.dumps(r) + "\n" for r in rows))
    return folder


TRAIN_ARGS = ["--model", "t5-tiny", "--document-field", "text", "--summary-field", "abstract", "--segment-size", "16",
              "--target-length", "32", "--max-source-length", "64", "--max-target-length", "32", "--vocab-size", "400",
              "--batch-size", "4", "--save-every", "2", "--no-progress"]


@pytest.fixture(scope="module")
def trained(data_files, tmp_path_factory):
    output = tmp_path_factory.mktemp("run") / "srformer"
    status = main(["train", "--data", str(data_files / "train.jsonl"), "--variant", "srformer", "--output", str(output),
                   "--max-steps", "3", *TRAIN_ARGS])
    assert status == 0
    return output


def test_train_writes_a_loadable_checkpoint(trained):
    assert (trained / "config.json").is_file() and (trained / "tokenizer.json").is_file()
    assert json.loads((trained / "training_summary.json").read_text())["steps"] == 3
    assert json.loads((trained / "config.json").read_text())["srformer"]["variant"] == "srformer"


def test_evaluate_writes_rouge_json(trained, data_files, tmp_path, capsys):
    metrics_path = tmp_path / "metrics.json"
    status = main(["evaluate", "--checkpoint", str(trained), "--data", str(data_files / "test.jsonl"),
                   "--document-field", "text", "--summary-field", "abstract", "--output", str(metrics_path),
                   "--max-examples", "3", "--max-new-tokens", "8", "--num-beams", "2", "--no-progress"])
    assert status == 0
    metrics = json.loads(metrics_path.read_text())
    for key in ("rouge1", "rouge2", "rougeL", "rougeLsum"):
        assert 0.0 <= metrics[key] <= 100.0
    assert metrics["num_examples"] == 3 and metrics["variant"] == "srformer" and metrics["segment_size"] == 16
    assert metrics["seconds"] > 0 and metrics["max_source_length"] == 64
    assert "| variant |" in capsys.readouterr().out


def test_no_repeat_ngram_size_reaches_generate_and_the_metrics(trained, data_files, tmp_path, monkeypatch, capsys):
    import transformers

    seen: list[int | None] = []
    original = transformers.GenerationMixin.generate

    def spy(self, *args, **kwargs):
        seen.append(kwargs.get("no_repeat_ngram_size"))
        return original(self, *args, **kwargs)

    monkeypatch.setattr(transformers.GenerationMixin, "generate", spy)
    metrics_path = tmp_path / "metrics.json"
    assert main(["evaluate", "--checkpoint", str(trained), "--data", str(data_files / "test.jsonl"),
                 "--document-field", "text", "--summary-field", "abstract", "--output", str(metrics_path),
                 "--max-examples", "2", "--max-new-tokens", "6", "--no-repeat-ngram-size", "2", "--no-progress"]) == 0
    assert seen and set(seen) == {2}
    assert json.loads(metrics_path.read_text())["no_repeat_ngram_size"] == 2
    seen.clear()
    assert main(["summarize", "--checkpoint", str(trained), str(data_files / "test.jsonl"), "--document-field", "text",
                 "--max-new-tokens", "6", "--no-repeat-ngram-size", "3", "--no-progress"]) == 0
    assert seen and set(seen) == {3}
    capsys.readouterr()
    with pytest.raises(SystemExit):
        main(["summarize", "--checkpoint", str(trained), "--no-repeat-ngram-size", "-1"])
    assert "expected an integer of 0 or more" in capsys.readouterr().err


def test_summarize_reads_standard_input(trained, monkeypatch, capsys):
    import io

    monkeypatch.setattr("sys.stdin", io.StringIO(load_aclsum("val")[0].document))
    assert main(["summarize", "--checkpoint", str(trained), "--max-new-tokens", "6", "--no-progress"]) == 0
    assert capsys.readouterr().out.count("\n") == 1  # one summary line per input document (may be empty this early)


def test_resume_continues_and_refuses_another_variant(trained, data_files, capsys):
    base = ["train", "--data", str(data_files / "train.jsonl"), "--output", str(trained), *TRAIN_ARGS]
    assert main([*base, "--variant", "segmented", "--max-steps", "5", "--resume"]) == 2
    assert "different srformer" in capsys.readouterr().err
    assert main([*base, "--variant", "srformer", "--max-steps", "3"]) == 2
    assert "--resume" in capsys.readouterr().err
    assert main([*base, "--variant", "srformer", "--max-steps", "5", "--resume"]) == 0
    assert json.loads((trained / "training_summary.json").read_text())["steps"] == 5


@pytest.mark.parametrize(
    "extra,message",
    [
        (["--segment-size", "128"], "larger than --max-source-length"),
        (["--segment-size", "1", "--target-length", "8"], "smaller than the number of segments"),
        (["--segment-size", "0"], "segment_size"),
        (["--target-length", "0"], "target_length"),
    ],
)
def test_bad_shapes_are_rejected_before_training(data_files, tmp_path, capsys, extra, message):
    args = ["train", "--data", str(data_files / "train.jsonl"), "--variant", "srformer",
            "--output", str(tmp_path / "x"), *TRAIN_ARGS, *extra]
    assert main(args) == 2
    assert message in capsys.readouterr().err


def test_missing_field_and_empty_document_are_clear_errors(tmp_path, capsys):
    bad = tmp_path / "bad.jsonl"
    bad.write_text(json.dumps({"document": "   ", "summary": "s"}) + "\n")
    assert main(["train", "--data", str(bad), "--variant", "full", "--output", str(tmp_path / "o"),
                 "--model", "t5-tiny"]) == 2
    assert "empty" in capsys.readouterr().err
    other = tmp_path / "other.jsonl"
    other.write_text(json.dumps({"document": "a text", "summary": "s"}) + "\n")
    assert main(["train", "--data", str(other), "--variant", "full", "--output", str(tmp_path / "o"),
                 "--model", "t5-tiny", "--summary-field", "abstract"]) == 2
    assert "abstract" in capsys.readouterr().err


@pytest.mark.parametrize("name,stored", [("ablation-III", {"variant": "srformer", "ablation": "no_raf"}),
                                         ("longt5", {"variant": "longt5", "ablation": None})])
def test_train_accepts_baselines_and_ablations_by_name(data_files, tmp_path, name, stored):
    output = tmp_path / name
    assert main(["train", "--data", str(data_files / "train.jsonl"), "--variant", name, "--output", str(output),
                 "--max-steps", "1", *TRAIN_ARGS]) == 0
    saved = json.loads((output / "config.json").read_text())["srformer"]
    assert {key: saved[key] for key in stored} == stored


def test_evaluate_creates_the_folders_of_its_outputs(trained, data_files, tmp_path):
    predictions, metrics = tmp_path / "runs" / "new" / "preds.jsonl", tmp_path / "other" / "metrics.json"
    assert main(["evaluate", "--checkpoint", str(trained), "--data", str(data_files / "test.jsonl"),
                 "--document-field", "text", "--summary-field", "abstract", "--output", str(metrics),
                 "--predictions", str(predictions), "--max-examples", "2", "--max-new-tokens", "4",
                 "--no-progress"]) == 0
    rows = [json.loads(line) for line in predictions.read_text().splitlines()]
    assert len(rows) == 2 and set(rows[0]) == {"id", "prediction", "reference"}
    assert json.loads(metrics.read_text())["num_examples"] == 2


@pytest.mark.parametrize("option", ["--predictions", "--output"])
def test_evaluate_refuses_an_unwritable_output_before_loading_anything(tmp_path, capsys, monkeypatch, option):
    import srformer.cli.evaluate_command as command

    def fail(*_args, **_kwargs):
        raise AssertionError("loaded a model before checking the output paths")

    monkeypatch.setattr(command, "load_summarizer", fail)
    blocker = tmp_path / "a-file"
    blocker.write_text("x")
    paths = {"--output": str(tmp_path / "m.json"), "--predictions": str(tmp_path / "p.jsonl")}
    paths[option] = str(blocker / "sub" / "out.json")
    assert main(["evaluate", "--checkpoint", str(tmp_path / "missing"), "--data", "aclsum",
                 "--output", paths["--output"], "--predictions", paths["--predictions"]]) == 2
    error = capsys.readouterr().err
    assert option in error and f"{blocker} is a file, not a folder" in error
    folder = tmp_path / "folder"
    folder.mkdir()
    paths[option] = str(folder)
    assert main(["evaluate", "--checkpoint", str(tmp_path / "missing"), "--data", "aclsum",
                 "--output", paths["--output"], "--predictions", paths["--predictions"]]) == 2
    assert "is a folder; give a file path" in capsys.readouterr().err


@pytest.mark.parametrize("command", ["evaluate", "summarize", "train", "compare"])
def test_a_missing_local_checkpoint_is_named_in_the_error(data_files, tmp_path, capsys, command):
    missing = str(tmp_path / "runs" / "nope")
    data = str(data_files / "train.jsonl")
    fields = ["--document-field", "text", "--summary-field", "abstract"]
    argv = {
        "evaluate": ["evaluate", "--checkpoint", missing, "--data", data, *fields, "--output", str(tmp_path / "m.json"),
                     "--predictions", str(tmp_path / "new" / "p.jsonl"), "--no-progress"],
        "summarize": ["summarize", "--checkpoint", missing, data, "--no-progress"],
        "train": ["train", "--model", missing, "--data", data, *fields, "--variant", "full",
                  "--output", str(tmp_path / "t"), "--no-progress"],
        "compare": ["compare", "--model", missing, "--base-steps", "0", "--train-data", data, "--test-data", data,
                    *fields, "--variants", "full", "--ablations", "--seeds", "0", "--output", str(tmp_path / "c"),
                    "--no-progress"],
    }[command]
    assert main(argv) == 2
    error = capsys.readouterr().err
    assert f"No checkpoint at local path {missing!r}" in error and "does not exist" in error
    assert "Traceback" not in error and "internet" not in error
    assert not (tmp_path / "m.json").exists() and not (tmp_path / "t").exists()
    assert not (tmp_path / "new").exists()  # the output folders are checked, not created, before the run starts


def test_summarize_reads_a_long_document_in_encoder_windows(trained, data_files, tmp_path, capsys, monkeypatch):
    """--max-source-length past the training length and --encoder-window: the document is encoded in windows of 32
    tokens (the encoder's forward is called once per batch of windows)."""
    documents = tmp_path / "long.jsonl"
    document = " ".join(p.document for p in load_aclsum("val")[:3])
    documents.write_text(json.dumps({"document": document}) + "\n")
    from srformer.models import chunked_encoding

    calls = []
    real = chunked_encoding.encode_in_windows
    monkeypatch.setattr(chunked_encoding, "encode_in_windows", lambda *a, **k: calls.append(1) or real(*a, **k))
    status = main(["summarize", "--checkpoint", str(trained), str(documents), "--max-source-length", "400",
                   "--encoder-window", "32", "--window-batch-size", "4", "--max-new-tokens", "6", "--no-progress"])
    assert status == 0 and calls
    assert capsys.readouterr().out.count("\n") == 1


def test_train_takes_an_automatic_segment_size(data_files, tmp_path):
    output = tmp_path / "auto"
    args = [a if a != "16" else "auto" for a in TRAIN_ARGS]
    assert main(["train", "--data", str(data_files / "train.jsonl"), "--variant", "srformer", "--output", str(output),
                 "--max-steps", "2", *args]) == 0
    assert json.loads((output / "config.json").read_text())["srformer"]["segment_size"] == "auto"


@pytest.mark.parametrize("extra,message", [(["--encoder-window", "0"], "encoder_window"),
                                           (["--window-overlap", "1"], "window_overlap")])
def test_bad_window_options_are_refused(trained, tmp_path, extra, message, capsys):
    document = tmp_path / "doc.txt"
    document.write_text("a short document")
    assert main(["summarize", "--checkpoint", str(trained), str(document), "--no-progress", *extra]) == 2
    assert message in capsys.readouterr().err
