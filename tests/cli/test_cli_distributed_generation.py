"""`srformer summarize` and `srformer evaluate` with two CPU processes (gloo) under `torchrun` and `accelerate launch`:
the same bytes as one process, one report, and a run killed with SIGKILL (launcher and workers) that resumes to the
same file.

Equality by construction: every run uses one thread (as the launched processes do), and every batch is the one a
single process decodes (the same documents, so the same padded shapes and kernels), whichever process decodes it.
"""

from __future__ import annotations

import contextlib
import json
import os
import signal
import socket
import subprocess
import sys
import time
from pathlib import Path

import psutil
import pytest

from srformer.cli.main import main
from srformer.data.pairs import load_aclsum
from tests.tiny_t5 import save_tiny_t5

NUM_DOCUMENTS = 24


@pytest.fixture(scope="module")
def base_model(tmp_path_factory) -> Path:
    """A tiny random T5, a Unigram tokenizer and NUM_DOCUMENTS ACLSum papers cut to different lengths (docs.jsonl)."""
    folder = tmp_path_factory.mktemp("base")
    pairs = load_aclsum("train")[:NUM_DOCUMENTS]
    save_tiny_t5(folder, [p.document for p in pairs] + [p.summary for p in pairs], dropout_rate=0.0)
    with open(folder / "docs.jsonl", "w", encoding="utf-8") as handle:
        for i, pair in enumerate(pairs):
            handle.write(json.dumps({"id": f"paper-{i}", "document": pair.document[: 150 + 61 * i],
                                     "summary": pair.summary}) + "\n")
    return folder


def free_port() -> int:
    with socket.socket() as sock:
        sock.bind(("127.0.0.1", 0))
        return sock.getsockname()[1]


def torchrun() -> list[str]:
    return [sys.executable, "-m", "torch.distributed.run", "--nproc_per_node", "2", "--master_port", str(free_port()),
            "-m", "srformer.cli.main"]


ENV = {**os.environ, "OMP_NUM_THREADS": "1", "TOKENIZERS_PARALLELISM": "false"}


def launch(command: list[str]) -> subprocess.CompletedProcess:
    completed = subprocess.run(command, env=ENV, capture_output=True, text=True, timeout=300)
    assert completed.returncode == 0, completed.stdout[-3000:] + completed.stderr[-5000:]
    return completed


def decoding(*extra: str) -> list[str]:
    """Decoding options; ``extra`` comes last, so it wins over the defaults (argparse keeps the last value)."""
    return ["--batch-size", "2", "--max-new-tokens", "16", "--max-source-length", "96", "--no-progress", *extra]


def kill_all(pid: int) -> None:
    """SIGKILL to a process and all its descendants (torchrun's workers are not in its process group), workers
    first; waits until every one is gone."""
    root = psutil.Process(pid)
    processes = [*root.children(recursive=True), root]
    for process in processes:
        with contextlib.suppress(psutil.NoSuchProcess):
            process.send_signal(signal.SIGKILL)
    psutil.wait_procs(processes, timeout=30)


@pytest.mark.slow
def test_two_processes_write_the_bytes_of_one_under_torchrun_and_accelerate(base_model, tmp_path, one_thread, capsys):
    docs = str(base_model / "docs.jsonl")
    assert main(["summarize", "--checkpoint", str(base_model), docs, "--output", str(tmp_path / "one.jsonl"),
                 *decoding()]) == 0
    assert main(["evaluate", "--checkpoint", str(base_model), "--data", docs, "--output", str(tmp_path / "one.json"),
                 "--predictions", str(tmp_path / "one-predictions.jsonl"), *decoding()]) == 0
    capsys.readouterr()

    launch([*torchrun(), "summarize", "--checkpoint", str(base_model), docs, "--output", str(tmp_path / "two.jsonl"),
            *decoding()])
    one = (tmp_path / "one.jsonl").read_bytes()
    assert (tmp_path / "two.jsonl").read_bytes() == one
    rows = [json.loads(line) for line in one.decode().splitlines()]
    assert [row["id"] for row in rows] == [f"paper-{i}" for i in range(NUM_DOCUMENTS)]
    assert len({row["summary"] for row in rows}) > 1
    assert not (tmp_path / "two.jsonl.partial").exists()

    accelerate = [sys.executable, "-m", "accelerate.commands.launch", "--multi_gpu", "--num_processes", "2",
                  "--num_machines", "1", "--mixed_precision", "no", "--dynamo_backend", "no", "--main_process_port",
                  str(free_port()), "-m", "srformer.cli.main"]
    evaluated = launch([*accelerate, "evaluate", "--checkpoint", str(base_model), "--data", docs, "--output",
                        str(tmp_path / "two.json"), "--predictions", str(tmp_path / "two-predictions.jsonl"),
                        *decoding()])
    assert evaluated.stdout.count("metrics written to") == 1  # one report, from the main process
    assert (tmp_path / "two-predictions.jsonl").read_bytes() == (tmp_path / "one-predictions.jsonl").read_bytes()
    single, double = (json.loads((tmp_path / name).read_text()) for name in ("one.json", "two.json"))
    assert (single["num_processes"], double["num_processes"]) == (1, 2)
    for key in ("seconds", "tokens_per_second", "num_processes"):
        single.pop(key), double.pop(key)
    assert double == single  # ROUGE, intervals, reading check and baselines of the same predictions
    assert not (tmp_path / "two.json.partial").exists()


