"""Benchmark figures (matplotlib, Agg backend, PNG): per-step time vs k, and paper Figure 5."""

from __future__ import annotations

from collections.abc import Callable, Iterable, Iterator, Sequence
from pathlib import Path

import matplotlib

matplotlib.use("Agg")
import matplotlib.pyplot as plt
from matplotlib.ticker import FuncFormatter

from srformer.benchmarks.flops import TABLE1_VARIANTS, table1_computation, table1_memory
from srformer.benchmarks.records import BENCH_VARIANTS, CORE_VARIANT_NAMES, BenchRecord
from srformer.core import REGISTRY

#: Notes of the Figure 5 FlopCounterMode records start with this text.
FIGURE5_NOTE = "Figure 5:"

VARIANT_COLORS = {
    "full-sdpa": "black",
    "full-eager": "dimgray",
    "segmented": "tab:blue",
    "segmented-lean": "tab:cyan",
    "srformer": "tab:red",
    "srformer-lean": "tab:orange",
    "xl": "tab:purple",
    "longt5": "tab:green",
    "linear": "tab:brown",
    "window": "tab:olive",
    "strided": "tab:pink",
    "star": "gold",
    "fastformer": "tab:gray",
    "reformer": "darkred",
    "routing": "teal",
    "bigbird": "darkgreen",
    "compressive": "navy",
    "adaptive": "darkcyan",
    "bp": "sienna",
    "linformer": "darkgoldenrod",
    "performer": "olive",
    "compressed": "slateblue",
    "inducing": "crimson",
    "full": "black",
}
TABLE1_LABELS = {variant: REGISTRY[variant].table1_row for variant in TABLE1_VARIANTS}
CORE_NAMES = CORE_VARIANT_NAMES
_SEGMENT_STYLES = ("-", "--", ":", "-.")


def plot_step_time(records: Iterable[BenchRecord], path: str | Path, *, batch_size: int | None = None) -> Path:
    """Cross-attention time per decoder step (ms) vs encoder length k, log-log, one line per
    variant and segment size.

    Args:
        records: benchmark records; the eager-mode ones (``compiled`` False) with metric
            ``cross_attention_step_time`` are plotted.
        path: PNG path to write.
        batch_size: the batch size to plot (default: 8 if measured, else the largest measured).

    Returns:
        The PNG path.

    Raises:
        ValueError: if there is no step-time record (at that batch size).
    """
    steps = [r for r in records if r.metric == "cross_attention_step_time" and not r.compiled]
    if not steps:
        raise ValueError("No cross_attention_step_time records to plot.")
    batches = sorted({r.batch_size for r in steps})
    batch = batch_size if batch_size is not None else (8 if 8 in batches else batches[-1])
    steps = [r for r in steps if r.batch_size == batch]
    if not steps:
        raise ValueError(f"No cross_attention_step_time records at batch size {batch}.")
    sizes = sorted({r.segment_size for r in steps if r.segment_size is not None}, reverse=True)
    styles = {s: _SEGMENT_STYLES[i % len(_SEGMENT_STYLES)] for i, s in enumerate(sizes)}
    fig, ax = plt.subplots(figsize=(10, 5.5))
    for variant in BENCH_VARIANTS:
        for s in [None, *sizes]:
            points = sorted((r.encoder_length, r.value) for r in steps if r.variant == variant and r.segment_size == s)
            if not points:
                continue
            xs, ys = zip(*points, strict=True)
            label = variant if s is None else f"{variant}, s={s}"
            ax.plot(xs, ys, linestyle="-" if s is None else styles[s], marker="o", markersize=4,
                    color=VARIANT_COLORS.get(variant), linewidth=2.2 if s is None else 1.6, label=label)
    ax.set_xscale("log", base=2)
    ax.set_yscale("log")
    plain = FuncFormatter(lambda value, _: f"{value:g}")
    ax.yaxis.set_major_formatter(plain)
    ax.yaxis.set_minor_formatter(FuncFormatter(lambda value, _: f"{value:g}" if f"{value:.0e}"[0] in "25" else ""))
    lengths = sorted({r.encoder_length for r in steps})
    ax.set_xticks(lengths, [str(k) for k in lengths])
    ax.set_xlabel("encoder length k (tokens)")
    ax.set_ylabel("time per decoder step (ms, median)")
    device = steps[0].device
    ax.set_title(f"Cross attention, one decoder layer, one generation step (batch {batch}, {device})")
    ax.grid(True, which="both", alpha=0.3)
    ax.legend(fontsize=8, loc="upper left", bbox_to_anchor=(1.01, 1.0), title="variant, segment size")
    return _save(fig, path)


