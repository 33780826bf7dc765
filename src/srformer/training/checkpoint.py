"""Atomic, resumable training checkpoints.

Layout inside a run's output directory::

    output_dir/
        checkpoint/              the latest complete checkpoint
            model.safetensors, optimizer.bin, scheduler.bin, random_states_*.pkl   (accelerate)
            trainer_state.json   step, epoch, batches_seen_in_epoch, elapsed_seconds, loss_history,
                                 settings, ... (written last)
        .checkpoint-old/         only transiently, while a new checkpoint is swapped in
        .checkpoint-tmp-<step>/  only transiently, while a new checkpoint is written

A new checkpoint is first written completely into ``.checkpoint-tmp-<step>`` (files fsynced), then
swapped in by two renames: ``checkpoint -> .checkpoint-old`` and ``.checkpoint-tmp-<step> ->
checkpoint``; finally ``.checkpoint-old`` is deleted. A process killed at any moment therefore leaves
either ``checkpoint`` or ``.checkpoint-old`` holding a complete checkpoint, and
:func:`find_checkpoint` picks whichever is valid (``checkpoint`` first). Leftover temporary
directories are ignored by :func:`find_checkpoint` and deleted by the next :func:`save_checkpoint`.

The temporary directory is named after the step (not randomly) so that, in multi-process runs, every
process writes its own RNG-state file into the same directory.
"""

from __future__ import annotations

import json
import os
import shutil
from pathlib import Path
from typing import Any

from accelerate import Accelerator

__all__ = [
    "CHECKPOINT_DIRNAME",
    "OLD_CHECKPOINT_DIRNAME",
    "TMP_CHECKPOINT_PREFIX",
    "TRAINER_STATE_NAME",
    "find_checkpoint",
    "load_checkpoint",
    "save_checkpoint",
]

CHECKPOINT_DIRNAME = "checkpoint"
OLD_CHECKPOINT_DIRNAME = ".checkpoint-old"
TMP_CHECKPOINT_PREFIX = ".checkpoint-tmp-"
TRAINER_STATE_NAME = "trainer_state.json"


def _fsync_path(path: Path) -> None:
    """fsync a file or directory (best effort: directories cannot be opened on every OS)."""
    try:
        fd = os.open(path, os.O_RDONLY)
    except OSError:
        return
    try:
        os.fsync(fd)
    except OSError:
        pass
    finally:
        os.close(fd)


def _fsync_tree(root: Path) -> None:
    for dirpath, _dirnames, filenames in os.walk(root):
        for name in filenames:
            _fsync_path(Path(dirpath) / name)
        _fsync_path(Path(dirpath))


def _is_complete(path: Path) -> bool:
    return path.is_dir() and (path / TRAINER_STATE_NAME).is_file()


def _remove_stale_temporaries(output_dir: Path) -> None:
    for leftover in output_dir.glob(TMP_CHECKPOINT_PREFIX + "*"):
        if leftover.is_dir():
            shutil.rmtree(leftover)
        else:
            leftover.unlink()


