"""``srformer pick``: the table a user picks a cross attention from, quality next to cost.

Quality comes from ``srformer probe`` runs (``results.json``; synthetic recall): for every named setting, the
off-segment and on-segment token accuracy of each problem and protocol found, averaged over seeds, and the share
of the segmented-to-full off-segment gap it recovers,

    gap recovered = (off(setting) - off(segmented)) / (off(full) - off(segmented)),

with ``full`` and ``segmented`` of the same problem, protocol, fine-tuning budget and seeds. Cost comes from
``srformer bench`` runs (``bench.json``) at one shape (k, s, batch): one decoder layer's cross-attention step time
and ``generate()`` time as ratios to full attention (``full-sdpa`` of the same run), and the decode state per
decoder layer (the cross-attention cache after ``generate()``, divided by the bench model's decoder layers). A
named setting that runs its variant's module with the variant's own settings (the srformer ablations,
``srformer-two-sided``) costs what the variant costs, and the table says so; one that changes the settings
(``knn-4``, ``srformer-gated-taylor``) is a bench variant of its own and has no cost unless a run measured it.

The Pareto front of each quality column: the settings that no other setting beats on both off-segment accuracy
(higher) and step time (lower). Outputs: ``pick.json``, ``pick.md`` and ``pick.png`` (one panel per ``convert``
column: off-segment accuracy against the step-time ratio, the front marked).

Long-input columns, when given (both synthetic: recall of probe models, timings of random weights): off-segment
token accuracy of ``srformer long-probe`` (``long_probe.json``) at each long input length, one column per length
and fine-tuning budget (the mean over the seeds present), and ``srformer long-bench``'s milliseconds per generated
token (``long_input.json``, decode records) at each length, with that time as a multiple of ``segmented``'s at the
same length in the same file. Rows are matched by mechanism name; a mechanism these files measure that is no named
setting (``knn`` searching a faiss index: long-probe's ``knn (ivf, 32 probes)`` and long-bench's ``knn-ivf``; a
``-lean`` layout) is an extra row with only the long-input columns.
"""

from __future__ import annotations

import json
import math
import re
from collections.abc import Iterable, Sequence
from dataclasses import asdict, dataclass
from pathlib import Path

import matplotlib

matplotlib.use("Agg")
import matplotlib.pyplot as plt  # noqa: E402

from srformer.attention.knn import DEFAULT_INDEX_PROBES  # noqa: E402
from srformer.benchmarks.long_input import LONG_INPUT_VARIANTS  # noqa: E402
from srformer.benchmarks.records import VARIANT_SPECS, read_records_json  # noqa: E402
from srformer.benchmarks.variants import t5_config  # noqa: E402
from srformer.config import NAMED_SETTINGS, named_config  # noqa: E402
from srformer.evaluation.report import format_table  # noqa: E402

__all__ = ["CostColumns", "LongRecallColumn", "QualityColumn", "load_long_bench", "load_long_probe_records",
           "load_probe_records", "parse_length", "pareto_front", "pick_table", "write_pick"]

FULL_BENCH_VARIANT = "full-sdpa"
"""The bench variant every cost ratio is taken against: the unmodified model with PyTorch's SDPA."""


@dataclass(frozen=True, order=True)
class QualityColumn:
    """One quality column: probe cells of one problem and protocol with one training budget.

    Attributes:
        length: document length k (tokens).
        protocol: ``convert`` (the trained full model converted, then fine-tuned) or ``scratch``.
        steps: optimizer steps of the cell's own training (the fine-tune of ``convert``).
        task: probe task (``recall``, ...).
        n: the task's size (queried facts of recall).
        segment_sizes: the problem's segment sizes (tokens).
        floor: the scratch curriculum's (or the ``convert`` base's) minimum segments per document.
    """

    length: int
    protocol: str
    steps: int
    task: str
    n: int
    segment_sizes: tuple[int, ...]
    floor: int

    @property
    def short(self) -> str:
        """A short name: ``k128 convert+100``, ``k128 scratch 1000``."""
        how = f"convert+{self.steps}" if self.protocol == "convert" else f"scratch {self.steps}"
        return f"k{self.length} {how}" + (" no-floor" if self.floor < 2 else "")

    @property
    def label(self) -> str:
        sizes = "/".join(str(s) for s in self.segment_sizes)
        how = f"after conversion + {self.steps} steps" if self.protocol == "convert" else f"scratch, {self.steps} steps"
        floor = ", no curriculum floor" if self.floor < 2 else ""
        return f"k={self.length} (s={sizes}), {how}{floor}"


