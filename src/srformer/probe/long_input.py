"""Recall at inputs far longer than training (synthetic, labelled so): ``srformer long-probe``.

Takes the finished cells of a ``srformer probe`` run on the ``recall`` task (models converted and fine-tuned at one
input length, e.g. k = 512), gives each model chunked encoding with windows of the trained length
(:mod:`srformer.models.chunked_encoding`), and scores it, without further training, on held-out recall documents
of longer inputs (default 2,048 to 16,384 tokens: the same number of facts spread through more filler). Each
cell keeps the segment size it was trained with, so a longer input has more segments than the schedule's target
length: the segments the schedule skips are read through the mechanism's global or recurrent term only, or not at
all. The cells of every seed asked for (``--seeds``, default 0) are scored on the same documents. Off- and
on-segment token accuracy per length and seed are written to ``long_probe.json``; ``long_probe.md`` and
``long_probe.png`` show the mean over the seeds. Finished (cell, length, seed) rows are kept, so a rerun resumes.
"""

from __future__ import annotations

import itertools
import json
import time
import warnings
from collections.abc import Callable, Sequence
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import torch

from srformer.attention.knn import (
    DEFAULT_INDEX_CANDIDATES,
    DEFAULT_INDEX_PAGES,
    DEFAULT_INDEX_PROBES,
    DEFAULT_INDEX_RANK,
)
from srformer.core import named_config
from srformer.models.convert import convert
from srformer.probe.metrics import score
from srformer.probe.report import plt
from srformer.probe.tasks import ProbeVocabulary, TaskSpec, generate_examples
from srformer.probe.training import ModelShape, build_model, predict, predict_stepwise
from srformer.training.settings_base import MAX_SEED


@dataclass(frozen=True)
class LongProbeSettings:
    """What :func:`run_long_probe` scores.

    Attributes:
        runs: ``srformer probe --output`` folders whose ``cells/convert/recall-*`` cells are scored; a cell found
            in several (the same key) is taken from the last.
        variants: the named settings to score (their cells must be finished).
        seeds: the probe seeds whose cells are scored (each ``0 <= seed <=`` :data:`MAX_SEED`, at least one); every
            cell of every seed must be finished.
        lengths: test input lengths in tokens.
        encoder_window: tokens per encoder window; None: the window the cell was trained with (its
            ``encoder_window`` setting), else its trained input length.
        examples: held-out documents per length.
        batch_size: documents per forward pass.
        knn_index: for ``knn`` cells: None (default), the exact search, teacher-forced in one forward pass; or
            ``"flat"``/``"ivf"``, the faiss index of the encoder output at every length (``index_min_keys=1``),
            decoded one position at a time through the generation cache (:func:`~srformer.probe.training.
            predict_stepwise`), the path that searches it. The rows are named ``knn (ivf, 32 probes)`` and so on.
        index_probes: IVF cells scanned per query (None: the mechanism's default).
        index_rank: with ``knn_index="loki"``: the principal channels read per query (None: the default, 12).
        index_candidates: with ``knn_index="loki"``: the keys per head scored exactly (None: the default, 256).
        index_page: with ``knn_index="loki"``: keys per page of the first stage, which then reads the
            ``index_pages`` pages of best bound only (None: no pages); the row name then says ``pages b x P``.
        index_pages: with ``index_page``: the pages per head read (None: the default, 256).
        index_key_rank: with ``index_page``: the channels the keys of the pages read are scored on (None: the
            default, ``index_rank``); the row name then says ``r'=``.
        top_keys: the keys each head of a ``knn`` cell attends to (None: the cell's own, 32 for ``knn``); the row
            name then says ``top K``.
    """

    runs: tuple[str, ...]
    variants: tuple[str, ...]
    seeds: tuple[int, ...] = (0,)
    lengths: tuple[int, ...] = (2048, 4096, 8192, 16384)
    encoder_window: int | None = None
    examples: int = 128
    batch_size: int = 16
    knn_index: str | None = None
    index_probes: int | None = None
    index_rank: int | None = None
    index_candidates: int | None = None
    index_page: int | None = None
    index_pages: int | None = None
    index_key_rank: int | None = None
    top_keys: int | None = None

    def __post_init__(self) -> None:
        if not self.runs or not self.variants:
            raise ValueError("`runs` and `variants` must each name at least one.")
        if not self.seeds or any(isinstance(seed, bool) or not isinstance(seed, int) or not 0 <= seed <= MAX_SEED
                                 for seed in self.seeds):
            raise ValueError(f"`seeds` must name at least one seed, each an int in [0, {MAX_SEED}], "
                             f"got {self.seeds!r}.")
        if self.knn_index is not None and any(named_config(name).variant != "knn" for name in self.variants):
            raise ValueError("`knn_index` applies to knn cells only: give --variants knn (or knn-4).")
        if (self.index_page is not None or self.index_pages is not None) and self.knn_index != "loki":
            raise ValueError("`index_page` and `index_pages` apply to --knn-index loki only.")
        if self.index_key_rank is not None and self.index_page is None:
            raise ValueError("`index_key_rank` scores the keys of the pages read: give --index-page too.")
        if self.top_keys is not None and any(named_config(name).variant != "knn" for name in self.variants):
            raise ValueError("`top_keys` applies to knn cells only: give --variants knn (or knn-4).")
        if self.top_keys is not None and (isinstance(self.top_keys, bool) or self.top_keys < 1):
            raise ValueError(f"`top_keys` must be a positive number of keys, got {self.top_keys!r}.")
        if any(not isinstance(n, int) or n < 1 for n in self.lengths) or not self.lengths:
            raise ValueError(f"`lengths` must be positive numbers of tokens, got {self.lengths!r}.")
        for name in ("examples", "batch_size"):
            if not isinstance(getattr(self, name), int) or getattr(self, name) < 1:
                raise ValueError(f"`{name}` must be a positive int, got {getattr(self, name)!r}.")


