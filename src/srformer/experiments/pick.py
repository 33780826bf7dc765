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
from srformer.core import NAMED_SETTINGS, named_config  # noqa: E402
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



def _result_records(paths: Iterable[str | Path], name: str, command: str) -> list[dict]:
    """The ``records`` of each path's ``name`` file (a path is the file or the folder holding it), in order.

    Raises:
        FileNotFoundError: a path has no such file, naming the command that writes it.
        ValueError: a file without a ``records`` list.
    """
    records: list[dict] = []
    for path in map(Path, paths):
        file = path / name if path.is_dir() else path
        if not file.is_file():
            raise FileNotFoundError(f"{path}: no {name} there; give a `{command} --output` folder or its {name}.")
        payload = json.loads(file.read_text())
        if not isinstance(payload, dict) or not isinstance(payload.get("records"), list):
            raise ValueError(f"{file} is not a `{command}` {name} (it has no `records` list).")
        records += payload["records"]
    return records

def load_probe_records(paths: Iterable[str | Path]) -> list[dict]:
    """Cell records of ``srformer probe`` runs: each path a ``results.json`` or a run directory holding one.
    A cell found twice (same key and column) keeps the last path's record.

    Raises:
        FileNotFoundError: a path has no ``results.json``.
        ValueError: a file is not a probe result (no ``records`` list).
    """
    found: dict[tuple, dict] = {}
    for record in _result_records(paths, "results.json", "srformer probe"):
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


def parse_length(text: str) -> int:
    """An input length in tokens: ``16384``, ``16k`` (16 x 1024) or ``1M`` (2**20).

    Raises:
        ValueError: not a positive number of tokens.
    """
    clean = text.strip().replace(",", "").replace("_", "")
    scale = {"k": 2**10, "m": 2**20}.get(clean[-1:].lower(), 1)
    digits = clean[:-1] if scale > 1 else clean
    if not digits.isdigit() or int(digits) < 1:
        raise ValueError(f"{text!r} is not an input length: give tokens, e.g. 16384, 16k or 1M (k = 1024 tokens).")
    return int(digits) * scale


def length_label(tokens: int) -> str:
    """A short input length: ``16k`` for 16,384 tokens (k = 1024), ``1M`` for 2**20, else the number."""
    if tokens % 2**20 == 0:
        return f"{tokens // 2**20}M"
    return f"{tokens // 2**10}k" if tokens % 2**10 == 0 else f"{tokens:,}"


@dataclass(frozen=True, order=True)
class LongRecallColumn:
    """One long-input recall column: ``srformer long-probe`` scores at input ``length`` (tokens) of models converted
    and fine-tuned for ``steps`` at ``trained_length`` tokens, encoded in windows of ``encoder_window`` tokens (0:
    not recorded)."""

    trained_length: int
    encoder_window: int
    steps: int
    length: int

    def label(self, with_training_shape: bool = False) -> str:
        """``recall 16k (convert+400)``; with ``with_training_shape`` (columns of several trained lengths or windows
        in one table) ``recall 16k (k512 w256, convert+400)``."""
        shape = f"k{self.trained_length} w{self.encoder_window}, " if with_training_shape else ""
        return f"recall {length_label(self.length)} ({shape}convert+{self.steps})"


def time_label(tokens: int) -> str:
    """The heading of the long-bench column at ``tokens``: ``ms/token 256k (× segmented)``."""
    return f"ms/token {length_label(tokens)} (× segmented)"


def load_long_probe_records(paths: Iterable[str | Path]) -> list[dict]:
    """Records of ``srformer long-probe`` runs: each path a ``long_probe.json`` or a folder holding one. A record
    without ``seed`` is seed 0; one found twice (same name, length, seed, fine-tuning steps, trained length and
    encoder window) keeps the last path's.

    Raises:
        FileNotFoundError: a path has no ``long_probe.json``.
        ValueError: a file is not a long-probe result (no ``records`` list).
    """
    found: dict[tuple, dict] = {}
    for record in _result_records(paths, "long_probe.json", "srformer long-probe"):
        column = _long_recall_column(record)
        found[(record["name"], record.get("seed", 0), column)] = record
    return list(found.values())


