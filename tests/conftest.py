"""Suite-wide settings.

Under pytest-xdist (``python -m pytest -n 2``, the README's test command) each worker process runs one
test at a time; with torch's default of one intra-op thread per core, two workers on a 2-core machine
would oversubscribe it, so each worker uses a single thread (the tests' tiny tensors gain nothing
from more).
"""

from __future__ import annotations

import os

import pytest
import torch

from srformer.attention import step_choice

if os.environ.get("PYTEST_XDIST_WORKER"):
    torch.set_num_threads(1)


@pytest.fixture
def one_thread():
    """One intra-op thread in this process, as in the subprocesses the tests launch (OMP_NUM_THREADS=1): the same
    kernels run in both, and small models run much faster on a busy 2-core machine."""
    threads = torch.get_num_threads()
    torch.set_num_threads(1)
    yield
    torch.set_num_threads(threads)


@pytest.fixture(params=step_choice.STEP_KINDS)
def each_step(request: pytest.FixtureRequest, monkeypatch: pytest.MonkeyPatch) -> str:
    """Runs the test once with each decoder step of ``knn``, ``block-topk`` and ``quest`` forced on every device
    (:data:`srformer.attention.step_choice.STEP_OVERRIDE`: the CPU step and the accelerator step); the step's
    name."""
    monkeypatch.setattr(step_choice, "STEP_OVERRIDE", request.param)
    return request.param
