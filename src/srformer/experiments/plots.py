"""Plots of experiment results (matplotlib PNG, written without a display)."""

from __future__ import annotations

from collections.abc import Mapping, Sequence
from pathlib import Path

import matplotlib

matplotlib.use("Agg")
import matplotlib.pyplot as plt  # noqa: E402

ROUGE_LABELS = {"rouge1": "ROUGE-1", "rouge2": "ROUGE-2", "rougeL": "ROUGE-L", "rougeLsum": "ROUGE-Lsum"}


def plot_variant_comparison(rows: Sequence[Mapping], path: str | Path, *, title: str = "") -> Path:
    """Grouped bars of ROUGE (F1 x 100) per variant, and decoding time (seconds) per variant.

    Args:
        rows: one mapping per variant with ``variant``, the ROUGE keys and ``decode_seconds``.
        path: where to write the PNG.

    Returns:
        The PNG path.
    """
    path = Path(path)
    path.parent.mkdir(parents=True, exist_ok=True)
    variants = [str(r["variant"]) for r in rows]
    fig, (ax_rouge, ax_time) = plt.subplots(1, 2, figsize=(11, 4), gridspec_kw={"width_ratios": [3, 1]})
    width = 0.8 / len(variants)
    for i, row in enumerate(rows):
        xs = [k + i * width for k in range(len(ROUGE_LABELS))]
        ax_rouge.bar(xs, [row[key] for key in ROUGE_LABELS], width, label=variants[i])
    ax_rouge.set_xticks([k + 0.4 - width / 2 for k in range(len(ROUGE_LABELS))], list(ROUGE_LABELS.values()))
    ax_rouge.set_ylabel("F1 x 100")
    ax_rouge.legend()
    ax_rouge.set_title(title or "ROUGE per variant")
    ax_time.bar(variants, [row["decode_seconds"] for row in rows], color=["C0", "C1", "C2", "C3"][: len(rows)])
    ax_time.set_ylabel("decode time (s)")
    ax_time.set_title("generate() wall time")
    fig.tight_layout()
    fig.savefig(path, dpi=120)
    plt.close(fig)
    return path