def load_long_bench(paths: Iterable[str | Path]) -> list[dict]:
    """``srformer long-bench`` runs, in order: each path a ``long_input.json`` or a folder holding one. Returns
    ``{"file", "settings", "records"}`` per run.

    Raises:
        FileNotFoundError: a path has no ``long_input.json``.
        ValueError: a file is not a long-bench result (no ``records`` list).
    """
    runs = []
    for path in map(Path, paths):
        file = path / "long_input.json" if path.is_dir() else path
        if not file.is_file():
            raise FileNotFoundError(f"{path}: no long_input.json there; give a `srformer long-bench --output` folder "
                                    "or its long_input.json.")
        payload = json.loads(file.read_text())
        if not isinstance(payload, dict) or not isinstance(payload.get("records"), list):
            raise ValueError(f"{file} is not a `srformer long-bench` long_input.json (it has no `records` list).")
        runs.append({"file": str(file), "settings": payload.get("settings", {}), "records": payload["records"]})
    return runs


def _long_recall_column(record: dict) -> LongRecallColumn:
    return LongRecallColumn(int(record.get("trained_length") or 0), int(record.get("encoder_window") or 0),
                            int(record["finetune_steps"]), int(record["length"]))


_INDEXED = re.compile(r"(?P<base>.+) \((?P<index>flat|ivf)(?:, (?P<probes>\d+) probes)?\)")
"""A long-probe row of a mechanism searching a faiss index: ``knn (ivf, 32 probes)``, ``knn (flat)``."""


def _index_row(base: str, index: str, probes: int | None) -> str:
    """The row of ``base`` searching a faiss ``index``: ``knn (ivf index)`` (the default probes) or
    ``knn (ivf index, 4 probes)``."""
    other = probes is not None and probes != DEFAULT_INDEX_PROBES
    return f"{base} ({index} index{f', {probes} probes' if other else ''})"


def _long_probe_row(name: str) -> tuple[str, str]:
    """The row of a long-probe record name and the named setting it extends (itself when it is one)."""
    match = _INDEXED.fullmatch(name)
    if match is None:
        return name, name
    probes = int(match["probes"]) if match["probes"] else None
    return _index_row(match["base"], match["index"], probes), match["base"]


def _long_bench_row(variant: str) -> tuple[str, str]:
    """The row of a long-bench variant and the named setting it extends: a named setting is its own row;
    ``knn-ivf`` is ``knn (ivf index)``, ``srformer-lean`` is ``srformer (lean_cache=True)``."""
    if variant in NAMED_SETTINGS:
        return variant, variant
    options = LONG_INPUT_VARIANTS.get(variant, {})
    base = options.get("variant", variant)
    if options.get("knn_index"):
        return _index_row(base, options["knn_index"], options.get("index_probes")), base
    if options.get("lean_cache"):
        return f"{base} (lean_cache=True)", base
    return variant, variant


def _mean(values: Sequence[float | None]) -> float | None:
    present = [v for v in values if v is not None]
    return sum(present) / len(present) if present else None


