"""Probe outputs: ``results.md`` (one table per protocol) and PNG plots of recall accuracy against the
number of facts ``n`` and against the document length ``k``."""

from __future__ import annotations

from collections.abc import Mapping, Sequence
from pathlib import Path

import matplotlib

matplotlib.use("Agg")
import matplotlib.pyplot as plt

from srformer.config import setting_label


def _percent(value: float | None) -> str:
    return "-" if value is None else f"{100 * value:.1f}"


def _ratio(value: float | None) -> str:
    return "-" if value is None else f"{value:.2f}"


def markdown_table(records: Sequence[Mapping]) -> str:
    """One Markdown table row per record: accuracies in percent (token accuracy overall, on-segment,
    off-segment; exact match), off-segment gap recovered, chance, training seconds."""
    lines = [
        (
            "| task | n | k | s | variant | seed | token acc | on-seg acc | off-seg acc | exact match | "
            "gap recovered (off) | chance | train s |"
        ),
        "|---|---:|---:|---:|---|---:|---:|---:|---:|---:|---:|---:|---:|",
    ]
    for r in records:
        m = r["metrics"]
        gap = r.get("gap_recovered", {}).get("off_token_accuracy")
        lines.append(
            f"| {r['task']} | {r['n']} | {r['length']} | {r['segment_size'] or '-'} | "
            f"{setting_label(r['name'], r.get('settings'))} | {r['seed']} | "
            f"{_percent(m['token_accuracy'])} | {_percent(m['on_token_accuracy'])} | "
            f"{_percent(m['off_token_accuracy'])} | {_percent(m['exact_match'])} | {_ratio(gap)} | "
            f"{_percent(r['chance'])} | {r['train_seconds']:.0f} |"
        )
    return "\n".join(lines)


def _series(records: Sequence[Mapping], axis: str, fixed: Mapping) -> dict[str, list[tuple[int, float]]]:
    """Per variant label: sorted (axis value, mean off-segment accuracy over seeds) points."""
    points: dict[str, dict[int, list[float]]] = {}
    for r in records:
        if any(r[key] != value for key, value in fixed.items()):
            continue
        value = r["metrics"]["off_token_accuracy"]
        if value is None:
            continue
        name = setting_label(r["name"], r.get("settings"))
        label = name if r["segment_size"] is None else f"{name} s={r['segment_size']}"
        points.setdefault(label, {}).setdefault(r[axis], []).append(value)
    return {label: sorted((x, sum(v) / len(v)) for x, v in by_x.items()) for label, by_x in points.items()}


def plot_recall(records: Sequence[Mapping], path: str | Path, *, axis: str, fixed: Mapping, title: str) -> Path:
    """Off-segment token accuracy (%) of ``recall`` against ``axis`` (``"n"`` or ``"length"``), one line per
    variant, one panel per protocol; records are filtered by ``fixed`` (e.g. ``{"length": 512}``)."""
    path = Path(path)
    protocols = sorted({r["protocol"] for r in records})
    fig, axes = plt.subplots(1, max(1, len(protocols)), figsize=(6 * max(1, len(protocols)), 4.5), squeeze=False)
    for ax, protocol in zip(axes[0], protocols, strict=False):
        recall = [r for r in records if r["task"] == "recall" and r["protocol"] == protocol]
        for label, points in _series(recall, axis, fixed).items():
            ax.plot([x for x, _ in points], [100 * y for _, y in points], marker="o", label=label)
        chance = next((r["chance"] for r in recall), None)
        if chance is not None:
            ax.axhline(100 * chance, color="grey", linestyle=":", label="chance")
        if axis == "n":
            ax.set_xscale("log", base=2)
        ax.set_xlabel("facts n" if axis == "n" else "document length k (tokens)")
        ax.set_ylabel("off-segment token accuracy (%)")
        ax.set_ylim(0, 102)
        ax.set_title(f"{title} ({protocol})")
        ax.legend(fontsize=7)
    fig.tight_layout()
    fig.savefig(path, dpi=110)
    plt.close(fig)
    return path


def write_report(payload: Mapping, output: str | Path) -> list[Path]:
    """Write ``results.md``, ``recall_vs_n.png`` and ``recall_vs_length.png`` into ``output``.

    Returns:
        The written paths.
    """
    output = Path(output)
    records = payload["records"]
    settings = payload["settings"]
    parts = [
        "# Long-range probe (synthetic diagnostics)",
        "",
        (
            "Synthetic tasks with their own vocabulary; accuracies in % on scored target positions of held-out "
            "examples (teacher-forced argmax: the decoder is given the true target prefix, so recall's query "
            "keys). On/off-segment: whether the document positions a target token needs lie "
            "in the segment i(t) that segmented attention reads at that decoder step. Gap recovered = "
            "(variant - segmented) / (full - segmented) of off-segment accuracy, same protocol, problem, s and seed."
        ),
        "",
    ]
    for protocol in ("scratch", "convert"):
        rows = [r for r in records if r["protocol"] == protocol]
        if rows:
            parts += [f"## Protocol: {protocol}", "", markdown_table(rows), ""]
    parts.append(f"Grid wall time: {payload.get('seconds', 0.0):.0f} s (cells found finished are not re-timed).")
    (output / "results.md").write_text("\n".join(parts) + "\n")
    written = [output / "results.md"]
    recall = [r for r in records if r["task"] == "recall"]
    if recall:
        length = max(settings["lengths"])
        size = settings["size"] if settings["size"] in settings["recall_sizes"] else settings["recall_sizes"][0]
        written.append(plot_recall(records, output / "recall_vs_n.png", axis="n", fixed={"length": length},
                                   title=f"recall, k={length}"))
        written.append(plot_recall(records, output / "recall_vs_length.png", axis="length", fixed={"n": size},
                                   title=f"recall, n={size}"))
    return written