@dataclass(frozen=True)
class CostColumns:
    """Where the cost columns were measured: ``srformer bench`` at ``encoder_length`` k (tokens),
    ``segment_size`` s (tokens) and ``batch_size`` sequences, on ``device``, model shape ``shape``."""

    encoder_length: int
    segment_size: int
    batch_size: int
    device: str
    shape: str = "t5-small"


def _column(record: dict) -> QualityColumn:
    budget = record["budget"]
    train = budget["train"]
    floor_source = budget.get("base", budget) if record["protocol"] == "convert" else budget
    floor = floor_source["train"].get("min_curriculum_segments", 1)
    return QualityColumn(int(record["length"]), record["protocol"], int(train["steps"]), record["task"],
                         int(record["n"]), tuple(budget["segment_sizes"]), int(floor))


def load_probe_records(paths: Iterable[str | Path]) -> list[dict]:
    """Cell records of ``srformer probe`` runs: each path a ``results.json`` or a run directory holding one.
    A cell found twice (same key and column) keeps the last path's record.

    Raises:
        FileNotFoundError: a path has no ``results.json``.
        ValueError: a file is not a probe result (no ``records`` list).
    """
    found: dict[tuple, dict] = {}
    for path in map(Path, paths):
        file = path / "results.json" if path.is_dir() else path
        if not file.is_file():
            raise FileNotFoundError(f"{path}: no probe results.json there; give a `srformer probe --output` folder "
                                    "or its results.json.")
        payload = json.loads(file.read_text())
        if not isinstance(payload, dict) or not isinstance(payload.get("records"), list):
            raise ValueError(f"{file} is not a `srformer probe` results.json (it has no `records` list).")
        for record in payload["records"]:
            if not record.get("settings"):  # a named setting run with extra --setting values is another mechanism
                found[(record["key"], _column(record))] = record
    return list(found.values())


def _quality(records: Sequence[dict]) -> dict[QualityColumn, dict[str, dict]]:
    """Per column and named setting: mean off/on accuracy over seeds, with the seeds."""
    cells: dict[QualityColumn, dict[str, dict[int, dict]]] = {}
    for record in records:
        metrics = record["metrics"]
        cells.setdefault(_column(record), {}).setdefault(record["name"], {})[int(record["seed"])] = metrics
    table: dict[QualityColumn, dict[str, dict]] = {}
    for column, names in cells.items():
        table[column] = {}
        for name, by_seed in names.items():
            seeds = sorted(by_seed)
            table[column][name] = {
                "seeds": seeds,
                "off": sum(by_seed[s]["off_token_accuracy"] for s in seeds) / len(seeds),
                "on": sum(by_seed[s]["on_token_accuracy"] for s in seeds) / len(seeds),
                "off_by_seed": [by_seed[s]["off_token_accuracy"] for s in seeds],
            }
        full, segmented = names.get("full", {}), names.get("segmented", {})
        for entry in table[column].values():
            entry["gap_recovered"] = None
            # against full and segmented of the entry's own seeds: the mean over the same draws
            if all(seed in full and seed in segmented for seed in entry["seeds"]):
                full_off = sum(full[s]["off_token_accuracy"] for s in entry["seeds"]) / len(entry["seeds"])
                segmented_off = sum(segmented[s]["off_token_accuracy"] for s in entry["seeds"]) / len(entry["seeds"])
                if full_off > segmented_off:
                    entry["gap_recovered"] = (entry["off"] - segmented_off) / (full_off - segmented_off)
    return table


