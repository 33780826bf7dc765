"""Which decoder step ``knn`` and ``block-topk`` run: by device, or as :data:`STEP_OVERRIDE` says."""

from __future__ import annotations

import pytest
import torch

from srformer.attention import step_choice
from srformer.attention.step_choice import step_kind


def test_the_cpu_runs_the_cpu_step_and_any_other_device_the_accelerator_step():
    assert step_choice.STEP_OVERRIDE is None
    assert step_kind(torch.device("cpu")) == "cpu"
    for device in ("cuda", "cuda:1", "mps", "xpu", "meta"):
        assert step_kind(torch.device(device)) == "accelerator", device


@pytest.mark.parametrize("kind", step_choice.STEP_KINDS)
def test_the_override_chooses_for_every_device(kind, monkeypatch):
    monkeypatch.setattr(step_choice, "STEP_OVERRIDE", kind)
    assert step_kind(torch.device("cpu")) == step_kind(torch.device("cuda")) == kind


def test_an_unknown_override_is_refused_with_the_choices(monkeypatch):
    monkeypatch.setattr(step_choice, "STEP_OVERRIDE", "lean")
    with pytest.raises(ValueError, match="`STEP_OVERRIDE` must be None or one of \\('accelerator', 'cpu'\\)"):
        step_kind(torch.device("cpu"))
