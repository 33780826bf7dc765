"""Where a probe grid keeps its results, and when a saved one is reused.

A finished cell writes ``cell.json`` and is skipped on a re-run with the same budget
(:func:`~srformer.probe.budget.cell_budget`) and the same extra settings of its named setting (``variant_settings``,
``srformer probe --setting``; recorded as ``settings``, empty when none; a record without the entry was made with
none). A cell run with extra settings has a folder of its own (:func:`~srformer.probe.grid.cell_folder`: its key and
``@NAME=VALUE+...``), so that exploring a setting never overwrites the cell of the named setting as registered; the
same holds for a base trained with extra ``full`` settings. The ``scratch`` full-attention model is saved
(``bases/<problem>-seed<seed>/model.pt``, a state dict) for the ``convert`` cells. Every cell also keeps its
trained (converted) model's state dict next to its record (``cells/<key>/model.pt``, about 1.5 MB at t5-tiny's
shape), so that a finished cell can be analysed again (for example the recurrent-term diagnostics) without
retraining.

A cell or base saved by an older version under its plain key, with the extra settings it now has a folder for, is
moved to that folder (:func:`adopt`, :func:`adopt_base`) rather than trained again.
"""

from __future__ import annotations

import json
from pathlib import Path

from tqdm.auto import tqdm

from srformer.core import settings_suffix
from srformer.probe.budget import cell_budget, saved_budget
from srformer.probe.grid import ProbeCell, ProbeSettings, base_of, cell_folder, cell_settings


def same_cell_settings(record: dict, wanted: dict) -> bool:
    """Whether a saved record was made with the extra settings ``wanted`` (from :func:`cell_settings`); a missing
    ``settings`` or ``base_settings`` entry counts as none."""
    return all(record.get(key, {}) == wanted.get(key, {}) for key in ("settings", "base_settings"))


def read_saved(path: Path, budget: dict, wanted: dict | None = None) -> dict | None:
    """The record saved at ``path`` when it was made with ``budget`` (:func:`~srformer.probe.budget.saved_budget` of
    its own) and the extra settings ``wanted`` (none when None); None when there is none or it differs (logged)."""
    if not path.is_file():
        return None
    record = json.loads(path.read_text())
    if saved_budget(record.get("budget")) == budget and same_cell_settings(record, wanted or {}):
        return record
    tqdm.write(f"{path} was made with other settings; running it again.")
    return None


def base_dir(output: Path, cell: ProbeCell, settings: ProbeSettings) -> Path:
    """The folder of a ``convert`` cell's base under ``output``: ``bases/<problem>-seed<seed>``, followed by the
    suffix of the grid's extra ``full`` settings."""
    base = f"{cell.problem}-seed{cell.seed}"
    return output / "bases" / (base + settings_suffix(settings.variant_settings.get("full")))


def adopt(folder: Path, legacy: Path, record_name: str, wanted: dict) -> None:
    """Move a cell (or base) saved by an older version under its plain key to ``folder``, its own folder now, when
    its record was made with the extra settings ``wanted``: a finished run is kept, not trained again. A ``folder``
    that already exists (even unfinished) is left as it is."""
    if folder == legacy or folder.exists() or not (legacy / record_name).is_file():
        return
    if same_cell_settings(json.loads((legacy / record_name).read_text()), wanted):
        folder.parent.mkdir(parents=True, exist_ok=True)
        legacy.rename(folder)


def base_ready(cell: ProbeCell, settings: ProbeSettings, output: Path) -> bool:
    """Whether the base of a ``convert`` cell is saved with the grid's budget and the ``full`` settings."""
    adopt_base(cell, settings, output)
    base = base_dir(output, cell, settings)
    return ((base / "model.pt").is_file() and read_saved(base / "budget.json", cell_budget(settings, "scratch"),
                                                         cell_settings(base_of(cell), settings)) is not None)


def adopt_base(cell: ProbeCell, settings: ProbeSettings, output: Path) -> None:
    """:func:`adopt` for the base of a ``convert`` cell."""
    adopt(base_dir(output, cell, settings), output / "bases" / f"{cell.problem}-seed{cell.seed}", "budget.json",
          cell_settings(base_of(cell), settings))


def forget_base(cell: ProbeCell, settings: ProbeSettings, output: Path) -> None:
    """Drop the record of a ``convert`` cell's base cell, so that running it trains (and saves) the base again."""
    (output / "cells" / cell_folder(base_of(cell), settings) / "cell.json").unlink(missing_ok=True)