@pytest.mark.slow
def test_sigkill_of_the_launch_then_the_same_command_gives_the_uninterrupted_file(base_model, tmp_path, one_thread,
                                                                                 capsys):
    docs = str(base_model / "docs.jsonl")
    slow = decoding("--batch-size", "1", "--num-beams", "4")  # batches of 1 with beam search: stopped half way
    assert main(["summarize", "--checkpoint", str(base_model), docs, "--output", str(tmp_path / "one.jsonl"),
                 *slow]) == 0
    output = tmp_path / "two.jsonl"
    partial = tmp_path / "two.jsonl.partial"
    arguments = ["summarize", "--checkpoint", str(base_model), docs, "--output", str(output)]
    command = [*torchrun(), *arguments, *slow]
    victim = subprocess.Popen(command, env=ENV, stdout=subprocess.PIPE, stderr=subprocess.PIPE)
    try:
        deadline = time.monotonic() + 180
        while not partial.is_file() or len(partial.read_bytes().splitlines()) < 4:  # the header and 3 batches
            assert victim.poll() is None, victim.communicate()[1].decode()[-3000:]
            assert time.monotonic() < deadline, "no finished round after 180 s"
            time.sleep(0.005)
        kill_all(victim.pid)  # the launcher and both workers, as a lost machine
        victim.wait(timeout=30)
    finally:
        if victim.poll() is None:
            kill_all(victim.pid)
    done = len(partial.read_bytes().splitlines()) - 1
    assert not output.exists() and 3 <= done < NUM_DOCUMENTS, done  # stopped part way

    capsys.readouterr()
    changed = [*arguments, *decoding("--batch-size", "1", "--num-beams", "2")]
    assert main(changed) == 2  # another decoding setting: refused, nothing lost
    error = capsys.readouterr().err
    assert "decoding setting num_beams (4 then, 2 now)" in error and str(partial) in error
    assert len(partial.read_bytes().splitlines()) - 1 == done

    launch(command)
    assert output.read_bytes() == (tmp_path / "one.jsonl").read_bytes()
    assert not partial.exists()


TIMES = ("seconds", "tokens_per_second", "num_processes", "decode_seconds", "finetune_seconds")


def without_times(value):
    """A results.json without its wall times (and the launch's process count)."""
    if isinstance(value, dict):
        return {key: without_times(item) for key, item in value.items() if key not in TIMES}
    if isinstance(value, list):
        return [without_times(item) for item in value]
    return value


@pytest.mark.slow
def test_compare_decodes_each_cell_with_every_process(base_model, tmp_path, one_thread, capsys):
    docs = str(base_model / "docs.jsonl")

    def grid(output: Path) -> list[str]:
        return ["compare", "--train-data", docs, "--test-data", docs, "--output", str(output), "--model",
                str(base_model), "--base-steps", "0", "--finetune-steps", "0", "--variants", "full", "srformer",
                "--ablations", "--segment-sizes", "16", "--seeds", "0", "--max-source-length", "96",
                "--target-length", "16", "--max-new-tokens", "16", "--no-progress"]

    assert main(grid(tmp_path / "one")) == 0
    capsys.readouterr()
    launched = launch([*torchrun(), *grid(tmp_path / "two")])
    assert launched.stdout.count("cells; results in") == 1
    cells = sorted(path.name for path in (tmp_path / "one" / "cells").iterdir())
    assert cells == ["full-seed0", "srformer-s16-seed0"]
    for cell in cells:
        one, two = (tmp_path / run / "cells" / cell / "test_predictions.jsonl" for run in ("one", "two"))
        assert two.read_bytes() == one.read_bytes(), cell
        assert json.loads((tmp_path / "two" / "cells" / cell / "test_metrics.json").read_text())["num_processes"] == 2
    single, double = (json.loads((tmp_path / run / "results.json").read_text()) for run in ("one", "two"))
    assert without_times(double) == without_times(single)