def _bench_name(name: str) -> tuple[str, bool]:
    """The bench variant whose cost a named setting has, and whether it is the setting itself (False: the same
    module with the same settings under another name)."""
    if name == "full":
        return FULL_BENCH_VARIANT, True
    if name in VARIANT_SPECS:  # a variant, or a named setting with module settings of its own (``knn-4``)
        return name, True
    return named_config(name, segment_size=8, target_length=16).variant, False


def _costs(bench_records: Sequence, where: CostColumns) -> dict[str, dict[str, float]]:
    """Per bench variant at ``where``: step ms, generate() tokens/s and cross-attention cache bytes."""
    costs: dict[str, dict[str, float]] = {}
    for record in bench_records:
        if (record.encoder_length != where.encoder_length or record.batch_size != where.batch_size
                or record.device != where.device or record.compiled):
            continue
        if record.segment_size not in (None, where.segment_size):
            continue
        costs.setdefault(record.variant, {})[record.metric] = float(record.value)
    return costs


def _cost_row(name: str, runs: Sequence[dict[str, dict[str, float]]], decoder_layers: int) -> dict:
    """The cost fields of named setting ``name`` from the first bench run (of ``runs``, :func:`_costs` each) that
    measured its bench variant; its ratios are against that run's own ``full-sdpa``."""
    variant, own = _bench_name(name)
    run = next((index for index, costs in enumerate(runs) if variant in costs), 0)
    costs = runs[run]
    full = costs.get(FULL_BENCH_VARIANT, {})
    mine = costs.get(variant, {})
    step = mine.get("cross_attention_step_time")
    full_step = full.get("cross_attention_step_time")
    throughput = mine.get("generate_throughput")
    full_throughput = full.get("generate_throughput")
    cache = mine.get("cross_attention_cache_bytes")
    lean = costs.get(f"{variant}-lean", {}).get("cross_attention_cache_bytes")
    return {
        "bench_variant": variant if mine else None,
        "cost_from_variant": not own,
        "bench_run": run if mine else None,
        "step_ratio": step / full_step if step and full_step else None,
        "generate_ratio": full_throughput / throughput if throughput and full_throughput else None,
        "state_bytes_per_layer": cache / decoder_layers if cache is not None else None,
        "lean_state_bytes_per_layer": lean / decoder_layers if lean is not None else None,
    }


def pareto_front(points: dict[str, tuple[float, float]]) -> list[str]:
    """The names whose ``(cost, quality)`` no other point dominates (cost no higher and quality no lower, one of
    them strictly), in ascending cost. Points with a NaN are left out."""
    clean = {name: p for name, p in points.items() if not any(math.isnan(v) for v in p)}
    front = [name for name, (cost, quality) in clean.items()
             if not any((c <= cost and q >= quality) and (c < cost or q > quality) for c, q in clean.values())]
    return sorted(front, key=lambda name: clean[name])


