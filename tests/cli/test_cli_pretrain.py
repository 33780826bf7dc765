"""`srformer pretrain` end to end: pretrain -> train -> evaluate on a few ACLSum documents, and bad input."""

from __future__ import annotations

import json
import re

import pytest

from srformer.cli.main import main
from srformer.data.pairs import SummaryPair, load_aclsum
from srformer.data.split import select_split

SPLIT = "train=0.6,validation=0.2,test=0.2"


@pytest.fixture(scope="module")
def data_file(tmp_path_factory):
    """24 ACLSum papers with ids, to be split by id."""
    pairs = load_aclsum("train")[:24]
    rows = [{"id": f"paper-{i}", "document": p.document, "summary": p.summary} for i, p in enumerate(pairs)]
    path = tmp_path_factory.mktemp("data") / "all.jsonl"
    path.write_text("".join(json.dumps(r) + "\n" for r in rows))
    return path


def pretrain_args(data, output) -> list[str]:
    return ["pretrain", "--data", str(data), "--split-by-id", SPLIT, "--model", "t5-tiny", "--output", str(output),
            "--max-source-length", "32", "--vocab-size", "300", "--curriculum-start", "8", "--curriculum-hold", "0.2",
            "--max-steps", "6", "--batch-size", "4", "--warmup-steps", "1", "--eval-documents", "2",
            "--eval-every", "3", "--save-every", "3", "--no-progress"]


@pytest.mark.slow
def test_pretrain_then_train_then_evaluate(data_file, tmp_path, capsys):
    base = tmp_path / "base"
    assert main(pretrain_args(data_file, base)) == 0
    assert "pretrained t5-tiny for 6 steps" in capsys.readouterr().out
    recipe = json.loads((base / "pretrain_run.json").read_text())
    assert recipe["model"] == "t5-tiny" and f"--split-by-id {SPLIT}" in recipe["data"]
    log = json.loads((base / "pretrain_log.json").read_text())
    assert [entry["step"] for entry in log["copy_eval"]] == [3, 6]

    tuned = tmp_path / "tuned"
    assert main(["train", "--model", str(base), "--data", str(data_file), "--split-by-id", SPLIT,
                 "--variant", "srformer", "--segment-size", "8", "--target-length", "8", "--max-source-length", "32",
                 "--max-target-length", "16", "--batch-size", "4", "--max-steps", "2", "--save-every", "2",
                 "--output", str(tuned), "--no-progress"]) == 0
    metrics_file = tmp_path / "metrics.json"
    assert main(["evaluate", "--checkpoint", str(tuned), "--data", str(data_file), "--split-by-id", SPLIT,
                 "--max-new-tokens", "8", "--output", str(metrics_file), "--no-progress"]) == 0
    out = capsys.readouterr().out
    assert "reading check:" in out and "baselines, ROUGE-1: lead-3" in out
    metrics = json.loads(metrics_file.read_text())
    assert metrics["baselines"]["oracle (length-capped)"]["rouge1"] >= 0.0
    test_part = select_split([SummaryPair(r["document"], r["summary"], r["id"]) for r in map(
        json.loads, data_file.read_text().splitlines())], SPLIT, "test")
    assert metrics["reading"]["num_documents"] == metrics["num_examples"] == len(test_part)


def test_pretraining_never_sees_validation_or_test_documents(data_file, tmp_path, monkeypatch):
    seen = {}

    def fake_pretrain(documents, recipe, output, settings, *, resume):
        seen["documents"] = documents
        raise ValueError("stop here")

    monkeypatch.setattr("srformer.cli.pretrain_command.pretrain", fake_pretrain)
    assert main(pretrain_args(data_file, tmp_path / "run")) == 2
    rows = [json.loads(line) for line in data_file.read_text().splitlines()]
    pairs = [SummaryPair(r["document"], r["summary"], r["id"]) for r in rows]
    assert seen["documents"] == [p.document for p in select_split(pairs, SPLIT, "train")]
    assert 0 < len(seen["documents"]) < len(rows)


@pytest.mark.parametrize(("line", "message"), [
    ('{"id": "a", "text": "no document field"}', r"line 2: no document field 'document'"),
    ('{"id": "a", "document": "   "}', r"line 2: the document field 'document' is empty"),
])
def test_bad_documents_name_the_file_and_line(tmp_path, capsys, line, message):
    data = tmp_path / "docs.jsonl"
    data.write_text('{"id": "ok", "document": "A fine document."}\n' + line + "\n")
    assert main(["pretrain", "--data", str(data), "--output", str(tmp_path / "run"), "--no-progress"]) == 2
    error = capsys.readouterr().err
    assert str(data) in error
    assert re.search(message, error), error
    assert not (tmp_path / "run").exists()


def test_a_curriculum_that_does_not_fit_is_refused_before_reading_data(tmp_path, capsys):
    assert main(["pretrain", "--data", str(tmp_path / "missing.jsonl"), "--output", str(tmp_path / "run"),
                 "--max-steps", "5", "--warmup-steps", "0"]) == 2
    assert "curriculum" in capsys.readouterr().err


@pytest.mark.slow
def test_sigkill_then_resume_matches_an_uninterrupted_run(data_file, tmp_path):
    """A real interruption: the pretraining process is SIGKILLed after its first checkpoint (perhaps inside a
    later one), resumed with --resume, and must end with the weights of an uninterrupted run."""
    import os
    import signal
    import subprocess
    import sys
    import time

    import torch
    from safetensors.torch import load_file

    from srformer.training import find_checkpoint

    def args(output):
        values = pretrain_args(data_file, output)
        values[values.index("--max-steps") + 1] = "40"
        values[values.index("--save-every") + 1] = "5"
        return values

    run = tmp_path / "killed"
    victim = subprocess.Popen([sys.executable, "-m", "srformer.cli.main", *args(run)], stdout=subprocess.PIPE,
                              stderr=subprocess.PIPE, env={**os.environ, "OMP_NUM_THREADS": "1"})
    try:
        deadline = time.monotonic() + 120
        while not (run / "checkpoint" / "trainer_state.json").is_file():
            assert victim.poll() is None, victim.communicate()[1].decode()[-3000:]
            assert time.monotonic() < deadline, "no checkpoint after 120 s"
            time.sleep(0.005)
        victim.send_signal(signal.SIGKILL)
        victim.wait(timeout=30)
    finally:
        if victim.poll() is None:
            victim.kill()
            victim.wait()
    assert victim.returncode == -signal.SIGKILL
    killed_at = json.loads((find_checkpoint(run) / "trainer_state.json").read_text())["global_step"]
    assert 5 <= killed_at < 40

    threads = torch.get_num_threads()
    torch.set_num_threads(1)  # the subprocess's kernels
    try:
        assert main([*args(run), "--resume"]) == 0
        assert main(args(tmp_path / "uninterrupted")) == 0
    finally:
        torch.set_num_threads(threads)
    resumed, reference = (load_file(d / "model.safetensors") for d in (run, tmp_path / "uninterrupted"))
    assert resumed.keys() == reference.keys()
    assert all(torch.equal(resumed[key], reference[key]) for key in reference)
    logs = [json.loads((d / "pretrain_log.json").read_text()) for d in (run, tmp_path / "uninterrupted")]
    assert logs[0]["loss"] == logs[1]["loss"] and logs[0]["copy_eval"] == logs[1]["copy_eval"]
