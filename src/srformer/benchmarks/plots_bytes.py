"""The bytes figure of ``srformer bench --sections operators`` (``bytes.png``): what a decoding step moves."""

from __future__ import annotations

from collections import defaultdict
from collections.abc import Iterable, Sequence
from pathlib import Path

import matplotlib

matplotlib.use("Agg")
import matplotlib.pyplot as plt

from srformer.benchmarks.plots import variant_series
from srformer.benchmarks.records import BenchRecord

#: Operators shown by name in the per-operator panel; the others are summed as "other".
_SHOWN_OPERATORS = 6


def plot_bytes(records: Iterable[BenchRecord], operator_rows: Sequence[dict], path: str | Path) -> Path:
    """Bytes per generated token on the accelerator's route beyond the decoder's own (``segmented``'s bytes at the
    same ``k``, when it was measured: its step reads one segment): persistent (left) and eager (middle) against
    encoder length ``k``, log-log, one line per variant and segment size, with ``full-sdpa``'s 0.10x and 0.05x marked;
    right, at the longest ``k``, each variant's persistent bytes per token by operator (``operator_rows``: the rows
    of ``bytes_by_operator.json``; the panel is left empty without them).

    Raises:
        ValueError: if there is no byte-count record.
    """
    chosen = [r for r in records if r.metric in ("persistent_bytes_per_token", "bytes_per_token")]
    if not chosen:
        raise ValueError("No byte-count records to plot.")
    own = {(r.metric, r.encoder_length): r.value for r in chosen if r.variant == "segmented"}
    fig, axes = plt.subplots(1, 3, figsize=(20, 5.5))
    colors: dict[str, str] = {}
    beyond = " beyond segmented's (the decoder's own)" if own else ""
    panels = (("persistent_bytes_per_token", f"persistent bytes per token{beyond}"),
              ("bytes_per_token", f"eager bytes per token{beyond}, intermediates included"))
    for ax, (metric, title) in zip(axes[:2], panels, strict=True):
        rows = [r for r in chosen if r.metric == metric]

        def above_own(r: BenchRecord, metric: str = metric) -> float:
            return (r.value - own.get((metric, r.encoder_length), 0.0)) / 2**20  # the decoder's own variant: 0

        for variant, label, color, xs, ys in variant_series(rows, colors, above_own):
            ax.plot(xs, ys, marker="o", markersize=4, color=color, label=label)
            if variant == "full-sdpa" and metric == "persistent_bytes_per_token":
                for share, style in ((0.10, "--"), (0.05, ":")):
                    ax.plot(xs, [share * y for y in ys], color="grey", linestyle=style, label=f"{share:.2f}x full-sdpa")
        ax.set_xscale("log", base=2)
        ax.set_yscale("log")
        lengths = sorted({r.encoder_length for r in rows})
        ax.set_xticks(lengths, [str(k) for k in lengths])
        ax.set_xlabel("encoder length k (tokens)")
        ax.set_ylabel("MiB per generated token")
        ax.set_title(title, fontsize=10)
        ax.grid(True, which="both", alpha=0.3)
    axes[1].legend(*axes[0].get_legend_handles_labels(), fontsize=8, loc="upper left")
    _by_operator(axes[2], operator_rows)
    fig.suptitle("Bytes a decoding step moves, accelerator route, batch 1 (compiled, a long-input step costs its "
                 "bytes)", fontsize=10)
    fig.tight_layout()
    fig.savefig(path, dpi=110)
    plt.close(fig)
    return Path(path)


def _by_operator(ax: plt.Axes, operator_rows: Sequence[dict]) -> None:
    rows = [r for r in operator_rows if r["route"] == "accelerator" and r["step"] == "per_token"]
    if not rows:
        ax.set_axis_off()
        return
    longest = max(r["encoder_length"] for r in rows)
    rows = [r for r in rows if r["encoder_length"] == longest]
    totals: dict[str, float] = defaultdict(float)
    for r in rows:
        totals[r["operator"]] += r["persistent_bytes"]
    shown = sorted(totals, key=lambda name: -totals[name])[:_SHOWN_OPERATORS]
    labels = list(dict.fromkeys(
        r["variant"] if r["segment_size"] is None else f"{r['variant']}, s={r['segment_size']}" for r in rows))
    left = [0.0] * len(labels)
    for position, operator in enumerate([*shown, "other"]):
        widths = []
        for label in labels:
            mine = [r for r in rows
                    if (r["variant"] if r["segment_size"] is None else f"{r['variant']}, s={r['segment_size']}")
                    == label]
            widths.append(sum(r["persistent_bytes"] for r in mine
                              if (r["operator"] == operator) or (operator == "other" and r["operator"] not in shown))
                          / 2**20)
        ax.barh(labels, widths, left=left, color=f"C{position % 10}", label=operator)
        left = [a + b for a, b in zip(left, widths, strict=True)]
    ax.set_xlabel(f"persistent MiB per generated token at k = {longest:,}")
    ax.set_title("by operator", fontsize=10)
    ax.legend(fontsize=7, loc="upper left", bbox_to_anchor=(1.01, 1.0))
    ax.grid(True, axis="x", alpha=0.3)
