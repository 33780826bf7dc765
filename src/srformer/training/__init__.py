"""Training of SRformer seq2seq models on ``transformers.Seq2SeqTrainer``: settings, training, atomic checkpoints.

Public API:

* :class:`TrainingSettings` -- hyper-parameters (steps, learning rate, batch size, time budget, ...).
* :func:`train` -- fine-tune a model on tokenized features; returns a :class:`TrainingResult`.
* :func:`find_checkpoint` -- the latest complete checkpoint in ``output_dir / "checkpoint"`` (atomic swaps,
  see :mod:`srformer.training.checkpoint`).
* :class:`SRformerTrainer`, :func:`training_arguments` -- the ``Seq2SeqTrainer`` subclass and the
  ``Seq2SeqTrainingArguments`` that :func:`train` uses.
"""

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
