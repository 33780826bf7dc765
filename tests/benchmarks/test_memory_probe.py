"""srformer.benchmarks.memory_probe: the resident-set readings the CPU peak-memory measurements rest on."""

from __future__ import annotations

import platform

import pytest
import torch

from srformer.benchmarks.long_input import LONG_INPUT_CHILD_ENVIRONMENT
from srformer.benchmarks.memory_probe import return_free_memory, status_kib

pytestmark = pytest.mark.skipif(platform.system() != "Linux" or platform.libc_ver()[0] != "glibc"
                                or status_kib("VmRSS") is None, reason="glibc's malloc_trim and /proc/self/status")


def test_memory_malloc_holds_free_is_given_back_so_a_baseline_counts_what_is_in_use():
    """64 MiB of small tensors (below glibc's mmap threshold: heap memory, kept by malloc when freed) leave the
    resident set high after they are freed; given back, it drops by most of them."""
    return_free_memory()
    before = status_kib("VmRSS")
    blocks = [torch.ones(8192) for _ in range(2048)]  # 32 KiB each, touched
    held = status_kib("VmRSS")
    del blocks
    assert return_free_memory()
    after = status_kib("VmRSS")
    assert before is not None and held is not None and after is not None
    assert held - before >= 48 * 1024, (before, held)  # KiB: the blocks were resident
    assert held - after >= (held - before) // 2, (before, held, after)


def test_the_long_input_child_runs_under_the_default_allocator():
    """Its times are a user's: no pinned mmap threshold (which faults every large temporary in again per step)."""
    assert not any(name.startswith("MALLOC_") for name in LONG_INPUT_CHILD_ENVIRONMENT)