def _long_recall(records: Sequence[dict], lengths: Sequence[int] | None
                 ) -> tuple[list[LongRecallColumn], dict[str, dict[LongRecallColumn, dict]], dict[str, str]]:
    """The recall columns (sorted), per row and column the mean off/on accuracy over seeds with the seeds, and each
    row's named setting."""
    cells: dict[str, dict[LongRecallColumn, dict[int, dict]]] = {}
    bases: dict[str, str] = {}
    for record in records:
        if lengths is not None and int(record["length"]) not in lengths:
            continue
        row, base = _long_probe_row(record["name"])
        bases.setdefault(row, base)
        by_seed = cells.setdefault(row, {}).setdefault(_long_recall_column(record), {})
        by_seed[int(record.get("seed", 0))] = record["metrics"]
    table: dict[str, dict[LongRecallColumn, dict]] = {}
    for row, columns in cells.items():
        table[row] = {}
        for column, by_seed in columns.items():
            seeds = sorted(by_seed)
            table[row][column] = {
                "seeds": seeds,
                "off": _mean([by_seed[s].get("off_token_accuracy") for s in seeds]),
                "on": _mean([by_seed[s].get("on_token_accuracy") for s in seeds]),
                "off_by_seed": [by_seed[s].get("off_token_accuracy") for s in seeds],
            }
    return sorted({c for columns in table.values() for c in columns}), table, bases


def _long_times(runs: Sequence[dict], lengths: Sequence[int] | None
                ) -> tuple[list[int], dict[str, dict[int, dict]], dict[str, str]]:
    """The long-bench lengths (sorted), per row and length the decode time per token of the first run that measured
    it (a refused record only where no run measured it) with its ratio to that run's ``segmented`` at that length,
    and each row's named setting."""
    times: dict[str, dict[int, dict]] = {}
    bases: dict[str, str] = {}
    for index, run in enumerate(runs):
        decode = {}
        for record in run["records"]:
            if record.get("kind") == "decode" and (lengths is None or int(record["length"]) in lengths):
                decode[(record["variant"], int(record["length"]))] = record
        for (variant, length), record in decode.items():
            row, base = _long_bench_row(variant)
            bases.setdefault(row, base)
            refused = bool(record.get("refused"))
            ms = None if refused else 1000 * float(record["seconds_per_token"])
            segmented = decode.get(("segmented", length))
            segmented_ms = (None if segmented is None or segmented.get("refused")
                            else 1000 * float(segmented["seconds_per_token"]))
            entry = {"variant": variant, "bench_file": index, "refused": refused, "ms_per_token": ms,
                     "segmented_ratio": ms / segmented_ms if ms is not None and segmented_ms else None,
                     "estimated_bytes": record.get("estimated_bytes") if refused else None}
            current = times.setdefault(row, {}).get(length)
            if current is None or (current["refused"] and not refused):
                times[row][length] = entry
    return sorted({n for row in times.values() for n in row}), times, bases


_NO_COST = {"bench_variant": None, "cost_from_variant": False, "bench_run": None, "step_ratio": None,
            "generate_ratio": None, "state_bytes_per_layer": None, "lean_state_bytes_per_layer": None}
"""The cost fields of a row that only the long-input files measure."""


def pareto_front(points: dict[str, tuple[float, float]]) -> list[str]:
    """The names whose ``(cost, quality)`` no other point dominates (cost no higher and quality no lower, one of
    them strictly), in ascending cost. Points with a NaN are left out."""
    clean = {name: p for name, p in points.items() if not any(math.isnan(v) for v in p)}
    front = [name for name, (cost, quality) in clean.items()
             if not any((c <= cost and q >= quality) and (c < cost or q > quality) for c, q in clean.values())]
    return sorted(front, key=lambda name: clean[name])


