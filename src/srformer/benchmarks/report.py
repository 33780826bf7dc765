"""``bench.md``: the main metrics as Markdown tables with ratios against ``full-sdpa``, and the
design's performance goals checked against the measured ratios."""

from __future__ import annotations

from collections.abc import Iterable, Sequence
from dataclasses import dataclass
from pathlib import Path

from srformer.benchmarks.flops import TABLE1_VARIANTS, in_thousands
from srformer.benchmarks.plots import FIGURE5_NOTE
from srformer.benchmarks.records import BENCH_VARIANTS, CORE_VARIANT_NAMES, BenchRecord, has_segments
from srformer.evaluation.report import format_table

REFERENCE = "full-sdpa"

#: Column prefixes of the Table 1 comparison, per Table 1 row (the paper's Transformer, Segmented, SRformer).
TABLE1_SHORT_NAMES: dict[str, str] = {"full": "T", "segmented": "Seg", "srformer": "SR"}


@dataclass(frozen=True)
class MetricTable:
    """How one metric is tabulated.

    Attributes:
        metric: the record metric.
        title: section heading.
        ratio: ``"speedup"`` (reference / variant, for times), ``"gain"`` (variant / reference,
            for throughput) or ``"fraction"`` (variant / reference, for memory and FLOPs).
        explanation: one sentence under the heading.
    """

    metric: str
    title: str
    ratio: str
    explanation: str


TABLES: tuple[MetricTable, ...] = (
    MetricTable("operator_calls_per_token", "Operator calls per generated token", "fraction",
                "aten calls of one more greedy generate() token, whole decoder, batch 1 (views included): on a GPU an "
                "eager step costs about one launch per call whatever k. (x) = variant / full-sdpa: lower is fewer."),
    MetricTable("first_step_operator_calls", "Operator calls of the first step", "fraction",
                "aten calls of generate()'s first step: every layer's cache fill or state build, then one step. "
                "(x) = variant / full-sdpa."),
    MetricTable("first_step_host_syncs", "Host syncs of the first step", "fraction",
                "Calls that make the host wait for the device (.item(), bool(tensor), torch.equal, nonzero, ...) in "
                "the first step; transformers' generate() makes some of its own. (x) = variant / full-sdpa."),
    MetricTable("cross_attention_step_time", "Cross-attention time per decoder step (ms)", "speedup",
                "One cross-attention module (decoder layer 0), single-token calls at consecutive positions after the "
                "cache is filled, mean per step, median of repeats. (x) = full-sdpa time / variant time: higher is "
                "faster."),
    MetricTable("cross_attention_prefill_time", "Cross-attention cache fill at t = 0 (ms)", "speedup",
                "The same module's first call: K/V projection of all k positions, plus the state build for the "
                "converted variants; median of repeats. (x) = full-sdpa time / variant time."),
    MetricTable("generate_throughput", "generate() throughput (new tokens/s)", "gain",
                "Whole model, encoder excluded (precomputed encoder_outputs), greedy, a forced number of new tokens; "
                "tokens of all sequences per second. (x) = variant / full-sdpa: higher is faster."),
    MetricTable("training_step_time", "Training step: forward + backward (s)", "speedup",
                "Whole model (encoder included), labels of length T; median of repeats. (x) = full-sdpa / variant."),
    MetricTable("generate_peak_memory", "Peak memory during generate() (MiB)", "fraction",
                "Peak above the level before the call (CPU: resident set size of a child process; CUDA: "
                "max_memory_allocated). (x) = variant / full-sdpa: lower is smaller."),
    MetricTable("cross_attention_cache_bytes", "Cross-attention cache after generate() (MiB)", "fraction",
                "Exact bytes of all decoder layers' cross-attention caches/states; lean variants include the encoder "
                "output once. (x) = variant / full-sdpa."),
    MetricTable("cross_attention_step_flops", "FLOPs of one cross-attention step (MFLOPs)", "fraction",
                "FlopCounterMode, one layer, mean over the timed positions. (x) = variant / full-sdpa."),
    MetricTable("cross_attention_forward_flops", "FLOPs of a teacher-forced cross-attention forward (MFLOPs)",
                "fraction",
                "FlopCounterMode, one layer, q = T positions at once, projections included, batch 1. "
                "(x) = variant / full-sdpa."),
)


def _format_value(metric: str, value: float) -> str:
    if metric.endswith("_bytes") or metric == "generate_peak_memory":
        return f"{value / 2**20:.1f}"
    if metric.endswith("_flops"):
        return f"{value / 1e6:.3g}"
    return f"{value:.3g}"


def _ratio(kind: str, value: float, reference: float) -> float:
    return reference / value if kind == "speedup" else value / reference