def variant_series(
    rows: Sequence[BenchRecord], colors: dict[str, str], value: Callable[[BenchRecord], float] = lambda r: r.value,
) -> Iterator[tuple[str, str, str, tuple[int, ...], tuple[float, ...]]]:
    """Each (variant, segment size) line of ``rows`` in :data:`BENCH_VARIANTS` order: ``(variant, label, color,
    encoder lengths, values)``, the values by ``value``; points whose value is not above 0 are left out (a log
    axis), a line without any is skipped. ``colors`` (label -> color) is filled as lines are met, so that a label
    keeps its color across panels; ``full-sdpa`` is black."""
    for variant in BENCH_VARIANTS:
        for s in sorted({r.segment_size for r in rows if r.variant == variant}, key=lambda v: v or 0):
            points = [(x, y) for x, y in sorted((r.encoder_length, value(r)) for r in rows
                                                if r.variant == variant and r.segment_size == s) if y > 0]
            if not points:
                continue
            xs, ys = zip(*points, strict=True)
            label = variant if s is None else f"{variant}, s={s}"
            color = colors.setdefault(label, "black" if variant == "full-sdpa" else f"C{len(colors) % 10}")
            yield variant, label, color, xs, ys


def plot_operator_calls(records: Iterable[BenchRecord], path: str | Path) -> Path:
    """Operator calls against encoder length ``k``, log-log, one line per variant and segment size: per generated
    token (left) and in the first step (right), with ``full-sdpa``'s budgets shaded (1.25x its calls per token,
    3x its first step: ``docs/benchmarks.md``, "Operator calls").

    Raises:
        ValueError: if there is no operator-count record.
    """
    chosen = [r for r in records if r.metric in ("operator_calls_per_token", "first_step_operator_calls")]
    if not chosen:
        raise ValueError("No operator-count records to plot.")
    fig, axes = plt.subplots(1, 2, figsize=(13, 5))
    panels = (("operator_calls_per_token", "aten calls per generated token", 1.25),
              ("first_step_operator_calls", "aten calls of the first step (state builds + one step)", 3.0))
    colors: dict[str, str] = {}
    for ax, (metric, title, budget) in zip(axes, panels, strict=True):
        rows = [r for r in chosen if r.metric == metric]
        for variant, label, color, xs, ys in variant_series(rows, colors):
            ax.plot(xs, ys, marker="o", markersize=4, color=color, label=label)
            if variant == "full-sdpa":
                ax.fill_between(xs, ys, [budget * y for y in ys], color="grey", alpha=0.15,
                                label="budget: 1.25x full-sdpa per token, 3x in the first step")
        ax.set_xscale("log", base=2)
        if metric == "first_step_operator_calls":  # grows by orders of magnitude when a build loops
            ax.set_yscale("log")
            ax.yaxis.set_major_formatter(FuncFormatter(lambda value, _: f"{value:g}"))
            ax.yaxis.set_minor_formatter(FuncFormatter(
                lambda value, _: f"{value:g}" if f"{value:.0e}"[0] in "25" else ""))
        else:  # within a factor of two of full's: a linear axis keeps its ticks labelled
            ax.set_ylim(bottom=0)
        lengths = sorted({r.encoder_length for r in rows})
        ax.set_xticks(lengths, [str(k) for k in lengths])
        ax.set_xlabel("encoder length k (tokens)")
        ax.set_title(title, fontsize=10)
        ax.grid(True, which="both", alpha=0.3)
    handles, labels = axes[0].get_legend_handles_labels()
    axes[1].legend(handles, labels, fontsize=8, loc="upper left", bbox_to_anchor=(1.01, 1.0))
    fig.suptitle("Operator calls of eager generate(), batch 1 (on a GPU each costs about one launch)", fontsize=10)
    return _save(fig, path)