def pick_table(probe_records: Sequence[dict], bench_json: str | Path | Sequence[str | Path],
               where: CostColumns) -> dict:
    """Join probe quality and bench cost per named setting (rows in registry order).

    ``bench_json`` is one ``bench.json`` or several, each a run with its own ``full-sdpa``: a setting's cost comes
    from the first run that measured it, its ratios against that run's ``full-sdpa`` (a later run adds settings an
    earlier one lacks without mixing two runs' timings in one ratio).

    Returns:
        ``{"columns": [...], "cost": {...}, "rows": [...], "fronts": {column label: [names]}}``, JSON-ready; a
        row holds ``name``, ``quality`` (per column label: off, on, seeds, gap_recovered; absent when not
        measured) and the cost fields of :func:`_cost_row`.

    Raises:
        ValueError: no probe record, or the bench file has no ``full-sdpa`` record at ``where``.
    """
    if not probe_records:
        raise ValueError("No probe cell records: give `srformer probe` results with at least one finished cell.")
    quality = _quality(probe_records)
    files = [bench_json] if isinstance(bench_json, (str, Path)) else list(bench_json)
    if not files:
        raise ValueError("No bench file: give at least one bench.json of `srformer bench`.")
    runs = [_costs(read_records_json(file), where) for file in files]
    for file, costs in zip(files, runs, strict=True):
        if FULL_BENCH_VARIANT not in costs:
            raise ValueError(f"{file} has no {FULL_BENCH_VARIANT} record at k={where.encoder_length}, "
                             f"batch {where.batch_size} on {where.device}: run `srformer bench` with full-sdpa at "
                             "that shape, or give --encoder-length/--segment-size/--batch-size of the run.")
    shape = t5_config(where.shape)
    decoder_layers = shape.num_decoder_layers or shape.num_layers
    columns = sorted(quality, key=lambda c: (c.protocol != "convert", c.length, c.steps, c.n, c.segment_sizes))
    names = [name for name in NAMED_SETTINGS if any(name in quality[c] for c in columns)]
    rows = []
    for name in names:
        row = {"name": name, "quality": {c.label: quality[c][name] for c in columns if name in quality[c]}}
        rows.append(row | _cost_row(name, runs, decoder_layers))
    fronts = {}
    for column in columns:
        points = {row["name"]: (row["step_ratio"], row["quality"][column.label]["off"]) for row in rows
                  if column.label in row["quality"] and row["step_ratio"] is not None}
        fronts[column.label] = pareto_front(points)
    return {"columns": [asdict(c) | {"label": c.label, "short": c.short} for c in columns],
            "cost": asdict(where) | {"bench_runs": [str(file) for file in files]}, "rows": rows, "fronts": fronts}


def _percent(value: float | None) -> str:
    return "-" if value is None else f"{100 * value:.1f}"


def _quality_cell(entry: dict | None) -> str:
    if entry is None:
        return "-"
    gap = "" if entry["gap_recovered"] is None else f" ({entry['gap_recovered']:.2f})"
    seeds = f" [{len(entry['seeds'])} seeds]" if len(entry["seeds"]) > 1 else ""
    return f"{_percent(entry['off'])} / {_percent(entry['on'])}{gap}{seeds}"


def _ratio(value: float | None, row: dict) -> str:
    if value is None:
        return "-"
    run = f" (run {row['bench_run'] + 1})" if row.get("bench_run") else ""
    return f"{value:.3f}" + (f" (as {row['bench_variant']})" if row["cost_from_variant"] else "") + run


def _bytes(value: float | None) -> str:
    return "-" if value is None else f"{value / 2**20:.2f}"


def _runs_note(runs: Sequence[str]) -> str:
    if len(runs) < 2:
        return ""
    later = "; ".join(f"run {index + 1}: {run}" for index, run in enumerate(runs) if index)
    return (f"; \"(run N)\": measured in a later bench run ({later}), against that run's own {FULL_BENCH_VARIANT}, "
            f"where run 1 ({runs[0]}) did not measure it")


