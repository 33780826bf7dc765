"""The probe grid's runner: :func:`run_cell` trains and scores one cell, :func:`run_probe` the whole grid, resumably.

A cell is trained under its protocol (``scratch`` or ``convert``, :mod:`~srformer.probe.grid`), scored on its own
held-out examples and saved with its model (:mod:`~srformer.probe.store`); a finished cell is read back instead of
trained again. :func:`run_probe` runs the cells in this process or in a pool of worker processes
(:mod:`~srformer.probe.pool`), adds the gap recovered (:mod:`~srformer.probe.comparison`) and writes the report.

This module is also the public face of the probe grid: it re-exports the grid's settings and cells
(:class:`ProbeSettings`, :data:`PROTOCOLS`, :data:`DEFAULT_VARIANTS`) and :func:`add_gap_recovered`.
"""

from __future__ import annotations

import os
import time
from dataclasses import asdict
from pathlib import Path

import torch
from tqdm.auto import tqdm

from srformer.core import named_config
from srformer.evaluation.report import write_metrics_json
from srformer.models.convert import convert
from srformer.probe.budget import cell_budget, train_settings
from srformer.probe.comparison import add_gap_recovered
from srformer.probe.grid import (
    DEFAULT_VARIANTS,
    PROTOCOLS,
    ProbeCell,
    ProbeSettings,
    base_of,
    cell_folder,
    cell_settings,
    cell_shape,
    grid_cells,
    resolve_device,
)
from srformer.probe.metrics import score
from srformer.probe.pool import run_pooled
from srformer.probe.store import adopt, adopt_base, base_dir, base_ready, forget_base, read_saved
from srformer.probe.tasks import TaskSpec, generate_examples
from srformer.probe.training import build_model, diagnose, predict, train_model

__all__ = [
    "DEFAULT_VARIANTS",
    "DIAGNOSTIC_EXAMPLES",
    "PROTOCOLS",
    "ProbeSettings",
    "add_gap_recovered",
    "available_cores",
    "run_cell",
    "run_probe",
    "worker_count",
]

#: Held-out examples of the final recurrent-term measurement of a cell (``diagnostics_eval``).
DIAGNOSTIC_EXAMPLES = 64


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
    adopt(record_file.parent, output / "cells" / cell.key, "cell.json", extra)
    saved = read_saved(record_file, budget, extra)
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
        if not base_ready(cell, settings, output):
            forget_base(cell, settings, output)
            run_cell(base_of(cell), settings, output)
        model = build_model(vocabulary, settings.shape, cell.seed)
        model.load_state_dict(torch.load(base_dir(output, cell, settings) / "model.pt", weights_only=True,
                                         map_location="cpu"))
        model = convert(model, config)
    _move(model, settings.device)
    train = train_settings(settings, cell.protocol)
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
        base = base_dir(output, cell, settings)
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


def available_cores() -> int:
    """CPU cores this process may run on (its affinity where the platform has one)."""
    affinity = getattr(os, "sched_getaffinity", None)
    return len(affinity(0)) if affinity is not None else os.cpu_count() or 1


def worker_count(settings: ProbeSettings) -> int:
    """Cells trained at once: ``settings.workers``, or for 0 one per available CPU core on the CPU and 1 on CUDA."""
    if settings.workers:
        return settings.workers
    return 1 if resolve_device(settings.device).type == "cuda" else available_cores()


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
            adopt_base(cell, settings, output)
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
        threads = max(1, available_cores() // workers)
        results = run_pooled(run_cell, cells, settings, output, workers, threads, overall)
    overall.close()
    records = [results[cell] for cell in cells]
    add_gap_recovered(records)
    payload = {"settings": asdict(settings), "records": records, "seconds": time.perf_counter() - started}
    write_metrics_json(output / "results.json", payload)
    write_report(payload, output)
    return payload
