"""The fused gathered products (:mod:`srformer.attention.gathered`): each against an independent float64 loop, one
operator call each, the byte count's rule, and their errors (the Triton kernels under Triton's interpreter:
``test_triton_kernels.py``)."""

from __future__ import annotations

import pytest
import torch

from srformer.attention.gathered import channel_sums, gathered_mix, gathered_scores
from srformer.benchmarks.byte_count import ByteCounter
from srformer.benchmarks.operator_count import OperatorCounter
from tests.tolerance import assert_exact


def _case(dtype: torch.dtype = torch.float64, seed: int = 0):
    """Two examples of three heads, 50 positions of 40 columns (the rows strided: a transposed copy seen back),
    13 candidates per head, 5 chosen; a table of 10 signed channels, 7 pages of 4 slots, 3 channels and 5 pages
    read."""
    generator = torch.Generator().manual_seed(seed)
    rows = torch.randn(50, 2, 40, generator=generator, dtype=dtype).transpose(0, 1)  # (B, k, D), not contiguous
    positions = torch.randint(0, 50, (6, 13), generator=generator)
    queries = torch.randn(6, 40, generator=generator, dtype=dtype)
    chosen = torch.stack([torch.randperm(13, generator=generator)[:5] for _ in range(6)])
    weights = torch.rand(6, 5, generator=generator, dtype=dtype)
    table = torch.randn(6, 10, 7, 4, generator=generator, dtype=dtype)
    channels = torch.stack([torch.randperm(10, generator=generator)[:3] for _ in range(6)])
    values = torch.rand(6, 3, generator=generator, dtype=dtype)
    pages = torch.stack([torch.randperm(7, generator=generator)[:5] for _ in range(6)])
    return rows, positions, queries, chosen, weights, table, channels, values, pages


def test_each_operator_equals_a_float64_loop():
    """Entry by entry, as the docstrings define them (example = row // heads), strided rows included."""
    rows, positions, queries, chosen, weights, table, channels, values, pages = _case()
    scores, mixed = gathered_scores(rows, positions, queries), gathered_mix(rows, positions, chosen, weights)
    every, some = channel_sums(table, channels, values), channel_sums(table, channels, values, pages)
    for i in range(6):
        example = i // 3
        for c in range(13):
            assert_exact(scores[i, c], (queries[i] * rows[example, positions[i, c]]).sum(), f"score {i} {c}")
        expected = sum(weights[i, s] * rows[example, positions[i, chosen[i, s]]] for s in range(5))
        assert_exact(mixed[i, 0], expected, f"mix {i}")
        for p in range(7):
            for slot in range(4):
                want = sum(values[i, c] * table[i, channels[i, c], p, slot] for c in range(3))
                assert_exact(every[i, p * 4 + slot], want, f"every page {i} {p} {slot}")
        for p in range(5):
            for slot in range(4):
                want = sum(values[i, c] * table[i, channels[i, c], pages[i, p], slot] for c in range(3))
                assert_exact(some[i, p * 4 + slot], want, f"pages read {i} {p} {slot}")
    assert scores.shape == (6, 13) and mixed.shape == (6, 1, 40) and every.shape == (6, 28) and some.shape == (6, 20)


def test_dtypes_the_rows_are_cast_and_the_channels_summed_in_float32():
    """bfloat16 rows scored and mixed in the queries' / weights' float32; a bfloat16 table summed in float32 (the
    parallel path's dtype), its entries and weights exactly representable there (no rounding but the sum's)."""
    rows, positions, queries, chosen, weights, table, channels, values, _ = _case(torch.float32)
    low = rows.to(torch.bfloat16)
    assert gathered_scores(low, positions, queries).dtype == torch.float32
    torch.testing.assert_close(gathered_scores(low, positions, queries),
                               gathered_scores(low.float(), positions, queries), rtol=0, atol=0)
    assert gathered_mix(low, positions, chosen, weights).dtype == torch.float32
    sums = channel_sums(table.to(torch.bfloat16), channels, values.to(torch.bfloat16))
    assert sums.dtype == torch.float32
    expected = channel_sums(table.to(torch.bfloat16).double(), channels, values.to(torch.bfloat16).double())
    # three products of bfloat16 numbers, each exact in float32, summed: two float32 roundings
    assert (sums.double() - expected).abs().max() <= 2 * 2.0**-24 * expected.abs().max() * 3


