"""Splitting one file by a stable hash of each example's id (srformer.data.split)."""

from __future__ import annotations

import hashlib
import random

import pytest

from srformer.data.pairs import SummaryPair
from srformer.data.split import id_position, parse_split_spec, select_split, split_by_id, write_split

SPEC = "train=0.8,validation=0.1,test=0.1"


def _pairs(n: int, prefix: str = "doc") -> list[SummaryPair]:
    return [SummaryPair(document=f"document {i}", summary=f"summary {i}", id=f"{prefix}-{i:05d}") for i in range(n)]


def test_parse_keeps_order_and_values():
    assert list(parse_split_spec(" train = 0.8 , validation=0.1,test=0.1")) == ["train", "validation", "test"]
    assert parse_split_spec("a=0.25,b=0.75") == {"a": 0.25, "b": 0.75}


@pytest.mark.parametrize(
    "spec,message",
    [
        ("train=0.8,test", "not name=fraction"),
        ("=0.5,test=0.5", "not name=fraction"),
        ("train=0.5,train=0.5", "twice"),
        ("train=abc,test=0.5", "not a number"),
        ("train=0,test=1", "positive"),
        ("train=-0.2,test=1.2", "positive"),
        ("train=nan,test=1", "positive"),
        ("train=0.8,test=0.1", "sum to 0.9"),
        ("train=0.8,test=0.3", "sum to 1.1"),
    ],
)
def test_parse_rejects_bad_specs(spec, message):
    with pytest.raises(ValueError, match=message):
        parse_split_spec(spec)


def test_id_position_is_sha256_prefix():
    # Independent recomputation: the first 16 hex digits of the SHA-256 hex digest, as a fraction of 16**16.
    for example_id in ("bbc-business-001", "ü-id", ""):
        expected = int(hashlib.sha256(example_id.encode("utf-8")).hexdigest()[:16], 16) / 16**16
        assert id_position(example_id) == expected
        assert 0.0 <= id_position(example_id) < 1.0


def test_split_is_a_partition_in_input_order():
    pairs = _pairs(500)
    parts = split_by_id(pairs, parse_split_spec(SPEC))
    assert list(parts) == ["train", "validation", "test"]
    ids = [p.id for part in parts.values() for p in part]
    assert sorted(ids) == sorted(p.id for p in pairs)  # every example once, no overlap
    order = {p.id: i for i, p in enumerate(pairs)}
    for part in parts.values():
        assert [order[p.id] for p in part] == sorted(order[p.id] for p in part)


def test_assignment_follows_the_cumulative_intervals():
    fractions = parse_split_spec(SPEC)
    for name, part in split_by_id(_pairs(300), fractions).items():
        low, high = {"train": (0.0, 0.8), "validation": (0.8, 0.9), "test": (0.9, 1.0)}[name]
        assert all(low <= id_position(p.id) < high for p in part)


def test_split_ignores_file_order_and_other_examples():
    pairs = _pairs(400)
    fractions = parse_split_spec(SPEC)
    reference = {name: {p.id for p in part} for name, part in split_by_id(pairs, fractions).items()}
    shuffled = pairs[:]
    random.Random(1).shuffle(shuffled)
    assert {name: {p.id for p in part} for name, part in split_by_id(shuffled, fractions).items()} == reference
    # A subset keeps each of its examples in the same part.
    subset = split_by_id(pairs[::3], fractions)
    for name, part in subset.items():
        assert {p.id for p in part} <= reference[name]


def test_proportions_within_binomial_noise():
    n = 20000
    fractions = parse_split_spec(SPEC)
    parts = split_by_id(_pairs(n), fractions)
    for name, fraction in fractions.items():
        # A hash behaves as a uniform draw: the count is Binomial(n, f); 5 standard deviations
        # (probability about 6e-7 per part for a uniform hash) bounds the deviation.
        sd = (n * fraction * (1 - fraction)) ** 0.5
        assert abs(len(parts[name]) - n * fraction) < 5 * sd


def test_missing_and_duplicate_ids_are_errors():
    pairs = _pairs(3)
    with pytest.raises(ValueError, match="example 2 has no id"):
        split_by_id([pairs[0], SummaryPair("d", "s", None), pairs[2]], {"a": 1.0})
    with pytest.raises(ValueError, match="example 1 has no id"):
        split_by_id([SummaryPair("d", "s", "")], {"a": 1.0})
    with pytest.raises(ValueError, match=r"'doc-00001' appears twice \(examples 2 and 4\)"):
        split_by_id([*pairs, pairs[1]], {"a": 1.0})


def test_select_split_names_the_parts():
    pairs = _pairs(50)
    assert select_split(pairs, SPEC, "test") == split_by_id(pairs, parse_split_spec(SPEC))["test"]
    with pytest.raises(ValueError, match="choose one of train, validation, test"):
        select_split(pairs, SPEC, "val")


def test_write_split_round_trips_and_never_overwrites(tmp_path):
    from srformer.data.pairs import load_pairs

    parts = split_by_id(_pairs(40), parse_split_spec(SPEC))
    paths = write_split(parts, tmp_path / "out")
    for name, path in paths.items():
        assert path.name == f"{name}.jsonl"
        assert (load_pairs(path) if parts[name] else []) == parts[name]
    with pytest.raises(FileExistsError, match="exist already"):
        write_split(parts, tmp_path / "out")