def save_checkpoint(accelerator: Accelerator, output_dir: str | os.PathLike[str], state: dict[str, Any]) -> Path:
    """Atomically write a checkpoint of the prepared objects and ``state`` to ``output_dir / "checkpoint"``.

    ``accelerator.save_state`` stores the weights of the prepared model(s), optimizer(s), scheduler(s) and
    the RNG states; ``state`` is stored as ``trainer_state.json``. Must be called on every process
    (it synchronizes them); only the main process writes ``trainer_state.json`` and renames directories.

    Args:
        accelerator: The accelerator the model/optimizer/scheduler were prepared with.
        output_dir: The run's output directory (created if missing).
        state: JSON-serializable trainer state. Must contain ``"step"`` (int, optimizer steps done); by
            convention also ``epoch``, ``batches_seen_in_epoch``, ``elapsed_seconds`` (seconds),
            ``loss_history`` (list of ``[step, loss]``) and ``settings`` (dict).

    Returns:
        The path of the new checkpoint, ``output_dir / "checkpoint"``.

    Raises:
        ValueError: If ``state`` has no integer ``"step"``.
        TypeError: If ``state`` is not JSON-serializable (raised before anything is swapped in).
        OSError: On file-system errors; the previous checkpoint is then left intact.
    """
    step = state.get("step")
    if isinstance(step, bool) or not isinstance(step, int):
        raise ValueError(f"checkpoint state needs an integer 'step', got {step!r}")
    state_text = json.dumps(state, indent=2)  # fail early, before touching the disk

    output_dir = Path(output_dir)
    final_dir = output_dir / CHECKPOINT_DIRNAME
    old_dir = output_dir / OLD_CHECKPOINT_DIRNAME
    tmp_dir = output_dir / f"{TMP_CHECKPOINT_PREFIX}{step}"

    if accelerator.is_main_process:
        output_dir.mkdir(parents=True, exist_ok=True)
        _remove_stale_temporaries(output_dir)
    accelerator.wait_for_everyone()

    accelerator.save_state(str(tmp_dir))

    if accelerator.is_main_process:
        (tmp_dir / TRAINER_STATE_NAME).write_text(state_text, encoding="utf-8")
        _fsync_tree(tmp_dir)
        if _is_complete(final_dir):
            # `.checkpoint-old` can only be stale here: `checkpoint` is complete.
            if old_dir.exists():
                shutil.rmtree(old_dir)
            final_dir.rename(old_dir)
        elif final_dir.exists():
            # An incomplete `checkpoint` cannot come from this module; never trust it.
            shutil.rmtree(final_dir)
        _fsync_path(output_dir)
        tmp_dir.rename(final_dir)
        _fsync_path(output_dir)
        if old_dir.exists():
            shutil.rmtree(old_dir)
    accelerator.wait_for_everyone()
    return final_dir


def find_checkpoint(output_dir: str | os.PathLike[str]) -> Path | None:
    """Return the latest complete checkpoint in ``output_dir``, or ``None`` if there is none.

    ``output_dir / "checkpoint"`` is preferred; if it is missing or incomplete (no
    ``trainer_state.json``), ``output_dir / ".checkpoint-old"`` is used (a save was interrupted between
    its two renames). Temporary ``.checkpoint-tmp-*`` directories are never returned. A missing
    ``output_dir`` yields ``None``. Raises nothing.
    """
    output_dir = Path(output_dir)
    for candidate in (output_dir / CHECKPOINT_DIRNAME, output_dir / OLD_CHECKPOINT_DIRNAME):
        if _is_complete(candidate):
            return candidate
    return None


def load_checkpoint(accelerator: Accelerator, path: str | os.PathLike[str]) -> dict[str, Any]:
    """Restore the prepared objects from checkpoint ``path`` and return its trainer state.

    Calls ``accelerator.load_state(path)`` (model weights, optimizer, scheduler, RNG states and the
    accelerator's accumulation counter) and reads ``trainer_state.json``. Call it on every process,
    after ``accelerator.prepare``.

    Args:
        accelerator: The accelerator the model/optimizer/scheduler were prepared with.
        path: A checkpoint directory, typically from :func:`find_checkpoint`.

    Returns:
        The ``state`` dict given to :func:`save_checkpoint` (as decoded from JSON: tuples become lists).

    Raises:
        FileNotFoundError: If ``path`` is not a directory containing ``trainer_state.json``.
        ValueError, RuntimeError: From accelerate/torch when the stored states do not fit the prepared
            objects (e.g. a different model architecture).
    """
    path = Path(path)
    state_file = path / TRAINER_STATE_NAME
    if not state_file.is_file():
        raise FileNotFoundError(f"{path} is not a complete checkpoint (missing {TRAINER_STATE_NAME})")
    accelerator.load_state(str(path))
    return json.loads(state_file.read_text(encoding="utf-8"))
