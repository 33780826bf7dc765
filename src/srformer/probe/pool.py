"""The probe grid's process pool: cells trained at once in spawned worker processes, in the order their bases allow.

Every ``scratch`` cell (and the ``full`` base of each ``convert`` problem the grid lacks) is submitted at once
(:func:`_phases`); a problem's ``convert`` cells are submitted when its base is saved. Each worker runs its cells with
a fixed number of torch threads.
"""

from __future__ import annotations

import multiprocessing
from collections.abc import Callable
from concurrent.futures import FIRST_COMPLETED, Future, ProcessPoolExecutor, wait
from dataclasses import replace
from pathlib import Path

import torch
from tqdm.auto import tqdm

from srformer.probe.grid import ProbeCell, ProbeSettings, base_of
from srformer.probe.store import base_ready, forget_base


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


def run_pooled(run: Callable[[ProbeCell, ProbeSettings, Path], dict], cells: list[ProbeCell], settings: ProbeSettings,
               output: Path, workers: int, threads: int, bar: tqdm) -> dict[ProbeCell, dict]:
    """Run ``run(cell, settings, output)`` for every cell of ``cells`` (and every base they lack) in ``workers``
    spawned processes of ``threads`` torch threads each, with progress off in the cells; ``bar`` counts the cells of
    ``cells`` as they finish. A base that is not saved with the grid's budget is trained once, before its ``convert``
    cells (its record is dropped first).

    Returns:
        The record of every cell run, by cell (the bases the grid lacks included).

    Raises:
        Any error of a cell (the cells finished before it stay saved).
    """
    quiet = replace(settings, progress=False)  # one bar for the grid; cells report nothing of their own
    for cell in cells:  # a base to train again is trained once, in the first phase, not by every convert cell
        if cell.protocol == "convert" and not base_ready(cell, settings, output):
            forget_base(cell, settings, output)
    results: dict[ProbeCell, dict] = {}
    context = multiprocessing.get_context("spawn")
    with ProcessPoolExecutor(workers, mp_context=context, initializer=_init_worker, initargs=(threads,)) as pool:
        first, waiting = _phases(cells)
        running: dict[Future, ProbeCell] = {pool.submit(run, cell, quiet, output): cell for cell in first}
        while running:
            done, _ = wait(running, return_when=FIRST_COMPLETED)
            for future in done:
                cell = running.pop(future)
                results[cell] = future.result()
                bar.set_postfix_str(cell.key)
                bar.update(cell in cells)
                for follower in waiting.pop(cell, []):  # its base is saved: the problem's convert cells
                    running[pool.submit(run, follower, quiet, output)] = follower
    return results
