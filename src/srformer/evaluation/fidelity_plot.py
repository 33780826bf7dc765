"""The plot of ``srformer fidelity``: each mechanism's perplexity of the references as a multiple of the reference
mechanism's, against the share of positions whose next-token argmax agrees with it (matplotlib PNG, no display)."""

from __future__ import annotations

from collections.abc import Mapping
from pathlib import Path
from typing import Any

import matplotlib

matplotlib.use("Agg")
import matplotlib.pyplot as plt  # noqa: E402

__all__ = ["plot_fidelity"]


def plot_fidelity(summary: Mapping[str, Mapping[str, Any]], reference: str, path: str | Path) -> Path:
    """Write one point per mechanism: x = perplexity × the reference's (log scale), y = agreement with the reference's
    argmax in %, with the mechanism's name (mechanisms at the same point, to 4 digits, share one label); the
    reference sits at (1, 100).

    Args:
        summary: :func:`~srformer.evaluation.fidelity.fidelity_summary` (``perplexity_ratio`` and ``agreement`` per
            mechanism).
        reference: the reference mechanism's name (for the axis labels).
        path: where to write the PNG.

    Returns:
        The PNG path.
    """
    path = Path(path)
    path.parent.mkdir(parents=True, exist_ok=True)
    fig, ax = plt.subplots(figsize=(7, 4.5))
    points: dict[tuple[float, float], list[str]] = {}
    for name, row in summary.items():
        point = (round(float(row["perplexity_ratio"]), 4), round(100.0 * float(row["agreement"]), 4))
        points.setdefault(point, []).append(name)
    for (x, y), names in points.items():
        ax.scatter([x], [y], color="C3" if reference in names else "C0")
        ax.annotate(", ".join(names), (x, y), textcoords="offset points", xytext=(5, 4), fontsize=9)
    ax.set_xscale("log")
    ax.set_xlabel(f"perplexity of the references, × {reference}'s (log scale)")
    ax.set_ylabel(f"next-token argmax agreeing with {reference}'s (%)")
    ax.set_ylim(0, 105)
    ax.grid(True, which="both", alpha=0.3)
    ax.set_title("Teacher-forced fidelity, each mechanism converted with 0 steps")
    fig.tight_layout()
    fig.savefig(path, dpi=120)
    plt.close(fig)
    return path