def find_cells(runs: Sequence[str | Path], variants: Sequence[str], *, seed: int) -> dict[str, Path]:
    """The finished ``recall`` cells (``convert`` protocol, fine-tuned for any number of steps, 0 included) of
    ``variants`` and probe seed ``seed`` in ``runs``: name -> cell folder (holding ``cell.json`` and ``model.pt``). A
    later run wins over an earlier one; within a run, the cell of the named setting as registered wins over a cell
    run with extra ``--setting`` values.

    Raises:
        FileNotFoundError: for a variant with no finished cell of ``seed``, naming the seed and the runs searched.
    """
    found: dict[str, Path] = {}
    for run in runs:
        in_run: dict[str, tuple[bool, Path]] = {}
        for record_file in sorted(Path(run).glob("cells/convert/recall-*/*/cell.json")):
            record = json.loads(record_file.read_text())
            if record["name"] in variants and record["seed"] == seed and (record_file.parent / "model.pt").is_file():
                plain = not record.get("settings")
                if record["name"] not in in_run or plain:
                    in_run[record["name"]] = (plain, record_file.parent)
        found.update({name: folder for name, (_, folder) in in_run.items()})
    missing = [name for name in variants if name not in found]
    if missing:
        raise FileNotFoundError(
            f"No finished recall cell (convert protocol, seed {seed}, with model.pt) for {missing} in {list(runs)}: "
            f"run `srformer probe --tasks recall --protocols convert --seeds {seed}` for them first."
        )
    return found


def _label(name: str, settings: LongProbeSettings) -> str:
    """The row name: the variant, then in parentheses the index it searches and the keys it reads when not the
    cell's own (``knn (loki, r=12, C=256, top 128)``)."""
    parts = []
    if settings.knn_index == "loki":
        rank = settings.index_rank if settings.index_rank is not None else DEFAULT_INDEX_RANK
        pool = settings.index_candidates if settings.index_candidates is not None else DEFAULT_INDEX_CANDIDATES
        parts += ["loki", f"r={rank}", f"C={pool}"]
        if settings.index_page is not None:
            read = settings.index_pages if settings.index_pages is not None else DEFAULT_INDEX_PAGES
            parts.append(f"pages {settings.index_page} x {read}")
            if settings.index_key_rank is not None:
                parts.append(f"r'={settings.index_key_rank}")
    elif settings.knn_index is not None:
        probes = settings.index_probes if settings.index_probes is not None else DEFAULT_INDEX_PROBES
        parts += [settings.knn_index] + ([f"{probes} probes"] if settings.knn_index == "ivf" else [])
    if settings.top_keys is not None:
        parts.append(f"top {settings.top_keys}")
    return f"{name} ({', '.join(parts)})" if parts else name


def _model(cell: Path, record: dict, encoder_window: int, settings: LongProbeSettings) -> Any:
    budget = record["budget"]
    vocabulary = ProbeVocabulary(**budget["vocabulary"])
    shape = ModelShape(**budget["shape"])
    index = {} if settings.knn_index is None else {
        "knn_index": settings.knn_index, "index_min_keys": 1, "index_probes": settings.index_probes,
        "index_rank": settings.index_rank, "index_candidates": settings.index_candidates,
        "index_page": settings.index_page, "index_pages": settings.index_pages,
        "index_key_rank": settings.index_key_rank}
    if settings.top_keys is not None:
        index["top_keys"] = settings.top_keys
    own = {k: v for k, v in record.get("settings", {}).items() if k != "encoder_window" and k not in index}
    config = named_config(record["name"], segment_size=record["segment_size"] or min(budget["segment_sizes"]),
                          target_length=record["target_length"], encoder_window=encoder_window, **own, **index)
    model = convert(build_model(vocabulary, shape, record["seed"]), config)
    model.load_state_dict(torch.load(cell / "model.pt", weights_only=True, map_location="cpu"))
    return model.eval(), vocabulary


