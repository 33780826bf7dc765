"""The probe grid: cells of (protocol, task, size, length, variant, segment size, seed), resumable.

Protocols:

- ``scratch``: every variant is a T5 initialised with the cell's seed, converted with
  :func:`srformer.convert` and trained for ``steps`` steps with the length curriculum.
- ``convert`` (the paper's protocol, Sec. 4.1): the ``scratch`` full-attention model of the same task,
  size, length and seed is the base; it is converted to every variant (``full`` included, as the
  control that just trains longer) and fine-tuned for ``finetune_steps`` steps at the final length.
  Every variant gets the same fine-tuning budget. With ``finetune_steps = 0`` ("convert+0") every converted model
  is scored straight after conversion: no optimizer step, its record has ``"steps": 0`` and ``"final_loss": None``
  (its :func:`cell_budget` differs from a fine-tuned cell's, so the two are never taken for each other; as for any
  other budget change, the cell is run again in the same folder, so give a zero-step grid its own output).

A finished cell writes ``cell.json`` and is skipped on a re-run with the same budget
(:func:`cell_budget`) and the same extra settings of its named setting (``variant_settings``, ``srformer probe
--setting``; recorded as ``settings``, empty when none; a record without the entry was made with none). A cell
run with extra settings has a folder of its own (:func:`cell_folder`: its key and ``@NAME=VALUE+...``), so that
exploring a setting never overwrites the cell of the named setting as registered; the same holds for a base
trained with extra ``full`` settings. The ``scratch`` full-attention model is saved
(``bases/<problem>-seed<seed>/model.pt``, a state dict) for the ``convert`` cells. Every cell also keeps its
trained (converted) model's state dict next to its record (``cells/<key>/model.pt``, about 1.5 MB at t5-tiny's
shape), so that a finished cell can be analysed again (for example the recurrent-term diagnostics) without
retraining.
"""

from __future__ import annotations

import json
import multiprocessing
import os
import time
from concurrent.futures import FIRST_COMPLETED, Future, ProcessPoolExecutor, wait
from dataclasses import asdict, dataclass, field, replace
from pathlib import Path

import torch
from tqdm.auto import tqdm

from srformer.config import NAMED_SETTINGS, SEGMENT_FREE, check_variant_settings, named_config, settings_suffix
from srformer.evaluation.report import write_metrics_json
from srformer.models.convert import convert
from srformer.probe.metrics import gap_recovered, score
from srformer.probe.tasks import TASKS, ProbeVocabulary, TaskSpec, generate_examples
from srformer.probe.training import ModelShape, TrainSettings, build_model, diagnose, predict, train_model
from srformer.training.settings_base import FineTuning, PeakLearningRate, SeedGrid

#: Held-out examples of the final recurrent-term measurement of a cell (``diagnostics_eval``).
DIAGNOSTIC_EXAMPLES = 64

PROTOCOLS: tuple[str, ...] = ("scratch", "convert")

#: The default grid's variants: the paper's comparison (``--variants`` takes every name of
#: :data:`srformer.config.NAMED_SETTINGS`).
DEFAULT_VARIANTS: tuple[str, ...] = ("full", "segmented", "srformer")


