"""`srformer`'s entry point destroys a process group the command joined, so a launched worker does not leave a gloo
group to the interpreter's exit (which can abort a finished worker with ``terminate called without an active
exception``). A one-process gloo group stands in for a launch; each check runs in a fresh interpreter so no group
outlives it."""

from __future__ import annotations

import subprocess
import sys
from pathlib import Path

#: Joins a one-process gloo group, runs ``main(ARGV)`` and prints the exit status and whether a group is left.
_CHECK = """
import sys
import torch.distributed as dist
from srformer.cli.main import main

dist.init_process_group("gloo", init_method="file://{store}", rank=0, world_size=1)
status = main({argv!r})
print(status, dist.is_initialized())
"""


def run_check(tmp_path: Path, argv: list[str]) -> str:
    script = _CHECK.format(store=tmp_path / "store", argv=argv)
    completed = subprocess.run([sys.executable, "-c", script], capture_output=True, text=True, timeout=120)
    assert completed.returncode == 0, completed.stderr[-3000:]
    return completed.stdout.strip().splitlines()[-1]


def test_a_finished_command_leaves_no_process_group(tmp_path):
    data = tmp_path / "pairs.jsonl"
    rows = (f'{{"id": "d{i}", "document": "document {i}", "summary": "summary {i}"}}\n' for i in range(10))
    data.write_text("".join(rows))
    assert run_check(tmp_path, ["split", "--data", str(data), "--output-dir", str(tmp_path / "split")]) == "0 False"
    assert (tmp_path / "split").is_dir()


def test_a_refused_command_leaves_no_process_group(tmp_path):
    argv = ["split", "--data", str(tmp_path / "missing.jsonl"), "--output-dir", str(tmp_path / "o")]
    assert run_check(tmp_path, argv) == "2 False"


def test_without_a_process_group_the_check_imports_no_torch():
    script = "import sys; from srformer.cli.main import close_process_group; close_process_group(); " \
             "print('torch' in sys.modules)"
    completed = subprocess.run([sys.executable, "-c", script], capture_output=True, text=True, timeout=60)
    assert completed.stdout.strip() == "False", completed.stderr[-2000:]