def plot_figure5(
    records: Iterable[BenchRecord],
    path: str | Path,
    *,
    qs: Sequence[int] = (128, 256, 384, 512, 640, 768, 896, 1024),
    ratio: int = 8,
    d: int = 64,
    s: int = 64,
) -> Path:
    """Paper Figure 5: theoretical computation and memory of cross attention vs summary length q
    (``k = ratio·q``), with measured FlopCounterMode points.

    Theoretical curves are Table 1 (:func:`~srformer.benchmarks.flops.table1_computation`, in
    MACs, and :func:`~srformer.benchmarks.flops.table1_memory`, in elements), per example and
    head. Measured points are the records whose note starts with :data:`FIGURE5_NOTE`
    (``attention_core_generation_flops`` filled, ``attention_core_forward_flops`` hollow), shown as
    FLOPs / 2 = MACs; they count both ``Q Kᵀ`` and ``A V`` (plus, for SRformer, the ``W P_j``
    projections), so they sit about 2x above the curves, which count ``Q Kᵀ`` only.

    Returns:
        The PNG path.

    Raises:
        ValueError: if ``qs`` is empty.
    """
    if not qs:
        raise ValueError("`qs` must hold at least one summary length.")
    measured = [r for r in records if r.note.startswith(FIGURE5_NOTE)]
    fig, (ax_comp, ax_mem) = plt.subplots(1, 2, figsize=(12, 5))
    qs = sorted(qs)
    for variant in TABLE1_VARIANTS:
        color = VARIANT_COLORS[CORE_NAMES[variant]]
        label = TABLE1_LABELS[variant]
        comp = [table1_computation(variant, q=q, k=ratio * q, d=d, s=s) for q in qs]
        mem = [table1_memory(variant, q=q, k=ratio * q, d=d, s=s) for q in qs]
        ax_comp.plot(qs, comp, color=color, linewidth=2, label=f"{label} (Table 1)")
        ax_mem.plot(qs, mem, color=color, linewidth=2, label=f"{label} (Table 1)")
        for metric, filled, what in (
            ("attention_core_generation_flops", True, "generation path"),
            ("attention_core_forward_flops", False, "teacher-forced forward"),
        ):
            points = sorted(
                (r.decoder_length, r.value / 2)
                for r in measured
                if r.metric == metric and r.variant == CORE_NAMES[variant]
            )
            if points:
                xs, ys = zip(*points, strict=True)
                ax_comp.plot(xs, ys, linestyle="none", marker="o" if filled else "s", markersize=7 if filled else 9,
                             markerfacecolor=color if filled else "none", markeredgecolor=color,
                             label=f"{label}: measured, {what}")
    for ax, formula in ((ax_comp, table1_computation), (ax_mem, table1_memory)):
        lo, hi = qs[0], qs[-1]
        reductions = [1 - formula("srformer", q=q, k=ratio * q, d=d, s=s) / formula("full", q=q, k=ratio * q, d=d, s=s)
                      for q in (lo, hi)]
        ax.text(0.98, 0.03, f"SRformer vs Transformer: -{100 * reductions[0]:.1f}% at q={lo}, "
                f"-{100 * reductions[1]:.1f}% at q={hi}", transform=ax.transAxes, ha="right", va="bottom", fontsize=9,
                bbox=dict(facecolor="white", edgecolor="lightgray"))
    for ax, ylabel, title in (
        (ax_comp, "multiply-accumulates per example and head", "Computation of cross attention"),
        (ax_mem, "numbers held per example and head", "Memory of cross attention"),
    ):
        ax.set_yscale("log")
        ax.set_xlabel(f"summary length q (tokens), k = {ratio}q")
        ax.set_ylabel(ylabel)
        ax.set_title(title)
        ax.set_xticks(qs)
        ax.grid(True, which="both", alpha=0.3)
    handles, labels = ax_comp.get_legend_handles_labels()
    fig.legend(handles, labels, loc="lower center", ncol=3, fontsize=8.5, frameon=False)
    fig.suptitle(f"Figure 5 reproduction (paper Sec. 4.4.1): d = {d}, s = {s}. Lines: Table 1. "
                 "Points: FlopCounterMode FLOPs / 2 (Q Kᵀ and A V, so ~2x the lines)", fontsize=10.5)
    fig.tight_layout(rect=(0, 0.16, 1, 1))
    return _save(fig, path, layout=False)


def _save(fig, path: str | Path, *, layout: bool = True) -> Path:
    path = Path(path)
    path.parent.mkdir(parents=True, exist_ok=True)
    if layout:
        fig.tight_layout()
    fig.savefig(path, dpi=120)
    plt.close(fig)
    return path
