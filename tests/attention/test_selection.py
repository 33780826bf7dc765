"""``top_positions`` (the CPU steps) and ``ranked_top`` (the accelerator steps): the ``width`` best positions with
ties settled by position, against a stable sort."""

from __future__ import annotations

from unittest.mock import patch

import pytest
import torch
from hypothesis import given, settings
from hypothesis import strategies as st

from srformer.attention.selection import (
    GROUPED_TOPK_WIDTH,
    ORDER_FLOOR,
    grouped_topk,
    position_order,
    ranked_top,
    top_positions,
)


def _by_sort(scores: torch.Tensor, allowed: torch.Tensor, width: int) -> torch.Tensor:
    """Reference: a stable descending sort (allowed first, ties by position), its first ``width``, ascending."""
    lowest = torch.finfo(scores.dtype).min
    clean = torch.nan_to_num(scores, nan=lowest, posinf=torch.finfo(scores.dtype).max, neginf=lowest)
    key = torch.where(allowed.expand_as(clean), clean.double(), float("-inf"))
    order = key.sort(dim=-1, descending=True, stable=True).indices[..., :width]
    return order.sort(dim=-1).values


@settings(max_examples=60, deadline=None)
@given(rows=st.integers(1, 4), n=st.integers(1, 40), data=st.data())
def test_matches_a_stable_sort_with_ties_and_disallowed_positions(rows, n, data):
    width = data.draw(st.integers(0, n))
    levels = data.draw(st.lists(st.sampled_from([-1.0, 0.0, 0.5, 2.0, float("nan"), float("inf"), float("-inf")]),
                                min_size=rows * n, max_size=rows * n))  # few distinct values: many ties
    scores = torch.tensor(levels, dtype=torch.float32).view(rows, n)
    allowed = torch.tensor(data.draw(st.lists(st.booleans(), min_size=n, max_size=n)))
    expected = _by_sort(scores, allowed, width)
    chosen = top_positions(scores, allowed, width)
    assert chosen.shape == (rows, width) and chosen.dtype == torch.long
    assert torch.equal(chosen, expected)
    with patch("torch.compiler.is_compiling", return_value=True):  # the path without the host-side tie check
        assert torch.equal(top_positions(scores, allowed, width), expected)


def test_allowed_positions_come_first_and_ties_go_to_the_earlier_position():
    scores = torch.tensor([[1.0, 3.0, 3.0, 3.0, 9.0]])
    allowed = torch.tensor([True, True, True, True, False])
    assert top_positions(scores, allowed, 2).tolist() == [[1, 2]]  # 9.0 is not allowed; the tie goes to 1 and 2
    assert top_positions(scores, allowed, 5).tolist() == [[0, 1, 2, 3, 4]]  # more than allowed: all, ascending
    assert top_positions(scores, allowed, 0).shape == (1, 0)


def _ranked_by_sort(scores: torch.Tensor, allowed: torch.Tensor, width: int, first: torch.Tensor) -> set[tuple]:
    """Reference of ``ranked_top``: ``first`` positions, then allowed ones by a stable descending sort, as a set of
    (row, position); the positions not allowed that fill a row may be any, so they are left out."""
    lowest = torch.finfo(scores.dtype).min
    clean = torch.nan_to_num(scores, nan=lowest, posinf=torch.finfo(scores.dtype).max, neginf=lowest).double()
    key = torch.where(allowed, clean, float("-inf")).masked_fill(first, float("inf"))
    order = key.sort(dim=-1, descending=True, stable=True).indices[..., :width]
    kept = torch.gather(key, -1, order) > float("-inf")
    return {(row, int(p)) for row in range(scores.shape[0]) for p, k in zip(order[row], kept[row], strict=True) if k}


@settings(max_examples=80, deadline=None)
@given(rows=st.integers(1, 4), n=st.integers(1, 40), dtype=st.sampled_from([torch.float32, torch.float64,
                                                                            torch.bfloat16]), data=st.data())
def test_ranked_top_orders_by_score_then_position_with_the_first_before(rows, n, dtype, data):
    """An accelerator step's selection (order keys from float32 or bfloat16 scores, the tie pass in float64)
    against a stable sort: ties among few distinct values, NaN and infinities, zeros of both signs, the smallest
    float32 numbers (subnormal, next to 0), the largest; positions not allowed after all others, ``first``
    positions before all."""
    width = data.draw(st.integers(1, n))
    tiny = torch.finfo(torch.float32).tiny
    levels = [-1.0, 0.0, -0.0, 0.5, 2.0, 3e38, -3e38, tiny, -tiny, 1e-45, -1e-45, 2 * tiny, float("nan"),
              float("inf"), float("-inf")]
    values = data.draw(st.lists(st.sampled_from(levels), min_size=rows * n, max_size=rows * n))
    scores = torch.tensor(values, dtype=dtype).view(rows, n)
    allowed = torch.tensor(data.draw(st.lists(st.booleans(), min_size=rows * n, max_size=rows * n))).view(rows, n)
    first = torch.zeros(rows, n, dtype=torch.bool)
    first[:, data.draw(st.permutations(range(n)))[: data.draw(st.integers(0, width))]] = True
    chosen = ranked_top(scores, position_order(allowed), width, first=first)
    assert chosen.shape == (rows, width) and chosen.dtype == torch.long
    found = {(row, int(p)) for row in range(rows) for p in chosen[row]}
    assert len(found) == rows * width  # distinct within each row
    assert _ranked_by_sort(scores, allowed, width, first) <= found