def test_each_is_one_operator_call_and_passes_the_custom_op_checks():
    """One call each in the operator count (what the step budgets count), and ``torch.library.opcheck``: schema,
    fake implementation (``torch.compile``'s shapes) and dispatch."""
    rows, positions, queries, chosen, weights, table, channels, values, pages = _case(torch.float32)
    calls = [
        (torch.ops.srformer.gathered_scores.default, (rows, positions, queries)),
        (torch.ops.srformer.gathered_mix.default, (rows, positions, chosen, weights)),
        (torch.ops.srformer.channel_sums.default, (table, channels, values, pages)),
        (torch.ops.srformer.channel_sums.default, (table, channels, values, None)),
    ]
    for operator, args in calls:
        with OperatorCounter() as counter:
            operator(*args)
        assert counter.total == 1, counter.calls
        torch.library.opcheck(operator, args)


def test_the_byte_count_counts_what_is_picked():
    """A fused call counts the rows or entries it picks, its other arguments and its output: not the whole table
    (``rows`` is 50 positions, 13 picked per head), and the picked part as persistent when the table is."""
    rows, positions, queries, chosen, weights, table, channels, values, pages = _case(torch.float32)
    row = 40 * 4
    with ByteCounter() as counter:
        gathered_scores(rows, positions, queries)
        gathered_mix(rows, positions, chosen, weights)
        channel_sums(table, channels, values, pages)
    scores = 6 * 13 * row + positions.nbytes + queries.nbytes + 6 * 13 * 4
    mix = 6 * 5 * row + positions.nbytes + chosen.nbytes + weights.nbytes + 6 * 40 * 4
    sums = 6 * 3 * 5 * 4 * 4 + channels.nbytes + values.nbytes + pages.nbytes + 6 * 20 * 4
    assert counter.eager["srformer.gathered_scores"] == scores
    assert counter.eager["srformer.gathered_mix"] == mix
    assert counter.eager["srformer.channel_sums"] == sums
    assert counter.persistent["srformer.gathered_scores"] == scores - 6 * 13 * 4  # all but the output
    assert 6 * 13 * row < rows.nbytes  # what makes the rule matter


@pytest.mark.parametrize("bad", ["rows", "positions", "queries", "chosen", "table", "channels", "pages"])
def test_bad_input_names_the_argument(bad):
    rows, positions, queries, chosen, weights, table, channels, values, pages = _case()
    with pytest.raises(ValueError, match=f"`{bad}`"):
        if bad == "rows":
            gathered_scores(rows[0], positions, queries)
        elif bad == "positions":
            gathered_scores(rows, positions.int(), queries)
        elif bad == "queries":
            gathered_scores(rows, positions, queries[:, :-1])
        elif bad == "chosen":
            gathered_mix(rows, positions, chosen, weights[:, :-1])
        elif bad == "table":
            channel_sums(table[0], channels, values)
        elif bad == "channels":
            channel_sums(table, channels[:-1], values[:-1])
        else:
            channel_sums(table, channels, values, pages[:-1])


def test_a_kernel_that_fails_leaves_the_torch_form_with_a_warning(monkeypatch):
    """A Triton kernel that raises (a device it cannot compile for) warns once and the torch form answers, then and
    for the rest of the process (:data:`~srformer.attention.gathered.USE_TRITON` turned off)."""
    from srformer.attention import gathered

    rows, positions, queries, *_ = _case()
    monkeypatch.setattr(gathered, "USE_TRITON", True)

    def failing(*args):
        raise RuntimeError("no kernel for this device")

    monkeypatch.setattr(gathered, "_use_triton", lambda tensor: gathered.USE_TRITON)
    with pytest.warns(UserWarning, match="torch indexing and products are used instead"):
        result = gathered.kernel_or_torch(failing, gathered.gathered_scores_torch, rows, positions, queries)
    assert torch.equal(result, gathered.gathered_scores_torch(rows, positions, queries))
    assert gathered.USE_TRITON is False