def run_long_probe(settings: LongProbeSettings, output: str | Path, *,
                   log: Callable[[str], None] = print) -> list[dict]:
    """Score every (variant, length, seed) of ``settings`` not yet in ``output/long_probe.json``; returns every
    record of the file. Each record holds its ``seed``; a record without one (written before seeds were scored)
    counts as seed 0. Every seed's cell is scored on the same documents.

    Raises:
        FileNotFoundError: as :func:`find_cells`, for the first seed with a missing cell (before anything is scored).
    """
    folder = Path(output)
    folder.mkdir(parents=True, exist_ok=True)
    path = folder / "long_probe.json"
    payload = json.loads(path.read_text()) if path.exists() else {"records": []}
    records: list[dict] = payload["records"]
    done = {(r["name"], r["length"], r.get("seed", 0)) for r in records}
    cells = {seed: find_cells(settings.runs, settings.variants, seed=seed) for seed in settings.seeds}
    read = predict if settings.knn_index is None else predict_stepwise
    for name, seed in itertools.product(settings.variants, settings.seeds):
        label = _label(name, settings)
        todo = [n for n in settings.lengths if (label, n, seed) not in done]
        if not todo:
            continue
        cell = cells[seed][name]
        record = json.loads((cell / "cell.json").read_text())
        window = settings.encoder_window or record.get("settings", {}).get("encoder_window") or record["length"]
        model, vocabulary = _model(cell, record, window, settings)
        segment_size = record["segment_size"] or min(record["budget"]["segment_sizes"])
        spec = TaskSpec("recall", record["n"])
        for length in todo:
            examples = generate_examples(spec, vocabulary, count=settings.examples, length=length,
                                         segment_size=segment_size, target_length=record["target_length"],
                                         seed=20_000 + length)
            started = time.perf_counter()
            with torch.no_grad(), warnings.catch_warnings():
                # more segments than the target length is the point of this probe: no warning per batch
                warnings.filterwarnings("ignore", message="An encoder input has .* segments")
                predictions = read(model, examples, vocabulary, batch_size=settings.batch_size)
            metrics = score(predictions, examples, segment_size=segment_size,
                            target_length=record["target_length"])
            model.eval()  # predict() leaves the model in training mode
            row = {"name": label, "length": length, "seed": seed, "knn_index": settings.knn_index,
                   "trained_length": record["length"], "segment_size": segment_size,
                   "encoder_window": window, "finetune_steps": record["budget"]["train"]["steps"],
                   "cell": record["key"], "metrics": metrics, "seconds": time.perf_counter() - started}
            records.append(row)
            path.write_text(json.dumps(payload, indent=2))
            log(f"long-probe: {label} (seed {seed}) at {length:,} tokens: off {_pct(metrics['off_token_accuracy'])}, "
                f"on {_pct(metrics['on_token_accuracy'])} ({row['seconds']:.0f} s)")
    path.write_text(json.dumps(payload, indent=2))
    return records


def _pct(value: float | None) -> str:
    return "-" if value is None else f"{100 * value:.1f}"


def _by_cell(records: Sequence[dict]) -> dict[tuple[str, int], list[dict]]:
    """The records of each (name, length), one per seed in seed order (a record without ``seed`` is seed 0; of two
    records of the same seed the later one counts)."""
    rows: dict[tuple[str, int, int], dict] = {(r["name"], r["length"], r.get("seed", 0)): r for r in records}
    cells: dict[tuple[str, int], list[dict]] = {}
    for (name, length, _), record in sorted(rows.items(), key=lambda item: item[0][2]):
        cells.setdefault((name, length), []).append(record)
    return cells


def _mean(values: Sequence[float | None]) -> float | None:
    """The mean of the values that exist (None when none does)."""
    present = [v for v in values if v is not None]
    return sum(present) / len(present) if present else None


def _seed_figure(rows: Sequence[dict], key: str) -> str:
    """``metrics[key]`` of a cell's seeds in %: the mean over the seeds, followed by the per-seed values in
    parentheses (seed order) when there are two or more seeds and they differ at the printed precision, e.g.
    ``99.2 (98.9, 99.5)``; ``-`` for a value that does not exist."""
    values = [r["metrics"][key] for r in rows]
    mean = _pct(_mean(values))
    each = [_pct(v) for v in values]
    return mean if len(set(each)) < 2 else f"{mean} ({', '.join(each)})"