@settings(max_examples=40, deadline=None)
@given(rows=st.integers(1, 3), n=st.integers(1, 40), data=st.data())
def test_ranked_top_chooses_the_positions_top_positions_chooses(rows, n, data):
    """Where at least ``width`` positions are allowed, the two selections are the same set, in float32 and float64."""
    width = data.draw(st.integers(1, n))
    levels = data.draw(st.lists(st.sampled_from([-1.0, 0.0, 0.5, 2.0, float("nan"), float("inf")]),
                                min_size=rows * n, max_size=rows * n))
    allowed = torch.ones(rows, n, dtype=torch.bool)
    allowed[:, data.draw(st.permutations(range(n)))[: n - width]] = False
    for dtype in (torch.float32, torch.float64):
        scores = torch.tensor(levels, dtype=dtype).view(rows, n)
        chosen = ranked_top(scores, position_order(allowed), width).sort(dim=-1).values
        assert torch.equal(chosen, top_positions(scores, allowed, width))


def test_order_keys_keep_float32_scores_apart_and_ties_in_position_order():
    """Distinct float32 (and bfloat16) scores one unit in the last place apart keep their order whatever the
    positions (the position term is below half a unit), down to the subnormals and at the largest numbers; equal
    ones go to the earlier position, over 2^16 positions."""
    n = 1 << 16
    for dtype in (torch.float32, torch.bfloat16):
        for value in [1.0, -1.0, 3e38, -3e38, torch.finfo(torch.float32).tiny, 1e-45, 0.0, -0.0, 1.5e-7]:
            base = torch.tensor(value, dtype=dtype)
            upper = torch.nextafter(base, torch.tensor(float("inf"), dtype=dtype))
            scores = torch.full((n,), float(base), dtype=dtype)
            scores[-1] = upper  # the higher score at the last position: first, before the tied earlier ones
            chosen = ranked_top(scores, position_order(torch.ones(n, dtype=torch.bool)), 3)
            assert sorted(chosen.tolist()) == [0, 1, n - 1], (dtype, value)


def test_position_order_refuses_more_positions_than_its_keys_keep_apart():
    allowed = torch.ones(1, dtype=torch.bool).expand(1 << 25)
    with pytest.raises(ValueError, match="At most 2\\*\\*25 - 1 positions"):
        position_order(allowed)


def test_every_position_term_is_below_zero_and_the_first_one_step_below():
    """A floor of ``+inf`` turns a key into ``-inf`` only where the position term is below 0: the first one too."""
    for n in (1, 2, 3, 1000, 1024):
        order = position_order(torch.ones(n, dtype=torch.bool))
        assert bool((order < 0).all()) and order[0] == -(2.0 ** -(25 + n.bit_length()))


@settings(max_examples=40, deadline=None)
@given(rows=st.integers(1, 3), n=st.integers(1, 30), dtype=st.sampled_from([torch.float32, torch.float64,
                                                                            torch.bfloat16]), data=st.data())
def test_a_floor_of_plus_infinity_ranks_last_as_an_order_of_minus_infinity_does(rows, n, dtype, data):
    """``floor`` (the group leaf step's groups left out): ``+inf`` at a position chooses what an order of ``-inf``
    there chooses, positions with an order of ``+inf`` still first, in float32, bfloat16 and float64 (the tie
    pass); the others keep their ranking (ties to the earlier position)."""
    width = data.draw(st.integers(1, n))
    values = data.draw(st.lists(st.sampled_from([-1.0, 0.0, 0.5, 2.0, 3e38, -3e38]), min_size=rows * n,
                                max_size=rows * n))
    scores = torch.tensor(values, dtype=dtype).view(rows, n)

    def mask() -> torch.Tensor:
        return torch.tensor(data.draw(st.lists(st.booleans(), min_size=rows * n, max_size=rows * n))).view(rows, n)

    order = position_order(mask()).masked_fill(mask(), float("inf"))
    out = mask()
    floor = torch.full((rows, n), ORDER_FLOOR).masked_fill(out, float("inf"))
    by_floor = ranked_top(scores, order, width, finite=True, floor=floor)
    by_order = ranked_top(scores, order.masked_fill(out & (order < float("inf")), float("-inf")), width, finite=True)
    assert torch.equal(by_floor.sort(dim=-1).values, by_order.sort(dim=-1).values)


