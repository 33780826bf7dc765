"""scripts/gpu_kernel_check.py: the device check of the fused kernels, run here on the CPU under Triton's
interpreter at small sizes (several programs per row, partly masked blocks)."""

from __future__ import annotations

import importlib.util
import json
import os
import subprocess
import sys
from pathlib import Path

import pytest

ROOT = Path(__file__).resolve().parents[2]


@pytest.mark.skipif(importlib.util.find_spec("triton") is None, reason="Triton is not installed")
def test_the_check_passes_on_the_interpreter_and_reports_every_kernel():
    command = [sys.executable, str(ROOT / "scripts" / "gpu_kernel_check.py"), "--device", "cpu", "--lengths", "70",
               "--batch", "2", "--heads", "2", "--width", "72", "--candidates", "20", "--chosen", "9", "--page", "4",
               "--pages", "5", "--channels", "6", "--read", "3", "--clusters", "40", "--coordinates", "5"]
    environment = {**os.environ, "TRITON_INTERPRET": "1", "PYTHONPATH": str(ROOT / "src"), "OMP_NUM_THREADS": "1"}
    result = subprocess.run(command, capture_output=True, text=True, env=environment, timeout=600)
    assert result.returncode == 0, result.stdout + result.stderr[-3000:]
    lines = [json.loads(line) for line in result.stdout.splitlines()]
    products = [line for line in lines if "storage" in line]
    assert [line["storage"] for line in products] == ["torch.float32", "torch.bfloat16"]
    assert [line["ok"] for line in lines if "assignment_excess_over_bound" in line] == [True]
    for line in products:
        assert line["ok"] and set(line["worst_error_over_bound"]) == {
            "gathered_scores", "gathered_mix", "channel_sums(bounds)", "channel_sums(pages)"}
        assert all(0 <= value <= 1 for value in line["worst_error_over_bound"].values())


def test_a_kernel_that_errs_fails_the_check(monkeypatch):
    """The check compares: a kernel whose output is off by more than its bound makes ``main`` return 1 (the torch
    forms stand in for the kernels here, one of them shifted)."""
    from tests.script_loading import script_module

    with script_module("gpu_kernel_check") as module:
        gathered = module.gathered
        monkeypatch.setattr(module.kernels, "gathered_scores_triton",
                            lambda *args: gathered.gathered_scores_torch(*args) + 1e-3)
        monkeypatch.setattr(module.kernels, "gathered_mix_triton", gathered.gathered_mix_torch)
        monkeypatch.setattr(module.kernels, "channel_sums_triton", gathered.channel_sums_torch)
        monkeypatch.setattr(module.nearest_centres, "nearest_centres_triton",
                            module.nearest_centres.nearest_centres_torch)
        arguments = ["--device", "cpu", "--lengths", "70", "--batch", "2", "--heads", "2", "--width", "72",
                     "--candidates", "20", "--chosen", "9", "--page", "4", "--pages", "5", "--channels", "6",
                     "--read", "3", "--clusters", "40", "--coordinates", "5"]
        assert module.main(arguments) == 1
