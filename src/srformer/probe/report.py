"""Probe outputs: ``results.md`` (one table per protocol, and a "Recurrent term" table for cells with
diagnostics) and PNG plots of recall accuracy against the number of facts ``n`` and against the document length
``k``, and of the recurrent-term diagnostics against the training step."""

from __future__ import annotations

from collections.abc import Mapping, Sequence
from pathlib import Path

import matplotlib

matplotlib.use("Agg")
import matplotlib.pyplot as plt

from srformer.core import setting_label


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


def _number(value: float | None) -> str:
    return "-" if value is None else f"{value:.3g}"


def _scaled(fraction: float | None) -> str:
    """A fraction in percent with 3 significant digits (a rare firing, e.g. 0.0012%, stays visible)."""
    return "-" if fraction is None else _number(100 * fraction)


def recurrent_term_table(records: Sequence[Mapping]) -> str:
    """One Markdown row per (cell, recurrent layer) of the records that have ``diagnostics_eval``
    (:func:`srformer.probe.training.diagnose` on held-out examples after training): firing fraction and
    discarded input in percent, ``|O_R|/|O_S|``, the gradient norms reaching ``W``, leak and threshold, and
    the leak and threshold values; ``-`` where a term does not exist (ablations I and III)."""
    lines = [
        "| cell | layer | firing % | discarded input % | \\|O_R\\|/\\|O_S\\| | grad W | grad leak | grad threshold "
        "| leak | threshold |",
        "|---|---:|---:|---:|---:|---:|---:|---:|---:|---:|",
    ]
    for r in records:
        diagnostics = r.get("diagnostics_eval")
        if not diagnostics:
            continue
        for index, layer in enumerate(diagnostics["layers"]):
            lines.append(
                f"| {r['key']} | {index} | {_scaled(layer['firing_fraction'])} | "
                f"{_scaled(layer['discarded_input'])} | {_number(layer['recurrent_to_softmax'])} | "
                f"{_number(layer['grad_weight'])} | {_number(layer['grad_leak'])} | "
                f"{_number(layer['grad_threshold'])} | {_number(layer['leak'])} | {_number(layer['threshold'])} |"
            )
    return "\n".join(lines)


def _layer_mean(layers: Sequence[Mapping], key: str) -> float | None:
    values = [layer[key] for layer in layers if layer[key] is not None]
    return sum(values) / len(values) if values else None


def plot_recurrent_term(records: Sequence[Mapping], path: str | Path) -> Path:
    """Firing fraction (%) and ``|O_R|/|O_S|`` against the training step, averaged over a cell's recurrent
    layers (those where the number exists), one line per cell with ``diagnostics``."""
    path = Path(path)
    fig, axes = plt.subplots(1, 2, figsize=(12, 4.5), squeeze=False)
    panels = (("firing_fraction", 100.0, "RAF firing fraction (%)"), ("recurrent_to_softmax", 1.0, "|O_R| / |O_S|"))
    for ax, (key, factor, label) in zip(axes[0], panels, strict=True):
        for r in records:
            means = [(d["step"], _layer_mean(d["layers"], key)) for d in r.get("diagnostics") or []]
            points = [(x, y) for x, y in means if y is not None]
            if points:
                ax.plot([x for x, _ in points], [factor * y for _, y in points], marker=".", label=r["key"])
        ax.set_xlabel("training step")
        ax.set_ylabel(label)
        ax.set_title(f"{label} (mean over layers)")
        if ax.get_legend_handles_labels()[0]:
            ax.legend(fontsize=6)
    fig.tight_layout()
    fig.savefig(path, dpi=110)
    plt.close(fig)
    return path


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
    """Write ``results.md``, ``recall_vs_n.png`` and ``recall_vs_length.png`` into ``output``, and
    ``recurrent_term.png`` when some record has training-time ``diagnostics``.

    Returns:
        The written paths.
    """
    output = Path(output)
    records = payload["records"]
    settings = payload["settings"]
    wall = f"Grid wall time: {payload.get('seconds', 0.0):.0f} s (cells found finished are not re-timed)."
    (output / "results.md").write_text(results_markdown(records, wall))
    written = [output / "results.md"]
    recall = [r for r in records if r["task"] == "recall"]
    if recall:
        length = max(settings["lengths"])
        size = settings["size"] if settings["size"] in settings["recall_sizes"] else settings["recall_sizes"][0]
        written.append(plot_recall(records, output / "recall_vs_n.png", axis="n", fixed={"length": length},
                                   title=f"recall, k={length}"))
        written.append(plot_recall(records, output / "recall_vs_length.png", axis="length", fixed={"n": size},
                                   title=f"recall, n={size}"))
    if any(r.get("diagnostics") for r in records):
        written.append(plot_recurrent_term(records, output / "recurrent_term.png"))
    return written


def results_markdown(records: Sequence[Mapping], footer: str) -> str:
    """The text of ``results.md``: one table per protocol and, for cells with ``diagnostics_eval``, the recurrent
    term table, then ``footer`` (the grid's wall time, or where the cells were collected from)."""
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
    if any(r.get("diagnostics_eval") for r in records):
        parts += [
            "## Recurrent term",
            "",
            (
                "Measured after training on up to 64 held-out examples (one forward with autograd and one backward, "
                "no update). Firing %: RAF output entries != 0 at the segments the schedule visits; discarded input "
                "%: share of the energy of the RAF input W P_j in its negative entries, which the relu neuron drops; "
                "|O_R|/|O_S|: Frobenius norms over the batch before the two are added; grad: norms of the loss "
                "gradient reaching the RAF weight W, leak and threshold; '-': the term does not exist (ablation I "
                "has no O_S, ablation III no neuron). recurrent_term.png shows firing % and |O_R|/|O_S| during "
                "training."
            ),
            "",
            recurrent_term_table(records),
            "",
        ]
    parts.append(footer)
    return "\n".join(parts) + "\n"
