"""The copy-reach record (:func:`srformer.evaluation.copy_reach.copy_reach`) as JSON, a Markdown table and a PNG."""

from __future__ import annotations

import os
from collections.abc import Mapping, Sequence
from pathlib import Path
from typing import Any

from srformer.evaluation.report import write_metrics_json

__all__ = ["reach_summary", "reach_table", "write_copy_reach"]


def _mean(rows: Sequence[Mapping[str, Any]]) -> float | None:
    """Token-weighted mean accuracy of ``rows`` (None when they score no token)."""
    tokens = sum(row["tokens"] for row in rows)
    return sum(row["accuracy"] * row["tokens"] for row in rows if row["tokens"]) / tokens if tokens else None


def reach_summary(rows: Sequence[Mapping[str, Any]], first_window_end: int | None) -> dict[str, float | None]:
    """The record's headline numbers from the per-start ``rows`` of :func:`copy_reach`.

    Args:
        rows: ``{"start", "tokens", "accuracy"}`` per passage start (tokens).
        first_window_end: the first token (position) the first encoder window does not keep, where the second
            window's kept part begins (None: the input is read as one window).

    Returns:
        ``{"at_start": accuracy of passages at token 0, "elsewhere": token-weighted accuracy of every later start,
        "beyond_first_window": the same over starts at or after ``first_window_end`` (None when read as one
        window)}``,
        each 0-1 or None.
    """
    first = [row for row in rows if row["start"] == 0]
    later = [row for row in rows if row["start"] > 0]
    beyond = [row for row in rows if first_window_end is not None and row["start"] >= first_window_end]
    return {"at_start": _mean(first), "elsewhere": _mean(later),
            "beyond_first_window": _mean(beyond) if first_window_end is not None else None}


def _pct(value: float | None) -> str:
    return "-" if value is None else f"{100 * value:.1f}%"


def reach_table(record: Mapping[str, Any]) -> str:
    """A Markdown table of ``record`` (:func:`write_copy_reach`): one row per passage start."""
    window = record["encoder_window"]
    lines = [
        f"Copy reach of `{record['checkpoint']}`: teacher-forced accuracy of continuing a passage of "
        f"{record['span']} tokens after its first {record['cue']} (given, not scored), on {record['documents']} "
        f"documents of at least {record['max_source_length']} tokens, "
        + (f"read in windows of {window} tokens (overlap {record['window_overlap']})." if window
           else "read whole."),
        "",
        "| passage start (tokens) | window keeping it | documents | scored tokens | accuracy |",
        "| ---: | ---: | ---: | ---: | ---: |",
    ]
    for row in record["rows"]:
        where = "-" if row.get("window") is None else str(row["window"])
        lines.append(f"| {row['start']} | {where} | {row['documents']} | {row['tokens']} | {_pct(row['accuracy'])} |")
    summary = record["summary"]
    lines += ["", f"At the start: {_pct(summary['at_start'])}; every later start: {_pct(summary['elsewhere'])}"
              + (f"; from the first window's end on: {_pct(summary['beyond_first_window'])}."
                 if summary["beyond_first_window"] is not None else ".")]
    return "\n".join(lines) + "\n"


def _plot(record: Mapping[str, Any], path: Path) -> None:
    """Accuracy against passage start, the window starts marked."""
    import matplotlib

    matplotlib.use("Agg")
    import matplotlib.pyplot as plt

    rows = [row for row in record["rows"] if row["accuracy"] is not None]
    figure, axis = plt.subplots(figsize=(7, 3.5))
    axis.plot([row["start"] for row in rows], [100 * row["accuracy"] for row in rows], marker="o")
    for start in record.get("window_keep_starts") or []:
        axis.axvline(start, color="grey", linewidth=0.6, linestyle=":")
    axis.set_xlabel("passage start (tokens); dotted: where each encoder window's kept part starts")
    axis.set_ylabel("continuation accuracy (%)")
    axis.set_ylim(0, 100)
    axis.set_title(f"copy reach: {Path(str(record['checkpoint'])).name}")
    figure.tight_layout()
    figure.savefig(path, dpi=120)
    plt.close(figure)


def write_copy_reach(output: str | os.PathLike[str], record: Mapping[str, Any]) -> dict[str, Path]:
    """Write ``record`` to ``output`` (JSON), and its table and plot beside it (same stem, ``.md`` and ``.png``).

    Args:
        output: the JSON path; its folder is created.
        record: ``checkpoint``, ``max_source_length``, ``encoder_window`` (tokens or None), ``window_overlap``,
            ``window_keep_starts`` (the first token each window keeps, or None), ``span``, ``cue``, ``documents``,
            ``rows`` (:func:`copy_reach`, each with ``window``: the index of the window keeping the start, or None)
            and ``summary`` (:func:`reach_summary`).

    Returns:
        ``{"json": path, "markdown": path, "plot": path}``.

    Raises:
        OSError: a path that cannot be written.
    """
    output = Path(output)
    write_metrics_json(output, record)
    markdown = output.with_suffix(".md")
    markdown.write_text(reach_table(record), encoding="utf-8")
    plot = output.with_suffix(".png")
    _plot(record, plot)
    return {"json": output, "markdown": markdown, "plot": plot}
