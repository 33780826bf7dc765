"""Comparisons between the records of a finished probe grid: the gap recovered by each segmented variant.

:func:`add_gap_recovered` sets, on every record with a segment size, the fraction of the gap between ``segmented``
and ``full`` of the same protocol, problem, segment size and seed that it recovers
(:func:`~srformer.probe.metrics.gap_recovered`).
"""

from __future__ import annotations

from srformer.core import SEGMENT_FREE
from srformer.probe.metrics import gap_recovered


def _reference(records: list[dict], record: dict, name: str) -> dict | None:
    for other in records:
        if (other["name"] == name and other["protocol"] == record["protocol"] and other["task"] == record["task"]
                and other["n"] == record["n"] and other["length"] == record["length"]
                and other["seed"] == record["seed"]
                and (name in SEGMENT_FREE or other["segment_size"] == record["segment_size"])):
            return other
    return None


def add_gap_recovered(records: list[dict]) -> None:
    """Add ``gap_recovered`` (token accuracy, overall and off-segment) to every segmented record, against
    ``segmented`` and ``full`` of the same protocol, problem, segment size and seed (in place)."""
    for record in records:
        record["gap_recovered"] = {}
        if record["segment_size"] is None:
            continue
        segmented = _reference(records, record, "segmented")
        full = next((r for r in records if r["name"] == "full" and r["protocol"] == record["protocol"]
                     and r["task"] == record["task"] and r["n"] == record["n"] and r["length"] == record["length"]
                     and r["seed"] == record["seed"]), None)
        if segmented is None or full is None:
            continue
        for key in ("token_accuracy", "off_token_accuracy"):
            record["gap_recovered"][key] = gap_recovered(
                record["metrics"][key], segmented["metrics"][key], full["metrics"][key]
            )