def metric_rows(records: Sequence[BenchRecord], table: MetricTable) -> tuple[list[dict], list[str]]:
    """Rows ``{k, s, batch[, compiled], <variant>: "value (ratio x)"}`` of one metric, and the variant columns.

    ``full*`` variants have no segment size: their value is repeated on every ``s`` row of the
    same ``k`` and batch. When the metric has compiled records (``srformer bench --compiled``), every row
    gets a ``compiled`` column (``no``/``yes``), and a compiled row's ratios are against the compiled
    ``full-sdpa`` (each mode against its own reference).
    """
    chosen = [r for r in records if r.metric == table.metric]
    if not chosen:
        return [], []
    variants = [v for v in BENCH_VARIANTS if any(r.variant == v for r in chosen)]
    sizes: list[int | None] = [*sorted({r.segment_size for r in chosen if r.segment_size is not None})] or [None]
    values = {(r.variant, r.encoder_length, r.segment_size, r.batch_size, r.compiled): r.value for r in chosen}
    modes = sorted({r.compiled for r in chosen})
    rows = []
    for k in sorted({r.encoder_length for r in chosen}):
        for batch in sorted({r.batch_size for r in chosen}):
            for s in sizes:
                for compiled in modes:
                    row: dict[str, int | str] = {"k": k, "s": "-" if s is None else s, "batch": batch}
                    if modes != [False]:
                        row["compiled"] = "yes" if compiled else "no"
                    reference = values.get((REFERENCE, k, None, batch, compiled))
                    filled = False
                    for variant in variants:
                        value = values.get((variant, k, s if has_segments(variant) else None, batch, compiled))
                        if value is None:
                            continue
                        filled = filled or has_segments(variant) or s == sizes[0]
                        cell = _format_value(table.metric, value)
                        if reference is not None and variant != REFERENCE:
                            cell += f" ({_ratio(table.ratio, value, reference):.2f}x)"
                        row[variant] = cell
                    if filled:
                        rows.append(row)
    return rows, variants


def table1_rows(records: Sequence[BenchRecord]) -> list[dict]:
    """Rows comparing Table 1 counts with FlopCounterMode counts per example and head, per (k, s)."""
    theory = {(r.variant, r.encoder_length, r.segment_size, r.metric): r.value
              for r in records if r.device == "theory"}
    measured = {(r.variant, r.encoder_length, r.segment_size, r.metric): r.value
                for r in records if r.metric.startswith("attention_core") and not r.note.startswith(FIGURE5_NOTE)}
    rows = []
    keys = sorted({(k, s) for (v, k, s, m) in theory if s is not None})
    for k, s in keys:
        row: dict[str, int | str] = {"k": k, "s": s}
        for variant in TABLE1_VARIANTS:
            seg = s if has_segments(variant) else None
            comp = theory.get((variant, k, seg, "table1_computation"))
            mem = theory.get((variant, k, seg, "table1_memory"))
            gen = measured.get((CORE_VARIANT_NAMES[variant], k, seg, "attention_core_generation_flops"))
            fwd = measured.get((CORE_VARIANT_NAMES[variant], k, seg, "attention_core_forward_flops"))
            short = TABLE1_SHORT_NAMES[variant]
            row[f"{short} comp (K)"] = "" if comp is None else in_thousands(comp)
            row[f"{short} gen/2 (K)"] = "" if gen is None else in_thousands(gen / 2)
            row[f"{short} fwd/2 (K)"] = "" if fwd is None else in_thousands(fwd / 2)
            row[f"{short} mem (K)"] = "" if mem is None else in_thousands(mem)
        rows.append(row)
    return rows


def _lookup(records, metric, variant, k, s, batch):
    """The eager-mode value of one measurement (the targets are eager-mode targets), or None."""
    for r in records:
        if (r.metric, r.variant, r.encoder_length, r.segment_size, r.batch_size) == (metric, variant, k, s, batch) \
                and not r.compiled:
            return r.value
    return None


#: The design's performance goals (docs/benchmarks.md): (text, metric, variant, k, s, batch sizes, bound, ratio kind).
TARGETS: tuple[tuple, ...] = (
    ("step: srformer >= 8x faster than full-sdpa", "cross_attention_step_time", "srformer", 4096, 64, (8,), 8.0,
     "speedup"),
    ("step: srformer >= 2x faster than full-sdpa", "cross_attention_step_time", "srformer", 1024, 64, (8,), 2.0,
     "speedup"),
    ("generate: srformer >= 1.3x tokens/s of full-sdpa", "generate_throughput", "srformer", 4096, 64, (1, 8), 1.3,
     "gain"),
    ("generate: srformer >= 0.95x tokens/s of full-sdpa", "generate_throughput", "srformer", 512, 64, (1, 8), 0.95,
     "gain"),
    ("memory: srformer-lean cache <= 1/4 of full-sdpa", "cross_attention_cache_bytes", "srformer-lean", 4096, 64,
     (1, 8), 0.25, "fraction"),
)