def long_probe_table(records: Sequence[dict]) -> str:
    """The Markdown report: off-segment / on-segment token accuracy (%) per variant and test length, the mean over
    the seeds present in each cell with the per-seed values in parentheses where they differ
    (:func:`_seed_figure`); a row's name is followed by its fine-tuning steps (0: scored as converted)."""
    lengths = sorted({r["length"] for r in records})
    names = list(dict.fromkeys(r["name"] for r in records))
    by_cell = _by_cell(records)
    seeds = sorted({r.get("seed", 0) for r in records})
    first = records[0] if records else {}
    lines = [
        "# Recall at inputs longer than training (synthetic)",
        "",
        f"Each model was converted and fine-tuned (for the steps in parentheses; 0: none, scored as converted) on "
        f"recall at {first.get('trained_length', '?')} tokens (segment size {first.get('segment_size', '?')}), then "
        "scored without further training on longer documents (the same 256 stored facts in more filler), encoded "
        "in windows of " + " or ".join(f"{w:,}" for w in sorted({r.get("encoder_window", 0) for r in records}))
        + " tokens. Rows marked with an index search it one decoder position at a time, as generate() does; the "
        "others are teacher-forced in one pass. Cells: off-segment / on-segment token accuracy in %, the mean over "
        f"the probe seeds present (seed{'s' if len(seeds) > 1 else ''} {', '.join(map(str, seeds))}), with the "
        "per-seed values in parentheses where there are two or more and they differ.",
        "",
        "| mechanism (fine-tuning steps) | " + " | ".join(f"{n:,}" for n in lengths) + " |",
        "|---|" + "---|" * len(lengths),
    ]
    for name in names:
        steps = ", ".join(str(n) for n in sorted({int(r["finetune_steps"]) for r in records if r["name"] == name}))
        cells = []
        for n in lengths:
            rows = by_cell.get((name, n))
            cells.append("-" if rows is None else f"{_seed_figure(rows, 'off_token_accuracy')} / "
                                                   f"{_seed_figure(rows, 'on_token_accuracy')}")
        lines.append(f"| {name} ({steps}) | " + " | ".join(cells) + " |")
    on = [next((by_cell[(name, n)][0]["metrics"]["on_positions"] for name in names if (name, n) in by_cell), 0)
          for n in lengths]
    off = [next((by_cell[(name, n)][0]["metrics"]["off_positions"] for name in names if (name, n) in by_cell), 0)
           for n in lengths]
    lines += ["", "Scored positions per length and seed (on-segment / off-segment): "
              + ", ".join(f"{n:,}: {a} / {b}" for n, a, b in zip(lengths, on, off, strict=True))
              + ". A longer input has more segments but the schedule still reads one per decoder step, so few "
              "queried facts lie on the scheduled segment and the on-segment figures rest on a handful of answers."]
    return "\n".join(lines) + "\n"


def plot_long_probe(records: Sequence[dict], path: str | Path) -> Path:
    """Off-segment accuracy (the mean over the seeds present) against test length (log axis), one line per
    variant."""
    path = Path(path)
    by_cell = _by_cell(records)
    fig, ax = plt.subplots(figsize=(8.5, 4.5))
    for index, name in enumerate(dict.fromkeys(r["name"] for r in records)):
        lengths = sorted(n for label, n in by_cell if label == name)
        means = [_mean([r["metrics"]["off_token_accuracy"] for r in by_cell[(name, n)]]) for n in lengths]
        ax.plot(lengths, [100 * (m or 0) for m in means],
                "os^vD<>"[index % 7] + "-", color=plt.get_cmap("tab20")(index % 20), label=name)
    ax.set_xscale("log", base=2)
    ax.set_xlabel("test input length (tokens)")
    ax.set_ylabel("off-segment token accuracy (%)")
    ax.set_title("Recall at inputs longer than training (synthetic)", fontsize=10)
    ax.legend(fontsize=8, loc="center left", bbox_to_anchor=(1.0, 0.5))
    fig.tight_layout()
    fig.savefig(path, dpi=120)
    plt.close(fig)
    return path


def write_long_probe(output: str | Path) -> dict[str, Path]:
    """Write ``long_probe.md`` and ``long_probe.png`` from ``output/long_probe.json``.

    Raises:
        FileNotFoundError: if the folder has no ``long_probe.json``.
    """
    folder = Path(output)
    records = json.loads((folder / "long_probe.json").read_text())["records"]
    table = folder / "long_probe.md"
    table.write_text(long_probe_table(records))
    return {"json": folder / "long_probe.json", "markdown": table,
            "plot": plot_long_probe(records, folder / "long_probe.png")}
