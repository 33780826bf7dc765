"""``top_positions``: the ``width`` best positions with ties settled by position, against a stable sort."""

from __future__ import annotations

from unittest.mock import patch

import torch
from hypothesis import given, settings
from hypothesis import strategies as st

from srformer.attention.selection import top_positions


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