@dataclass
class ProbeSettings(FineTuning, PeakLearningRate, SeedGrid):
    """The grid and the budget (lengths in tokens, steps are optimizer steps).

    The defaults are the grid that ``srformer probe`` runs with no options: every task at k = 128, s = 8
    (16 segments), recall with 4 and 16 queried facts, the paper's three variants, both protocols, 1,000 steps
    per scratch cell: 30 cells, under 30 minutes on 2 CPU cores with two workers (docs/probe.md, "Default grid").

    Inherited (:mod:`srformer.training.settings_base`): ``batch_size``, ``progress``, ``finetune_steps`` (of a
    ``convert`` cell; 0 scores the converted model without fine-tuning), ``finetune_learning_rate``
    (:class:`~srformer.training.settings_base.FineTuning`);
    ``learning_rate`` (of a ``scratch`` cell, :class:`~srformer.training.settings_base.PeakLearningRate`); ``seeds``
    (model initialisation and data-stream seeds, :class:`~srformer.training.settings_base.SeedGrid`).

    Attributes:
        tasks: task names (:data:`srformer.probe.tasks.TASKS`).
        recall_sizes: ``n`` values of ``recall`` (the capacity curve).
        size: ``n`` of ``copy``, ``reverse`` and ``aggregate``.
        lengths: document lengths ``k``.
        segment_sizes: ``s`` values (segment-free variants run once).
        variants: names of :data:`srformer.config.NAMED_SETTINGS`, as ``srformer compare`` takes them (default
            :data:`DEFAULT_VARIANTS`).
        protocols: :data:`PROTOCOLS` to run.
        steps: training steps of a ``scratch`` cell.
        curriculum_start, curriculum_hold, curriculum_ramp: see :class:`srformer.probe.training.TrainSettings`.
        min_curriculum_segments: the ``scratch`` curriculum's documents hold at least this many segments of the
            cell's shape (:func:`cell_shape`: a segment-free variant gets the grid's smallest segment size, so every
            variant of a problem and segment size trains on the same documents), capped at the cell's length; 1 = no
            floor (the behaviour before the setting: at s = 8 the first half of training then has one segment and
            no recurrent term). A saved record without it counts as 1 (:func:`cell_budget`).
        eval_examples: held-out examples per cell (their own seeded stream).
        diagnostics_every: measure the recurrent term of cells with SRformer layers every this many training
            steps and at the last one (:func:`srformer.probe.training.train_model`); 0 disables. Not part of
            :func:`cell_budget` (it does not change the training), so saved cells stay valid.
        shape: the T5 architecture.
        vocabulary: the probe vocabulary.
        workers: cells trained at once, each in its own process with ``cpu_count // workers`` torch threads
            (at least 1); 0 = one per available CPU core on the CPU, 1 on CUDA. A ``convert`` cell starts once the
            ``scratch`` full-attention base of its problem is saved. Not part of :func:`cell_budget`.
        device: ``"auto"`` (CUDA when available, else the CPU), ``"cpu"``, ``"cuda"`` or ``"cuda:N"``. Not part
            of :func:`cell_budget`.
        variant_settings: extra :class:`~srformer.config.SRformerConfig` settings per named setting of
            ``variants`` (``{"window": {"window_size": 96}}``; ``srformer probe --setting``); they win over the named
            setting's own values and are recorded with every cell.
    """

    tasks: tuple[str, ...] = TASKS
    recall_sizes: tuple[int, ...] = (4, 16)
    size: int = 4
    lengths: tuple[int, ...] = (128,)
    segment_sizes: tuple[int, ...] = (8,)
    variants: tuple[str, ...] = DEFAULT_VARIANTS
    protocols: tuple[str, ...] = PROTOCOLS
    steps: int = 1000
    finetune_steps: int = 100
    batch_size: int = 32
    learning_rate: float = 1e-3
    curriculum_start: int = 8
    curriculum_hold: float = 0.5
    curriculum_ramp: float = 0.3
    min_curriculum_segments: int = 2
    eval_examples: int = 256
    diagnostics_every: int = 100
    shape: ModelShape = field(default_factory=ModelShape)
    vocabulary: ProbeVocabulary = field(default_factory=ProbeVocabulary)
    workers: int = 0
    device: str = "auto"
    variant_settings: dict[str, dict] = field(default_factory=dict)

    def validate(self) -> None:
        super().validate()
        unknown = [t for t in self.tasks if t not in TASKS]
        if unknown:
            raise ValueError(f"Unknown probe tasks {unknown}: choose from {', '.join(TASKS)}.")
        names = [n for n in self.variants if n not in NAMED_SETTINGS]
        if names:
            raise ValueError(f"Unknown variant names {names}: choose from {', '.join(NAMED_SETTINGS)}.")
        protocols = [p for p in self.protocols if p not in PROTOCOLS]
        if protocols:
            raise ValueError(f"Unknown protocols {protocols}: choose from {', '.join(PROTOCOLS)}.")
        for name in ("tasks", "variants", "protocols", "lengths", "segment_sizes"):
            if not getattr(self, name):
                raise ValueError(f"`{name}` is empty: give at least one value.")
        if "recall" in self.tasks and not self.recall_sizes:
            raise ValueError("`recall_sizes` is empty: give at least one recall size.")
        for name in ("steps", "eval_examples", "size", "min_curriculum_segments"):
            if getattr(self, name) < 1:
                raise ValueError(f"`{name}` must be >= 1, got {getattr(self, name)}.")
        if self.diagnostics_every < 0:
            raise ValueError(f"`diagnostics_every` must be >= 0 (0 disables), got {self.diagnostics_every}.")
        if self.workers < 0:
            raise ValueError(f"`workers` must be >= 0 (0 = one per CPU core), got {self.workers}.")
        resolve_device(self.device)
        if any(s < 1 for s in self.segment_sizes) or any(k < 2 for k in self.lengths):
            raise ValueError("segment sizes must be >= 1 and lengths >= 2 tokens.")
        cells = grid_cells(self)
        check_variant_settings(self.variant_settings, self.variants,
                               lambda name: {cell_shape(c, self) for c in cells if c.name == name})


