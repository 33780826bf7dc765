"""Paper Table 1 counts, the Figure 5 reductions, and FlopCounterMode counts."""

from __future__ import annotations

import pytest
import torch

from srformer.benchmarks.flops import (
    attention_core_flops,
    count_flops,
    in_thousands,
    table1_computation,
    table1_memory,
)

PAPER = dict(q=128, k=1024, d=64, s=64)  # Table 1's CNN-DailyMail example


def test_table1_exact_counts_of_the_paper_example():
    assert [table1_computation(v, **PAPER) for v in ("full", "segmented", "srformer")] == [8388608, 524288, 4718592]
    assert [table1_memory(v, **PAPER) for v in ("full", "segmented", "srformer")] == [196608, 73728, 139264]


def test_table1_in_thousands_as_the_paper_prints_them():
    # Rounded to the nearest thousand every count is the paper's except SRformer's computation:
    # 4718.592K rounds to 4719, the paper prints 4718 (truncated). Documented in flops.py.
    assert [in_thousands(table1_computation(v, **PAPER)) for v in ("full", "segmented")] == [8389, 524]
    assert in_thousands(table1_computation("srformer", **PAPER)) == 4719
    assert table1_computation("srformer", **PAPER) // 1000 == 4718
    assert [in_thousands(table1_memory(v, **PAPER)) for v in ("full", "segmented", "srformer")] == [197, 74, 139]


def test_paper_reductions_sec_3_5_and_figure_5():
    # Sec. 3.5 / 4.4.1: "the theoretical reduction of computation is 43%, and that of memory complexity is 29%".
    computation = 1 - table1_computation("srformer", **PAPER) / table1_computation("full", **PAPER)
    memory = 1 - table1_memory("srformer", **PAPER) / table1_memory("full", **PAPER)
    assert int(100 * computation) == 43 and int(100 * memory) == 29
    # Fig. 5 (k = 8q, d = s = 64): "the reduction would be 93% compared to a transformer when q = 1024".
    big = dict(q=1024, k=8192, d=64, s=64)
    assert round(100 * (1 - table1_computation("srformer", **big) / table1_computation("full", **big))) == 93


def test_table1_segments_round_up_and_bad_input_raises():
    assert table1_memory("srformer", q=1, k=65, d=2, s=64) == 64 + 65 * 2 + 2 * 4
    with pytest.raises(ValueError):
        table1_computation("linear", **PAPER)
    with pytest.raises(ValueError):
        table1_memory("full", q=0, k=1, d=1, s=1)


def test_count_flops_counts_matrix_products():
    a, b = torch.randn(8, 16), torch.randn(16, 4)
    result, flops = count_flops(lambda: a @ b)
    assert result.shape == (8, 4) and flops == 2 * 8 * 16 * 4


def test_cpu_attention_kernel_is_counted():
    q, k, v = torch.randn(2, 3, 5, 8), torch.randn(2, 3, 7, 8), torch.randn(2, 3, 7, 8)
    _, flops = count_flops(lambda: torch.nn.functional.scaled_dot_product_attention(q, k, v))
    assert flops == 2 * (2 * 2 * 3 * 5 * 7 * 8)  # Q K^T and A V, 2 FLOPs per multiply-accumulate


def test_attention_core_counts_against_table1():
    small = dict(q=16, k=128, d=8, s=16)
    for mode in ("forward", "generation"):
        # full attention computes Q K^T and A V: twice Table 1's multiply-accumulates, 2 FLOPs each
        assert attention_core_flops("full", mode=mode, **small) == 4 * table1_computation("full", **small)
    segmented = attention_core_flops("segmented", mode="generation", **small)
    srformer = attention_core_flops("srformer", mode="generation", **small)
    assert segmented >= 4 * table1_computation("segmented", **small)
    assert srformer >= 2 * table1_computation("srformer", **small)
    with pytest.raises(ValueError):
        attention_core_flops("full", mode="backward", **small)
