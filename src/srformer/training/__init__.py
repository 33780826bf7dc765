"""Training of SRformer seq2seq models on ``transformers.Seq2SeqTrainer``: settings, training, atomic checkpoints.

Public API:

* :class:`TrainingSettings` -- hyper-parameters (steps, learning rate, batch size, time budget, ...).
* :func:`train` -- fine-tune a model on tokenized features; returns a :class:`TrainingResult`.
* :func:`find_checkpoint` -- the latest complete checkpoint in ``output_dir / "checkpoint"`` (atomic swaps,
  see :mod:`srformer.training.checkpoint`).
* :class:`SRformerTrainer`, :func:`training_arguments` -- the ``Seq2SeqTrainer`` subclass and the
  ``Seq2SeqTrainingArguments`` that :func:`train` uses.

The names are imported on first use (PEP 562, :mod:`srformer.core.lazy`), so that the light modules of the package
(:mod:`~srformer.training.settings`, :mod:`~srformer.training.curriculum`, ...) import no torch or transformers.
"""

from __future__ import annotations

from typing import TYPE_CHECKING

from srformer.core.lazy import lazy_exports

if TYPE_CHECKING:
    from srformer.training.checkpoint import find_checkpoint
    from srformer.training.loop import TrainingResult, train
    from srformer.training.settings import TrainingSettings
    from srformer.training.trainer import SRformerTrainer, training_arguments

__all__ = [
    "SRformerTrainer",
    "TrainingResult",
    "TrainingSettings",
    "find_checkpoint",
    "train",
    "training_arguments",
]

__getattr__, __dir__ = lazy_exports(__name__, {
    "srformer.training.checkpoint": ("find_checkpoint",),
    "srformer.training.loop": ("TrainingResult", "train"),
    "srformer.training.settings": ("TrainingSettings",),
    "srformer.training.trainer": ("SRformerTrainer", "training_arguments"),
})
