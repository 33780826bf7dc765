"""Atomic, resumable training checkpoints in a run's output directory.

Layout::

    output_dir/
        checkpoint/              the latest complete checkpoint, as written by transformers' Trainer:
                                 model.safetensors, config.json, optimizer.pt, scheduler.pt,
                                 rng_state.pth (rng_state_<rank>.pth with several processes),
                                 trainer_state.json (global_step, log_history, ...), training_args.bin,
                                 the tokenizer, and run_state.json (srformer's bookkeeping, see RUN_STATE_NAME)
        .checkpoint-old/         only transiently, while a new checkpoint is swapped in
        .checkpoint-tmp-<step>/  only transiently, while a new checkpoint is written

transformers' ``Trainer`` writes ``checkpoint-<step>`` directories in place, so a process killed during a
save leaves a half-written directory that ``transformers.trainer_utils.get_last_checkpoint`` would pick
for resuming. Here the Trainer writes its checkpoint into ``.checkpoint-tmp-<step>/checkpoint-<step>``
instead (see :class:`srformer.training.trainer.SRformerTrainer`); :func:`publish_checkpoint` then fsyncs it
and swaps it in by two renames: ``checkpoint -> .checkpoint-old`` and the new directory ``-> checkpoint``;
finally ``.checkpoint-old`` is deleted. A process killed at any moment therefore leaves either
``checkpoint`` or ``.checkpoint-old`` holding a complete checkpoint, and :func:`find_checkpoint` picks
whichever is valid (``checkpoint`` first). Leftover temporary directories are ignored by
:func:`find_checkpoint` and deleted before the next save (:func:`remove_stale_temporaries`).

The temporary directory is named after the step (not randomly) so that, in multi-process runs, every
process writes its own files (RNG state, DeepSpeed/FSDP shards) into the same directory.
"""

from __future__ import annotations

import os
import shutil
from pathlib import Path

__all__ = [
    "CHECKPOINT_DIRNAME",
    "OLD_CHECKPOINT_DIRNAME",
    "RUN_STATE_NAME",
    "TMP_CHECKPOINT_PREFIX",
    "TRAINER_STATE_NAME",
    "find_checkpoint",
    "publish_checkpoint",
    "remove_stale_temporaries",
    "staging_dir",
]

CHECKPOINT_DIRNAME = "checkpoint"
OLD_CHECKPOINT_DIRNAME = ".checkpoint-old"
TMP_CHECKPOINT_PREFIX = ".checkpoint-tmp-"
#: The Trainer's state file (``transformers.trainer.TRAINER_STATE_NAME``); a checkpoint without it is incomplete.
TRAINER_STATE_NAME = "trainer_state.json"
#: srformer's bookkeeping next to it: settings, elapsed seconds, token counts (written before the swap).
RUN_STATE_NAME = "run_state.json"


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
    return path.is_dir() and (path / TRAINER_STATE_NAME).is_file() and (path / RUN_STATE_NAME).is_file()


def staging_dir(output_dir: str | os.PathLike[str], step: int) -> Path:
    """The temporary directory a checkpoint of optimizer step ``step`` is written into before
    :func:`publish_checkpoint`: ``output_dir / ".checkpoint-tmp-<step>"``."""
    return Path(output_dir) / f"{TMP_CHECKPOINT_PREFIX}{step}"


def remove_stale_temporaries(output_dir: str | os.PathLike[str]) -> None:
    """Delete ``.checkpoint-tmp-*`` leftovers of interrupted saves in ``output_dir`` (main process only)."""
    for leftover in Path(output_dir).glob(TMP_CHECKPOINT_PREFIX + "*"):
        if leftover.is_dir():
            shutil.rmtree(leftover)
        else:
            leftover.unlink()


def publish_checkpoint(written: str | os.PathLike[str], output_dir: str | os.PathLike[str]) -> Path:
    """Atomically make the completely written checkpoint directory ``written`` the run's latest checkpoint.

    Call on the main process only, after every process finished writing into ``written`` (which must lie
    inside ``output_dir``, e.g. under :func:`staging_dir`, so that renames stay on one file system).

    Args:
        written: A complete checkpoint directory (with ``trainer_state.json`` and ``run_state.json``).
        output_dir: The run's output directory.

    Returns:
        ``output_dir / "checkpoint"``, now holding the files of ``written``.

    Raises:
        ValueError: If ``written`` is not a complete checkpoint (nothing is swapped in then).
        OSError: On file-system errors; a previous complete checkpoint is then left usable.
    """
    written, output_dir = Path(written), Path(output_dir)
    if not _is_complete(written):
        raise ValueError(f"{written} is not a complete checkpoint (needs {TRAINER_STATE_NAME} and {RUN_STATE_NAME})")
    final_dir = output_dir / CHECKPOINT_DIRNAME
    old_dir = output_dir / OLD_CHECKPOINT_DIRNAME
    _fsync_tree(written)
    if _is_complete(final_dir):
        # `.checkpoint-old` can only be stale here: `checkpoint` is complete.
        if old_dir.exists():
            shutil.rmtree(old_dir)
        final_dir.rename(old_dir)
    elif final_dir.exists():
        # An incomplete `checkpoint` cannot come from this module; never trust it.
        shutil.rmtree(final_dir)
    _fsync_path(output_dir)
    written.rename(final_dir)
    _fsync_path(output_dir)
    if old_dir.exists():
        shutil.rmtree(old_dir)
    return final_dir


def find_checkpoint(output_dir: str | os.PathLike[str]) -> Path | None:
    """Return the latest complete checkpoint in ``output_dir``, or ``None`` if there is none.

    ``output_dir / "checkpoint"`` is preferred; if it is missing or incomplete (no ``trainer_state.json``
    or ``run_state.json``), ``output_dir / ".checkpoint-old"`` is used (a save was interrupted between its
    two renames). Temporary ``.checkpoint-tmp-*`` directories are never returned. A missing ``output_dir``
    yields ``None``. Raises nothing.
    """
    output_dir = Path(output_dir)
    for candidate in (output_dir / CHECKPOINT_DIRNAME, output_dir / OLD_CHECKPOINT_DIRNAME):
        if _is_complete(candidate):
            return candidate
    return None
