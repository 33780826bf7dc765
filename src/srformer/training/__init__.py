"""Training of SRformer seq2seq models: settings, the resumable training loop and atomic checkpoints.

Public API:

* :class:`TrainingSettings` -- hyper-parameters (steps, learning rate, batch size, time budget, ...).
* :func:`train` -- fine-tune a model on tokenized features; returns a :class:`TrainingResult`.
* :func:`save_checkpoint`, :func:`find_checkpoint`, :func:`load_checkpoint` -- atomic checkpoints in
  ``output_dir / "checkpoint"``.
"""

from srformer.training.checkpoint import find_checkpoint, load_checkpoint, save_checkpoint
from srformer.training.loop import TrainingResult, train
from srformer.training.settings import TrainingSettings

__all__ = [
    "TrainingResult",
    "TrainingSettings",
    "find_checkpoint",
    "load_checkpoint",
    "save_checkpoint",
    "train",
]