@dataclass(frozen=True)
class ProbeCell:
    """One training run: a named setting on one task instance, under one protocol."""

    protocol: str
    task: str
    n: int
    length: int
    name: str
    segment_size: int | None
    seed: int

    @property
    def problem(self) -> str:
        return f"{self.task}-n{self.n}-k{self.length}"

    @property
    def key(self) -> str:
        size = "" if self.segment_size is None else f"-s{self.segment_size}"
        return f"{self.protocol}/{self.problem}/{self.name}{size}-seed{self.seed}"


def schedule_length(spec: TaskSpec, length: int, segment_size: int) -> int:
    """The schedule's ``T`` for a cell: the target length with ``</s>``, at least the number of segments
    ``ceil(k / s)`` so that every segment is some step's segment."""
    return max(spec.target_tokens + 1, -(-length // segment_size))


def grid_cells(settings: ProbeSettings) -> list[ProbeCell]:
    """Every cell in run order: problems outermost; within a problem ``scratch`` before ``convert``
    (whose base is the ``scratch`` full model), and ``full`` first."""
    names = sorted(settings.variants, key=lambda n: n != "full")
    cells = []
    for task in settings.tasks:
        sizes = settings.recall_sizes if task == "recall" else (settings.size,)
        for n in sizes:
            for length in settings.lengths:
                for seed in settings.seeds:
                    for protocol in PROTOCOLS:
                        if protocol not in settings.protocols:
                            continue
                        for name in names:
                            for s in ([None] if name in SEGMENT_FREE else settings.segment_sizes):
                                cells.append(ProbeCell(protocol, task, n, length, name, s, seed))
    return list(dict.fromkeys(cells))


def cell_shape(cell: ProbeCell, settings: ProbeSettings) -> tuple[int, int]:
    """``(segment_size, target_length)`` of a cell's config in tokens: a segment-free cell gets the smallest segment
    size; ``T`` is the largest :func:`schedule_length` over the segment sizes (one ``T`` per problem)."""
    spec = TaskSpec(cell.task, cell.n)
    return (cell.segment_size or min(settings.segment_sizes),
            max(schedule_length(spec, cell.length, s) for s in settings.segment_sizes))


def cell_settings(cell: ProbeCell, settings: ProbeSettings) -> dict:
    """What a cell's result depends on in its named setting's extra settings: ``{"settings": ...}``, plus the
    ``full`` base's as ``base_settings`` for a ``convert`` cell when it has any (kept out when empty, so that a
    record written before the option existed still matches)."""
    own = {"settings": settings.variant_settings.get(cell.name, {})}
    base = settings.variant_settings.get("full", {})
    if cell.protocol == "convert" and base:
        own["base_settings"] = base
    return json.loads(json.dumps(own))


def cell_folder(cell: ProbeCell, settings: ProbeSettings) -> str:
    """The folder of ``cell`` under ``cells/``: its key, followed by :func:`~srformer.config.settings_suffix` of
    its extra settings (:func:`cell_settings`; nothing when none, the folder of a grid without ``--setting``)."""
    extra = cell_settings(cell, settings)
    return cell.key + settings_suffix(extra["settings"], extra.get("base_settings"))


def _base_dir(output: Path, cell: ProbeCell, settings: ProbeSettings) -> Path:
    base = f"{cell.problem}-seed{cell.seed}"
    return output / "bases" / (base + settings_suffix(settings.variant_settings.get("full")))


def _adopt(folder: Path, legacy: Path, record_name: str, wanted: dict) -> None:
    """Move a cell (or base) saved by an older version under its plain key to ``folder``, its own folder now, when
    its record was made with the extra settings ``wanted``: a finished run is kept, not trained again. A ``folder``
    that already exists (even unfinished) is left as it is."""
    if folder == legacy or folder.exists() or not (legacy / record_name).is_file():
        return
    if same_cell_settings(json.loads((legacy / record_name).read_text()), wanted):
        folder.parent.mkdir(parents=True, exist_ok=True)
        legacy.rename(folder)


def base_of(cell: ProbeCell) -> ProbeCell:
    """The ``scratch`` full-attention cell whose model is the base of ``cell``'s ``convert`` protocol."""
    return replace(cell, protocol="scratch", name="full", segment_size=None)


def _base_ready(cell: ProbeCell, settings: ProbeSettings, output: Path) -> bool:
    """Whether the base of a ``convert`` cell is saved with the grid's budget and the ``full`` settings."""
    _adopt_base(cell, settings, output)
    base = _base_dir(output, cell, settings)
    return ((base / "model.pt").is_file() and _saved(base / "budget.json", cell_budget(settings, "scratch"),
                                                     cell_settings(base_of(cell), settings)) is not None)


def _adopt_base(cell: ProbeCell, settings: ProbeSettings, output: Path) -> None:
    """:func:`_adopt` for the base of a ``convert`` cell."""
    _adopt(_base_dir(output, cell, settings), output / "bases" / f"{cell.problem}-seed{cell.seed}", "budget.json",
           cell_settings(base_of(cell), settings))


def _forget_base(cell: ProbeCell, settings: ProbeSettings, output: Path) -> None:
    """Drop the record of a ``convert`` cell's base cell, so that running it trains (and saves) the base again."""
    (output / "cells" / cell_folder(base_of(cell), settings) / "cell.json").unlink(missing_ok=True)


def _train_settings(settings: ProbeSettings, protocol: str) -> TrainSettings:
    if protocol == "scratch":
        return TrainSettings(steps=settings.steps, batch_size=settings.batch_size,
                             learning_rate=settings.learning_rate, warmup=min(100, settings.steps // 10),
                             curriculum_start=settings.curriculum_start, curriculum_hold=settings.curriculum_hold,
                             curriculum_ramp=settings.curriculum_ramp,
                             min_curriculum_segments=settings.min_curriculum_segments)
    return TrainSettings(steps=settings.finetune_steps, batch_size=settings.batch_size,
                         learning_rate=settings.finetune_learning_rate, warmup=min(50, settings.finetune_steps // 10),
                         curriculum_start=0, curriculum_ramp=0.0)


def cell_budget(settings: ProbeSettings, protocol: str) -> dict:
    """What a cell's result depends on besides its key: training budget, evaluation size, model shape,
    vocabulary and every segment size (they set ``T``). A saved cell with another budget is re-run; a
    ``convert`` cell also records its base's budget. A saved budget whose training settings lack
    ``min_curriculum_segments`` was made before the setting existed, without a floor: it is read as 1
    (:func:`saved_budget`), so it matches ``min_curriculum_segments=1`` only."""
    budget = {
        "train": asdict(_train_settings(settings, protocol)), "eval_examples": settings.eval_examples,
        "shape": asdict(settings.shape), "vocabulary": asdict(settings.vocabulary),
        "segment_sizes": list(settings.segment_sizes),
    }
    if protocol == "convert":
        budget["base"] = cell_budget(settings, "scratch")
    return budget


def saved_budget(budget: dict | None) -> dict | None:
    """A saved record's budget with the defaults of settings added after it was written: a ``train`` entry (its
    own, and its base's under ``base``) without ``min_curriculum_segments`` gets 1, the behaviour it was trained
    with. Returns a new dict (None for None)."""
    if budget is None:
        return None
    budget = json.loads(json.dumps(budget))
    for part in (budget, budget.get("base")):
        if isinstance(part, dict) and isinstance(part.get("train"), dict):
            part["train"].setdefault("min_curriculum_segments", 1)
    return budget


def same_cell_settings(record: dict, wanted: dict) -> bool:
    """Whether a saved record was made with the extra settings ``wanted`` (from :func:`cell_settings`); a missing
    ``settings`` or ``base_settings`` entry counts as none."""
    return all(record.get(key, {}) == wanted.get(key, {}) for key in ("settings", "base_settings"))


def _saved(path: Path, budget: dict, wanted: dict | None = None) -> dict | None:
    if not path.is_file():
        return None
    record = json.loads(path.read_text())
    if saved_budget(record.get("budget")) == budget and same_cell_settings(record, wanted or {}):
        return record
    tqdm.write(f"{path} was made with other settings; running it again.")
    return None


def _move(model: torch.nn.Module, device: str) -> None:
    """Move ``model`` to ``ProbeSettings.device`` (typed as a module: transformers' typing of ``to`` confuses mypy)."""
    model.to(resolve_device(device))


def _cpu_state(model: torch.nn.Module) -> dict[str, torch.Tensor]:
    """The model's state dict on the CPU (a saved cell loads on any machine)."""
    return {name: tensor.detach().cpu() for name, tensor in model.state_dict().items()}


def run_cell(cell: ProbeCell, settings: ProbeSettings, output: Path) -> dict:
    """Train and score one cell, or read its saved record when it was made with the same budget
    (:func:`cell_budget`) and extra settings (:func:`cell_settings`). Returns the record written to ``cell.json``.

    For a model with recurrent SRformer layers and ``diagnostics_every > 0``, the record holds
    ``diagnostics`` (the training-time measurements of :func:`~srformer.probe.training.train_model`) and
    ``diagnostics_eval`` (:func:`~srformer.probe.training.diagnose` on the first :data:`DIAGNOSTIC_EXAMPLES`
    held-out evaluation examples, after training); otherwise ``[]`` and None."""
    folder = cell_folder(cell, settings)
    record_file = output / "cells" / folder / "cell.json"
    budget = cell_budget(settings, cell.protocol)
    extra = cell_settings(cell, settings)
    _adopt(record_file.parent, output / "cells" / cell.key, "cell.json", extra)
    saved = _saved(record_file, budget, extra)
    spec = TaskSpec(cell.task, cell.n)
    segment_size, target_length = cell_shape(cell, settings)
    config = named_config(cell.name, segment_size=segment_size, target_length=target_length, **extra["settings"])
    vocabulary = settings.vocabulary
    if saved is not None:
        if (saved.get("diagnostics_eval") is None and settings.diagnostics_every and config.variant == "srformer"
                and (record_file.parent / "model.pt").is_file()):
            # a cell finished before the diagnostics existed: measure its saved model (no training)
            model = convert(build_model(vocabulary, settings.shape, cell.seed), config)
            model.load_state_dict(torch.load(record_file.parent / "model.pt", weights_only=True, map_location="cpu"))
            _move(model, settings.device)
            examples = generate_examples(spec, vocabulary, count=settings.eval_examples, length=cell.length,
                                         segment_size=segment_size, target_length=target_length,
                                         seed=10_000 + cell.seed)
            saved["diagnostics_eval"] = diagnose(model, examples[:DIAGNOSTIC_EXAMPLES], vocabulary)
            saved.setdefault("diagnostics", [])
            write_metrics_json(record_file, saved)
        return saved
    if cell.protocol == "scratch":
        model = convert(build_model(vocabulary, settings.shape, cell.seed), config)
    else:
        if not _base_ready(cell, settings, output):
            _forget_base(cell, settings, output)
            run_cell(base_of(cell), settings, output)
        model = build_model(vocabulary, settings.shape, cell.seed)
        model.load_state_dict(torch.load(_base_dir(output, cell, settings) / "model.pt", weights_only=True,
                                         map_location="cpu"))
        model = convert(model, config)
    _move(model, settings.device)
    train = _train_settings(settings, cell.protocol)
    bar = tqdm(total=train.steps, desc=folder, unit="step", leave=False, disable=not settings.progress)

    def on_step(step: int, loss: float, length: int) -> None:
        bar.update(1)
        if step % 10 == 0:
            bar.set_postfix(loss=f"{loss:.3f}", k=length)

    summary = train_model(model, spec, vocabulary, train, length=cell.length, segment_size=segment_size,
                          target_length=target_length, seed=cell.seed, on_step=on_step,
                          diagnostics_every=settings.diagnostics_every)
    bar.close()
    if cell.protocol == "scratch" and cell.name == "full":
        base = _base_dir(output, cell, settings)
        base.mkdir(parents=True, exist_ok=True)
        torch.save(_cpu_state(model), base / "model.pt")
        write_metrics_json(base / "budget.json", {"budget": budget, **extra})
    record_file.parent.mkdir(parents=True, exist_ok=True)
    torch.save(_cpu_state(model), record_file.parent / "model.pt")
    examples = generate_examples(spec, vocabulary, count=settings.eval_examples, length=cell.length,
                                 segment_size=segment_size, target_length=target_length,
                                 seed=10_000 + cell.seed)
    started = time.perf_counter()
    predictions = predict(model, examples, vocabulary)
    metrics = score(predictions, examples, segment_size=segment_size, target_length=target_length)
    eval_seconds = time.perf_counter() - started
    diagnostics_eval = (diagnose(model, examples[:DIAGNOSTIC_EXAMPLES], vocabulary)
                        if settings.diagnostics_every else None)
    record = {
        **asdict(cell), "key": folder, "target_length": target_length, "chance": vocabulary.chance(cell.task),
        "metrics": metrics, "train_seconds": summary["seconds"], "final_loss": summary["final_loss"],
        "steps": train.steps, "eval_seconds": eval_seconds, "budget": budget, **extra,
        "diagnostics": summary["diagnostics"], "diagnostics_eval": diagnostics_eval,
        "sample": [{"document_tokens": len(e.source), "target": vocabulary.decode(e.target),
                    "prediction": vocabulary.decode(p)} for e, p in zip(examples[:3], predictions[:3], strict=True)],
    }
    write_metrics_json(record_file, record)
    return record


def _reference(records: list[dict], record: dict, name: str) -> dict | None:
    for other in records:
        if (other["name"] == name and other["protocol"] == record["protocol"] and other["task"] == record["task"]
                and other["n"] == record["n"] and other["length"] == record["length"]
                and other["seed"] == record["seed"]
                and (name in SEGMENT_FREE or other["segment_size"] == record["segment_size"])):
            return other
    return None


def add_gap_recovered(records: list[dict]) -> None:
    """Add ``gap_recovered`` (token accuracy, overall and off-segment) to every segmented record, against
    ``segmented`` and ``full`` of the same protocol, problem, segment size and seed (in place)."""
    for record in records:
        record["gap_recovered"] = {}
        if record["segment_size"] is None:
            continue
        segmented = _reference(records, record, "segmented")
        full = next((r for r in records if r["name"] == "full" and r["protocol"] == record["protocol"]
                     and r["task"] == record["task"] and r["n"] == record["n"] and r["length"] == record["length"]
                     and r["seed"] == record["seed"]), None)
        if segmented is None or full is None:
            continue
        for key in ("token_accuracy", "off_token_accuracy"):
            record["gap_recovered"][key] = gap_recovered(
                record["metrics"][key], segmented["metrics"][key], full["metrics"][key]
            )


def resolve_device(device: str) -> torch.device:
    """The torch device of ``ProbeSettings.device``: ``"auto"`` is CUDA when available, else the CPU.

    Raises:
        ValueError: for a name torch does not know, or CUDA asked for where none is available.
    """
    if device == "auto":
        return torch.device("cuda" if torch.cuda.is_available() else "cpu")
    try:
        resolved = torch.device(device)
    except RuntimeError as error:
        raise ValueError(f"`device` {device!r} is not a torch device: give auto, cpu, cuda or cuda:N.") from error
    if resolved.type not in ("cpu", "cuda"):
        raise ValueError(f"`device` {device!r}: the probe runs on cpu or cuda.")
    if resolved.type == "cuda" and not torch.cuda.is_available():
        raise ValueError(f"`device` {device!r}: CUDA is not available here; give --device cpu (or auto).")
    return resolved


def available_cores() -> int:
    """CPU cores this process may run on (its affinity where the platform has one)."""
    affinity = getattr(os, "sched_getaffinity", None)
    return len(affinity(0)) if affinity is not None else os.cpu_count() or 1


def worker_count(settings: ProbeSettings) -> int:
    """Cells trained at once: ``settings.workers``, or for 0 one per available CPU core on the CPU and 1 on CUDA."""
    if settings.workers:
        return settings.workers
    return 1 if resolve_device(settings.device).type == "cuda" else available_cores()


def _init_worker(threads: int) -> None:
    torch.set_num_threads(threads)


def _phases(cells: list[ProbeCell]) -> tuple[list[ProbeCell], dict[ProbeCell, list[ProbeCell]]]:
    """The order dependencies allow: every ``scratch`` cell (plus the ``full`` base of each ``convert`` problem that
    the grid lacks) can start at once; the ``convert`` cells of a problem wait for its base, keyed by that base."""
    first = [c for c in cells if c.protocol == "scratch"]
    waiting: dict[ProbeCell, list[ProbeCell]] = {}
    for cell in cells:
        if cell.protocol == "convert":
            if base_of(cell) not in first:
                first.append(base_of(cell))
            waiting.setdefault(base_of(cell), []).append(cell)
    return first, waiting


def run_probe(output_dir: str | Path, settings: ProbeSettings | None = None) -> dict:
    """Run (or finish) the grid and write ``results.json``, ``results.md`` and the plots.

    With more than one worker (:func:`worker_count`) the cells run in separate processes (``spawn``), each with
    ``cores // workers`` torch threads; the ``convert`` cells of a problem start as soon as its base is saved; every
    finished cell is saved as it completes, so an interrupted grid
    resumes where it stopped. Cell results do not depend on the number of workers beyond float rounding (a
    thread count changes the order of float sums).

    Returns:
        The content of ``results.json``: ``{"settings", "records", "seconds"}``.

    Raises:
        ValueError: for bad settings (:class:`ProbeSettings`); any error of a cell (the cells finished before it
            stay saved).
    """
    from srformer.probe.report import write_report

    settings = settings or ProbeSettings()
    output = Path(output_dir)
    output.mkdir(parents=True, exist_ok=True)
    cells = grid_cells(settings)
    for cell in cells:  # a base saved by an older version in the plain folder, with the grid's full settings
        if cell.protocol == "convert":
            _adopt_base(cell, settings, output)
    workers = min(worker_count(settings), len(cells))
    started = time.perf_counter()
    results: dict[ProbeCell, dict] = {}
    overall = tqdm(total=len(cells), desc="probe grid", unit="cell", disable=not settings.progress)
    if workers == 1:
        for cell in cells:
            overall.set_postfix_str(cell.key)
            results[cell] = run_cell(cell, settings, output)
            overall.update(1)
    else:
        quiet = replace(settings, progress=False)  # one bar for the grid; cells report nothing of their own
        threads = max(1, available_cores() // workers)
        for cell in cells:  # a base to train again is trained once, in the first phase, not by every convert cell
            if cell.protocol == "convert" and not _base_ready(cell, settings, output):
                _forget_base(cell, settings, output)
        context = multiprocessing.get_context("spawn")
        with ProcessPoolExecutor(workers, mp_context=context, initializer=_init_worker, initargs=(threads,)) as pool:
            first, waiting = _phases(cells)
            running: dict[Future, ProbeCell] = {pool.submit(run_cell, cell, quiet, output): cell for cell in first}
            while running:
                done, _ = wait(running, return_when=FIRST_COMPLETED)
                for future in done:
                    cell = running.pop(future)
                    results[cell] = future.result()
                    overall.set_postfix_str(cell.key)
                    overall.update(cell in cells)
                    for follower in waiting.pop(cell, []):  # its base is saved: the problem's convert cells
                        running[pool.submit(run_cell, follower, quiet, output)] = follower
    overall.close()
    records = [results[cell] for cell in cells]
    add_gap_recovered(records)
    payload = {"settings": asdict(settings), "records": records, "seconds": time.perf_counter() - started}
    write_metrics_json(output / "results.json", payload)
    write_report(payload, output)
    return payload