@pytest.mark.parametrize("dtype", [torch.float32, torch.bfloat16])
def test_ranked_top_of_finite_scores_is_the_same_without_its_nan_pass(dtype):
    """``finite=True`` skips the ``nan_to_num`` that only NaN and infinite scores need: for finite scores (ties
    included) the same positions in the same order."""
    generator = torch.Generator().manual_seed(3)
    scores = torch.randint(-4, 5, (3, 2, 50), generator=generator).to(dtype)  # many ties
    order = position_order(torch.rand(3, 1, 50, generator=generator) > 0.2)
    first = torch.arange(50) < 4
    for kwargs in ({}, {"first": first}):
        torch.testing.assert_close(ranked_top(scores, order, 9, **kwargs, finite=True),
                                   ranked_top(scores, order, 9, **kwargs), rtol=0, atol=0)


@settings(max_examples=40, deadline=None)
@given(rows=st.integers(1, 3), n=st.integers(1, 30), dtype=st.sampled_from([torch.float32, torch.float64,
                                                                            torch.bfloat16]), data=st.data())
def test_an_order_term_of_plus_infinity_ranks_first_as_first_does(rows, n, dtype, data):
    """``+inf`` in ``order`` at finite scores (the group leaf step's segment) chooses the same positions as the same
    positions passed as ``first``, in float32, bfloat16 and float64 (the tie pass), with positions not allowed."""
    width = data.draw(st.integers(1, n))
    values = data.draw(st.lists(st.sampled_from([-1.0, 0.0, 0.5, 2.0, 3e38, -3e38]), min_size=rows * n,
                                max_size=rows * n))
    scores = torch.tensor(values, dtype=dtype).view(rows, n)
    allowed = torch.tensor(data.draw(st.lists(st.booleans(), min_size=rows * n, max_size=rows * n))).view(rows, n)
    first = torch.zeros(rows, n, dtype=torch.bool)
    first[:, data.draw(st.permutations(range(n)))[: data.draw(st.integers(0, width))]] = True
    order = position_order(allowed)
    by_order = ranked_top(scores, order.masked_fill(first, float("inf")), width, finite=True)
    by_first = ranked_top(scores, order, width, first=first, finite=True)
    assert torch.equal(by_order.sort(dim=-1).values, by_first.sort(dim=-1).values)
    assert first.gather(-1, by_order).sum() == first.sum()


@pytest.mark.parametrize("length", [GROUPED_TOPK_WIDTH, GROUPED_TOPK_WIDTH + 1, 3000, 4096, 16384, 70001])
@pytest.mark.parametrize("k", [1, 64, 256, 600])
@pytest.mark.parametrize("dtype", [torch.float32, torch.bfloat16])
def test_grouped_topk_takes_the_largest_scores(length, k, dtype):
    """The scores at the indices returned are ``topk``'s (bfloat16: many ties at the ``k``-th), the indices distinct
    and in range, on rows short enough for one ``topk`` and rows cut into groups (padded or not, in two levels)."""
    scores = torch.randn(3, length, generator=torch.Generator().manual_seed(length + k)).to(dtype)
    indices = grouped_topk(scores, k)
    assert indices.shape == (3, k) and int(indices.min()) >= 0 and int(indices.max()) < length
    assert bool((indices.sort(dim=-1).values.diff(dim=-1) > 0).all())
    expected = torch.topk(scores, k, dim=-1).values
    assert torch.equal(scores.gather(1, indices).sort(dim=-1, descending=True).values, expected)


@pytest.mark.parametrize("length", [5000, 20000])
def test_grouped_topk_settles_ties_at_the_kth_score(length):
    """Three distinct scores, so that most of a row ties at the ``k``-th: still ``k`` distinct indices whose scores
    are ``topk``'s."""
    scores = torch.randint(0, 3, (2, length), generator=torch.Generator().manual_seed(0)).float()
    scores[0, :10] = 5.0  # a few above the tie
    indices = grouped_topk(scores, 200)
    assert bool((indices.sort(dim=-1).values.diff(dim=-1) > 0).all())
    assert torch.equal(scores.gather(1, indices).sort(dim=-1, descending=True).values,
                       torch.topk(scores, 200, dim=-1).values)


def test_grouped_topk_reads_long_rows_in_groups():
    """Every ``topk`` it makes on a long row reads at most :data:`GROUPED_TOPK_WIDTH` scores per row; a short row
    takes exactly one."""
    widths: list[int] = []
    topk = torch.topk

    def counted(scores, *args, **kwargs):
        widths.append(scores.shape[-1])
        return topk(scores, *args, **kwargs)

    with patch("srformer.attention.selection.torch.topk", side_effect=counted):
        grouped_topk(torch.randn(2, 16384), 256)
        assert len(widths) >= 2 and max(widths) <= GROUPED_TOPK_WIDTH
        widths.clear()
        grouped_topk(torch.randn(2, 900), 256)
        assert widths == [900]