def target_rows(records: Sequence[BenchRecord]) -> list[dict]:
    """The performance goals, each with the measured ratio and whether it is met (or not measured)."""
    rows = []
    for text, metric, variant, k, s, batches, bound, kind in TARGETS:
        for batch in batches:
            value = _lookup(records, metric, variant, k, s, batch)
            reference = _lookup(records, metric, REFERENCE, k, None, batch)
            if value is None or reference is None:
                measured, status = "not measured", "-"
            else:
                ratio = _ratio(kind, value, reference)
                measured = f"{ratio:.2f}x"
                status = "met" if (ratio <= bound if kind == "fraction" else ratio >= bound) else "NOT met"
            rows.append({"target": text, "k": k, "s": s, "batch": batch, "measured": measured, "status": status})
    return rows


def write_report(
    records: Iterable[BenchRecord],
    path: str | Path,
    *,
    environment: dict | None = None,
    settings: dict | None = None,
    notes: Sequence[str] = (),
    seconds: float | None = None,
) -> Path:
    """Write ``bench.md``: run information, the targets, one table per metric, Table 1 vs measured.

    Args:
        records: the benchmark records.
        path: the Markdown file to write.
        environment: versions and device (shown as a list).
        settings: the suite settings (shown as a list).
        notes: lines logged during the run (skips, caveats).
        seconds: the run's wall-clock time in seconds.

    Returns:
        The path written.
    """
    records = list(records)
    lines = ["# srformer bench", ""]
    if environment:
        lines.append("Environment: " + ", ".join(f"{key} {value}" for key, value in environment.items()) + ".")
    if seconds is not None:
        lines.append(f"Wall-clock time of the run: {seconds:.0f} s.")
    if settings:
        lines += ["", "<details><summary>Settings</summary>", ""]
        lines += [f"- `{key}`: {value}" for key, value in settings.items()]
        lines += ["", "</details>"]
    lines += [
        "",
        "All variants were measured side by side in this one run and process (except the CPU peak memory, measured "
        "in child processes). Random weights (same seed for every variant). generate() excludes the encoder: it "
        "receives precomputed random encoder_outputs. Step times are for one decoder layer; generate() and "
        "training use the whole model. Ratios are against full-sdpa, the unmodified model with PyTorch "
        "scaled_dot_product_attention.",
    ]
    if any(r.compiled for r in records):
        lines += [
            "",
            "Rows with compiled = yes (`--compiled`): the step through torch.compile(module, fullgraph=True, "
            "dynamic=False, backend='inductor') with a static self-attention cache; generate() with "
            "cache_implementation='static' and CompileConfig(fullgraph=True, dynamic=False, backend='inductor'; "
            "mode reduce-overhead on CUDA). Compilation happens in untimed warm-up calls. Their ratios are against "
            "compiled full-sdpa; rows with compiled = no are eager mode (generate() with the dynamic cache).",
        ]
    if notes:
        lines += ["", "## Notes from the run", ""] + [f"- {note}" for note in notes]
    lines += ["", "## Performance goals", "", format_table(target_rows(records),
                                                               ["target", "k", "s", "batch", "measured", "status"])]
    for table in TABLES:
        rows, variants = metric_rows(records, table)
        if not rows:
            continue
        compiled_column = ["compiled"] if "compiled" in rows[0] else []
        table_text = format_table(rows, ["k", "s", "batch", *compiled_column, *variants])
        lines += ["", f"## {table.title}", "", table.explanation, "", table_text]
    rows = table1_rows(records)
    if rows:
        lines += [
            "", "## Paper Table 1 next to FlopCounterMode (per example and head, q = T, thousands)", "",
            "T = Transformer (full), Seg = segmented, SR = SRformer. comp: Table 1 computation (multiply-accumulates "
            "of Q Kᵀ); gen/2 and fwd/2: measured FLOPs / 2 (multiply-accumulates of Q Kᵀ and A V, so about 2x comp) "
            "of the generation path (state build + q single-token steps) and of the teacher-forced forward; "
            "mem: Table 1 memory (numbers held).", "",
            format_table(rows, list(rows[0])),
        ]
    path = Path(path)
    path.parent.mkdir(parents=True, exist_ok=True)
    path.write_text("\n".join(lines) + "\n")
    return path
