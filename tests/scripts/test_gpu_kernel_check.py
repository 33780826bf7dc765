"""scripts/gpu_kernel_check.py: the device check of the fused kernels, its comparisons run here on the CPU at small
sizes with the torch forms standing in for the kernels."""

from __future__ import annotations

import json

from tests.script_loading import script_module

ARGUMENTS = ["--device", "cpu", "--lengths", "70", "--batch", "2", "--heads", "2", "--width", "72",
             "--candidates", "20", "--chosen", "9", "--page", "4", "--pages", "5", "--channels", "6", "--read", "3",
             "--clusters", "40", "--coordinates", "5"]


def _torch_forms(monkeypatch, module):
    """The kernels replaced by their torch forms (the kernels themselves are tested under Triton's interpreter in
    ``tests/attention``)."""
    gathered, nearest = module.gathered, module.nearest_centres
    monkeypatch.setattr(module.kernels, "gathered_scores_triton", gathered.gathered_scores_torch)
    monkeypatch.setattr(module.kernels, "gathered_mix_triton", gathered.gathered_mix_torch)
    monkeypatch.setattr(module.kernels, "channel_sums_triton", gathered.channel_sums_torch)
    monkeypatch.setattr(nearest, "nearest_centres_triton", nearest.nearest_centres_torch)


def test_the_check_reports_every_kernel(monkeypatch, capsys):
    with script_module("gpu_kernel_check") as module:
        _torch_forms(monkeypatch, module)
        assert module.main(ARGUMENTS) == 0
    lines = [json.loads(line) for line in capsys.readouterr().out.splitlines()]
    products = [line for line in lines if "storage" in line]
    assert [line["storage"] for line in products] == ["torch.float32", "torch.bfloat16"]
    assert [line["ok"] for line in lines if "assignment_excess_over_bound" in line] == [True]
    for line in products:
        assert line["ok"] and line["worst_error_over_bound"] == {
            "gathered_scores": 0.0, "gathered_mix": 0.0, "channel_sums(bounds)": 0.0, "channel_sums(pages)": 0.0}


def test_a_kernel_that_errs_fails_the_check(monkeypatch):
    """The check compares: a kernel whose output is off by more than its bound makes ``main`` return 1."""
    with script_module("gpu_kernel_check") as module:
        _torch_forms(monkeypatch, module)
        gathered = module.gathered
        monkeypatch.setattr(module.kernels, "gathered_scores_triton",
                            lambda *args: gathered.gathered_scores_torch(*args) + 1e-3)
        assert module.main(ARGUMENTS) == 1
