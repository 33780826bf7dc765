"""scripts/loki_found_share.py: the share of the exact top 32 keys the paged selection finds, on recorded calls."""

from __future__ import annotations

import pytest
import torch

from tests.script_loading import script_module


def _recorded(length: int, seed: int = 0) -> list[tuple[torch.Tensor, ...]]:
    """One call's (queries, keys, key_valid): 2 heads of 32, 3 queries, the last 5 positions padded."""
    generator = torch.Generator().manual_seed(seed)
    queries = torch.randn(1, 2, 3, 32, generator=generator)
    keys = torch.randn(1, 2, length, 32, generator=generator)
    valid = torch.ones(1, length, dtype=torch.bool)
    valid[:, -5:] = False
    return [(queries, keys, valid)]


def test_every_key_a_candidate_finds_the_exact_top_32():
    """Pages hold every key below 4,096 positions: with as many candidates as keys the selection is exact."""
    with script_module("loki_found_share") as module:
        shares = module.found_share(_recorded(600), [(600, None), (600, 24)])
    for value in shares.values():
        assert value["found_percent"] == pytest.approx(100.0) and value["mass_percent"] == pytest.approx(100.0)
        assert value["queries"] == 6


def test_fewer_candidates_find_less_and_more_channels_find_more():
    """Random keys (no low-rank structure): 40 candidates ranked on 12 of 24 channels miss some of the exact top
    32; ranked on all 24 they miss fewer."""
    with script_module("loki_found_share") as module:
        shares = module.found_share(_recorded(2000, seed=1), [(40, None), (40, 24)])
        narrow, wide = shares["C=40, r'=12"], shares["C=40, r'=24"]
    assert narrow["found_percent"] < wide["found_percent"] < 100.0
    assert 0 < narrow["mass_percent"] <= 100.0


def test_settings_are_parsed_and_checked():
    with script_module("loki_found_share") as module:
        assert module._settings(["256", "64:24"]) == [(256, None), (64, 24)]
        with pytest.raises(SystemExit, match="--settings"):
            module._settings(["64:x"])
