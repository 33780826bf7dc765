"""Fixed train/validation/test splits of one file, by a stable hash of each example's id.

A corpus published as one file (no official split) needs a split that is the same on every
machine, whatever the file order, Python version or ``PYTHONHASHSEED``. :func:`split_by_id` maps
each id to a number ``u`` in ``[0, 1)``: the first 8 bytes of ``SHA-256(id as UTF-8)`` read as a
big-endian unsigned integer, divided by ``2**64``. The example goes to the first part whose
cumulative fraction exceeds ``u``. So:

* the split depends only on the ids and the fractions (not on order, not on other examples);
  adding or removing examples never moves the others between parts;
* part sizes follow the fractions up to sampling noise (binomial: for ``n`` examples and
  fraction ``f`` the standard deviation of the count is ``sqrt(n f (1 - f))``), not exactly.

The spec string ``"train=0.8,validation=0.1,test=0.1"`` is what ``srformer split`` and the
``--split-by-id`` option of ``srformer train/evaluate/compare`` take (:func:`parse_split_spec`).
"""

from __future__ import annotations

import hashlib
import json
import math
import os
from collections.abc import Mapping, Sequence
from pathlib import Path

from srformer.data.pairs import SummaryPair

_SPEC_EXAMPLE = "train=0.8,validation=0.1,test=0.1"


def parse_split_spec(spec: str) -> dict[str, float]:
    """Parse ``"name=fraction,name=fraction,..."`` into an ordered ``{name: fraction}``.

    Args:
        spec: comma-separated ``name=fraction`` items; names are non-empty and distinct, fractions
            are positive numbers summing to 1 (within 1e-9, the rounding of decimal fractions
            such as 0.8 + 0.1 + 0.1 in binary floating point).

    Returns:
        The fractions in the order given (the order of the cumulative intervals in ``[0, 1)``).

    Raises:
        ValueError: an item without ``=``, an empty or repeated name, a fraction that is not a
            positive finite number, or fractions that do not sum to 1. The message shows the
            expected form.
    """
    fractions: dict[str, float] = {}
    items = [item.strip() for item in spec.split(",")]
    for item in items:
        name, sep, value = item.partition("=")
        name = name.strip()
        if not sep or not name:
            raise ValueError(f"--split-by-id item {item!r} is not name=fraction; expected e.g. {_SPEC_EXAMPLE!r}")
        if name in fractions:
            raise ValueError(f"--split-by-id names {name!r} twice; give each part once, e.g. {_SPEC_EXAMPLE!r}")
        try:
            fraction = float(value)
        except ValueError:
            raise ValueError(
                f"--split-by-id fraction {value.strip()!r} of {name!r} is not a number; expected e.g. {_SPEC_EXAMPLE!r}"
            ) from None
        if not math.isfinite(fraction) or fraction <= 0:
            raise ValueError(f"--split-by-id fraction of {name!r} must be a positive number, got {value.strip()!r}")
        fractions[name] = fraction
    total = sum(fractions.values())
    if abs(total - 1.0) > 1e-9:
        raise ValueError(
            f"--split-by-id fractions sum to {total:g}, not 1 ({spec!r}); e.g. {_SPEC_EXAMPLE!r}"
        )
    return fractions


def id_position(example_id: str) -> float:
    """The id's position ``u`` in ``[0, 1)``: first 8 bytes of SHA-256 of its UTF-8 bytes / 2**64."""
    digest = hashlib.sha256(example_id.encode("utf-8")).digest()
    return int.from_bytes(digest[:8], "big") / 2.0**64


def split_by_id(pairs: Sequence[SummaryPair], fractions: Mapping[str, float]) -> dict[str, list[SummaryPair]]:
    """Split ``pairs`` into parts by the stable hash of their ids (module docstring).

    Args:
        pairs: examples, each with a non-empty, unique ``id``.
        fractions: ``{part name: fraction}`` as :func:`parse_split_spec` returns (positive, sum 1).

    Returns:
        ``{part name: pairs}`` for every part (possibly empty for tiny inputs), each in input order.

    Raises:
        ValueError: a pair without an id (``id`` None or empty; the message gives its 1-based
            position), a duplicated id (named, with both positions), or invalid fractions.
    """
    if not fractions or any(not math.isfinite(f) or f <= 0 for f in fractions.values()):
        raise ValueError(f"fractions must be positive, got {dict(fractions)!r}; e.g. {_SPEC_EXAMPLE!r}")
    if abs(sum(fractions.values()) - 1.0) > 1e-9:
        raise ValueError(f"fractions must sum to 1, got {dict(fractions)!r}; e.g. {_SPEC_EXAMPLE!r}")
    bounds = []
    cumulative = 0.0
    for name, fraction in fractions.items():
        cumulative += fraction
        bounds.append((cumulative, name))
    parts: dict[str, list[SummaryPair]] = {name: [] for name in fractions}
    seen: dict[str, int] = {}
    for position, pair in enumerate(pairs, start=1):
        if not pair.id:
            raise ValueError(
                f"example {position} has no id; splitting by id needs an 'id' field in every record "
                "(or split the file yourself and pass the parts as separate files)"
            )
        if pair.id in seen:
            raise ValueError(
                f"id {pair.id!r} appears twice (examples {seen[pair.id]} and {position}); ids must be unique "
                "to split by id"
            )
        seen[pair.id] = position
        u = id_position(pair.id)
        # The last bound is 1 up to rounding: anything at or above it goes to the last part.
        name = next((n for bound, n in bounds if u < bound), bounds[-1][1])
        parts[name].append(pair)
    return parts


def select_split(pairs: Sequence[SummaryPair], spec: str, part: str) -> list[SummaryPair]:
    """One part of :func:`split_by_id` for a spec string.

    Raises:
        ValueError: ``part`` is not a name of ``spec`` (the message lists them), or the errors
            of :func:`parse_split_spec` and :func:`split_by_id`.
    """
    fractions = parse_split_spec(spec)
    if part not in fractions:
        raise ValueError(f"split {part!r} is not in --split-by-id {spec!r}; choose one of {', '.join(fractions)}")
    return split_by_id(pairs, fractions)[part]


def write_split(parts: Mapping[str, Sequence[SummaryPair]], output_dir: str | os.PathLike[str]) -> dict[str, Path]:
    """Write each part as ``output_dir/<name>.jsonl`` with ``id``, ``document`` and ``summary`` fields.

    Returns:
        ``{part name: path written}``.

    Raises:
        FileExistsError: one of the files exists already (nothing is overwritten; none is written).
    """
    output = Path(output_dir)
    paths = {name: output / f"{name}.jsonl" for name in parts}
    existing = [str(p) for p in paths.values() if p.exists()]
    if existing:
        raise FileExistsError(f"{', '.join(existing)} exist already; remove them or choose another --output-dir")
    output.mkdir(parents=True, exist_ok=True)
    for name, part in parts.items():
        with paths[name].open("w", encoding="utf-8") as handle:
            for pair in part:
                record = {"id": pair.id, "document": pair.document, "summary": pair.summary}
                handle.write(json.dumps(record, ensure_ascii=False) + "\n")
    return paths