def pick_markdown(payload: dict) -> str:
    """The table of :func:`pick_table` in Markdown, with a legend."""
    cost = payload["cost"]
    labels = [c["label"] for c in payload["columns"]]
    short = {c["label"]: c["short"] for c in payload["columns"]}
    rows = []
    for row in payload["rows"]:
        fronts = [short[label] for label in labels if row["name"] in payload["fronts"].get(label, [])]
        rows.append({
            "mechanism": row["name"],
            **{short[label]: _quality_cell(row["quality"].get(label)) for label in labels},
            "step × full": _ratio(row["step_ratio"], row),
            "generate() × full": _ratio(row["generate_ratio"], row),
            "decode state per layer (MiB)": _bytes(row["state_bytes_per_layer"]),
            "lean_cache=True (MiB)": _bytes(row.get("lean_state_bytes_per_layer")),
            "on the Pareto front of": ", ".join(fronts) or "-",
        })
    legend = (
        "Quality cells: off-segment / on-segment token accuracy in % (synthetic recall, mean over seeds), the share "
        "of the segmented-to-full off-segment gap recovered in brackets. Cost: one decoder layer's cross-attention "
        f"step and generate() time as multiples of full attention's ({FULL_BENCH_VARIANT}), and the cross-attention "
        "cache after generate() per decoder layer (with `lean_cache=True` where a mechanism has that layout: the "
        "encoder output it reads again at each step counts once, shared by the layers), at "
        f"k={cost['encoder_length']}, s={cost['segment_size']}, batch {cost['batch_size']}, {cost['shape']} shape, "
        f"{cost['device']}; \"(as X)\" is X's measurement, the same module with the same settings"
        + _runs_note(cost.get("bench_runs", []))
        + ". Pareto front: no other mechanism is both more accurate off-segment and faster per step in that column."
        "\n\nColumns: "
        + "; ".join(f"`{short[label]}`: {label}" for label in labels) + "."
    )
    return legend + "\n\n" + format_table(rows, list(rows[0])) + "\n"


def plot_pick(payload: dict, path: Path) -> Path | None:
    """One panel per ``convert`` column: off-segment accuracy (%) against the step-time ratio (log scale), every
    mechanism labelled, the Pareto front joined by a line. A hollow marker: on-segment accuracy more than 1 point
    below segmented's in that column (the mechanism no longer reads its own segment exactly). Returns None when no
    row has both."""
    columns = [c["label"] for c in payload["columns"] if c["protocol"] == "convert"]
    columns = [label for label in columns if payload["fronts"].get(label)]
    if not columns:
        return None
    fig, axes = plt.subplots(1, len(columns), figsize=(5.2 * len(columns), 4.4), squeeze=False)
    for ax, label in zip(axes[0], columns, strict=True):
        measured = {row["name"]: row["quality"][label] for row in payload["rows"] if label in row["quality"]}
        points = {row["name"]: (row["step_ratio"], 100 * measured[row["name"]]["off"]) for row in payload["rows"]
                  if row["name"] in measured and row["step_ratio"] is not None}
        segmented = measured["segmented"]["on"] if "segmented" in measured else None
        for name, (x, y) in points.items():
            color = "C3" if name in payload["fronts"][label] else "C0"
            hollow = segmented is not None and measured[name]["on"] < segmented - 0.01
            ax.scatter([x], [y], s=28, zorder=3, edgecolors=color, facecolors="none" if hollow else color)
            ax.annotate(name, (x, y), fontsize=7, xytext=(3, 3), textcoords="offset points")
        front = payload["fronts"][label]
        ax.plot([points[n][0] for n in front], [points[n][1] for n in front], color="C3", linewidth=1,
                label="Pareto front")
        ax.set_xscale("log")
        ax.set_xlabel("cross-attention step time / full attention's")
        ax.set_ylabel("off-segment accuracy (%)")
        ax.set_title(label + "\n(hollow: on-segment > 1 point below segmented's)", fontsize=8)
        ax.legend(fontsize=7, loc="lower right")
    cost = payload["cost"]
    fig.suptitle(f"Which cross attention to pick (synthetic recall; cost at k={cost['encoder_length']}, "
                 f"s={cost['segment_size']}, batch {cost['batch_size']}, {cost['device']})", fontsize=10)
    fig.tight_layout()
    fig.savefig(path, dpi=120)
    plt.close(fig)
    return path


def write_pick(payload: dict, output: str | Path) -> Path:
    """Write ``pick.json``, ``pick.md`` and (when a ``convert`` column has a front) ``pick.png`` into ``output``
    (created). Returns the folder."""
    folder = Path(output)
    folder.mkdir(parents=True, exist_ok=True)
    (folder / "pick.json").write_text(json.dumps(payload, indent=2) + "\n")
    (folder / "pick.md").write_text("# Which cross attention to pick\n\n" + pick_markdown(payload))
    plot_pick(payload, folder / "pick.png")
    return folder