def pick_table(probe_records: Sequence[dict], bench_json: str | Path | Sequence[str | Path],
               where: CostColumns, *, long_probe_records: Sequence[dict] = (),
               long_bench: Sequence[str | Path] = (), long_lengths: Sequence[int] | None = None) -> dict:
    """Join probe quality and bench cost per named setting (rows in registry order), and the long-input columns.

    ``bench_json`` is one ``bench.json`` or several, each a run with its own ``full-sdpa``: a setting's cost comes
    from the first run that measured it, its ratios against that run's ``full-sdpa`` (a later run adds settings an
    earlier one lacks without mixing two runs' timings in one ratio).

    ``long_probe_records`` (:func:`load_long_probe_records`) give a recall column per input length and fine-tuning
    budget; ``long_bench`` (``long_input.json`` files) a time-per-token column per input length, from the first file
    that measured the variant at that length, as a multiple of that file's ``segmented``. ``long_lengths``: the
    input lengths (tokens) of both kinds of column (None: every length present). A mechanism they measure that is
    no named setting (:func:`_long_probe_row`, :func:`_long_bench_row`) is an extra row after its named setting's,
    with only the long-input columns.

    Returns:
        ``{"columns": [...], "cost": {...}, "long_input": {...}, "rows": [...], "fronts": {column label:
        [names]}}``, JSON-ready; a row holds ``name``, ``quality`` (per column label: off, on, seeds,
        gap_recovered; absent when not measured), the cost fields of :func:`_cost_row`, ``long_recall`` (per recall
        column label: off, on, seeds, off_by_seed), ``long_time`` (per time column label: ms_per_token,
        segmented_ratio, variant, bench_file, refused, estimated_bytes) and ``long_input_only`` (an extra row).

    Raises:
        ValueError: no probe record, the bench file has no ``full-sdpa`` record at ``where``, or a length of
            ``long_lengths`` is in no long-input file.
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
    long_runs = load_long_bench(long_bench)
    if long_lengths is not None:
        present = {int(r["length"]) for r in long_probe_records} | {
            int(r["length"]) for run in long_runs for r in run["records"] if r.get("kind") == "decode"}
        absent = [n for n in long_lengths if n not in present]
        if absent:
            raise ValueError(f"Long-input length(s) {absent} are in no --long-probe or --long-bench file; they hold "
                             f"{', '.join(str(n) for n in sorted(present)) or 'none'}.")
    recall_columns, recall, recall_bases = _long_recall(long_probe_records, long_lengths)
    time_lengths, times, time_bases = _long_times(long_runs, long_lengths)
    several = len({(c.trained_length, c.encoder_window) for c in recall_columns}) > 1
    recall_labels = {c: c.label(several) for c in recall_columns}

    def long_fields(name: str) -> dict:
        return {"long_recall": {recall_labels[c]: entry for c, entry in recall.get(name, {}).items()},
                "long_time": {time_label(n): entry for n, entry in sorted(times.get(name, {}).items())}}

    names = [name for name in NAMED_SETTINGS
             if any(name in quality[c] for c in columns) or name in recall or name in times]
    bases = time_bases | recall_bases
    extras = [name for name in bases if name not in NAMED_SETTINGS]
    rows = []
    for name in names:
        row = {"name": name, "quality": {c.label: quality[c][name] for c in columns if name in quality[c]}}
        rows.append(row | _cost_row(name, runs, decoder_layers) | long_fields(name) | {"long_input_only": False})
        for extra in (e for e in extras if bases[e] == name):
            rows.append({"name": extra, "quality": {}} | _NO_COST | long_fields(extra) | {"long_input_only": True})
    for extra in (e for e in extras if bases[e] not in names):
        rows.append({"name": extra, "quality": {}} | _NO_COST | long_fields(extra) | {"long_input_only": True})
    fronts = {}
    for column in columns:
        points = {row["name"]: (row["step_ratio"], row["quality"][column.label]["off"]) for row in rows
                  if column.label in row["quality"] and row["step_ratio"] is not None}
        fronts[column.label] = pareto_front(points)
    long_input = {
        "recall_columns": [asdict(c) | {"label": recall_labels[c]} for c in recall_columns],
        "time_columns": [{"length": n, "label": time_label(n)} for n in time_lengths],
        "bench_files": [{"file": run["file"], "settings": run["settings"]} for run in long_runs],
    }
    return {"columns": [asdict(c) | {"label": c.label, "short": c.short} for c in columns],
            "cost": asdict(where) | {"bench_runs": [str(file) for file in files]}, "long_input": long_input,
            "rows": rows, "fronts": fronts}


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


def _long_recall_cell(entry: dict | None) -> str:
    if entry is None:
        return "-"
    seeds = f" [{len(entry['seeds'])} seeds]" if len(entry["seeds"]) > 1 else ""
    return f"{_percent(entry['off'])}{seeds}"


def _long_time_cell(entry: dict | None) -> str:
    if entry is None:
        return "-"
    where = f" (file {entry['bench_file'] + 1})" if entry["bench_file"] else ""
    if entry["refused"] or entry["ms_per_token"] is None:
        return "refused" + where
    ratio = "" if entry["segmented_ratio"] is None else f" ({entry['segmented_ratio']:.2f})"
    return f"{entry['ms_per_token']:,.1f}{ratio}{where}"


def _long_legend(long_input: dict) -> str:
    """The legend of the long-input columns (empty without them)."""
    recall, time = long_input.get("recall_columns", []), long_input.get("time_columns", [])
    if not recall and not time:
        return ""
    parts = []
    if recall:
        trained = sorted({(c["trained_length"], c["encoder_window"]) for c in recall})
        shapes = " or ".join(f"trained at k={k or '?'}, read in encoder windows of {w or '?'} tokens"
                             for k, w in trained)
        several = (" (`k512 w256` in a heading: the trained length and window of that column)"
                   if len(trained) > 1 else "")
        parts.append(
            f"`{recall[0]['label']}` and the like: off-segment token accuracy in % of `srformer long-probe` at that "
            f"input length (k = 1024 tokens) of the models converted and fine-tuned for the steps after `convert+` "
            f"at a shorter length ({shapes}{several}), not trained further: the mean over the probe seeds present, "
            "\"[N seeds]\" when more than one")
    if time:
        files = long_input.get("bench_files", [])
        described = "; ".join(
            f"{'file ' + str(index + 1) + ': ' if len(files) > 1 else ''}{f['file']} (random-weight "
            f"{f['settings'].get('shape', '?')}, {f['settings'].get('new_tokens', '?')} new tokens, segment size "
            f"{f['settings'].get('segment_size', '?')})" for index, f in enumerate(files))
        parts.append(
            f"`{time[0]['label']}` and the like: milliseconds per generated token of `srformer long-bench` at that "
            "input length (batch 1, greedy, from a chunked encoding), and in brackets that time as a multiple of "
            "`segmented`'s at the same length in the same file; \"refused\": the variant's memory estimate "
            f"exceeded the run's budget, so it was not run; from {described}"
            + ("; \"(file N)\": from a later file, where no earlier one measured it" if len(files) > 1 else ""))
    return (
        "\n\nLong-input columns (synthetic recall and random-weight timings: no measure of quality or speed on real "
        "text or trained weights): " + "; ".join(parts) + ". A row with only long-input columns is a mechanism "
        "those files measure that is no named setting: `knn (ivf index)` and `knn (flat index)` are `knn` searching "
        "a faiss index (long-probe's `knn (ivf, 32 probes)`, long-bench's `knn-ivf`), `X (lean_cache=True)` is X "
        "with the lean decode state; \"-\": not measured."
    )


def pick_markdown(payload: dict) -> str:
    """The table of :func:`pick_table` in Markdown, with a legend."""
    cost = payload["cost"]
    labels = [c["label"] for c in payload["columns"]]
    short = {c["label"]: c["short"] for c in payload["columns"]}
    long_input = payload.get("long_input", {})
    recall_labels = [c["label"] for c in long_input.get("recall_columns", [])]
    time_labels = [c["label"] for c in long_input.get("time_columns", [])]
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
            **{label: _long_recall_cell(row.get("long_recall", {}).get(label)) for label in recall_labels},
            **{label: _long_time_cell(row.get("long_time", {}).get(label)) for label in time_labels},
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
        + _long_legend(long_input)
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
