"""The settings fields that the training run, the experiments and the probe share, each declared once.

Every part below is a dataclass of a few fields with their unit, meaning and validation. A settings class
(:class:`~srformer.training.settings.TrainingSettings`, ``srformer.experiments.compare.CompareSettings``,
``srformer.experiments.aclsum.ComparisonSettings``, ``srformer.probe.runner.ProbeSettings``) inherits the parts it
needs; where its default differs (a longer default run, another batch size) it re-states the field with that default
only: the meaning and the check stay here. Construction runs :meth:`SettingsBase.validate`, which every part extends,
and a bad value raises a ``ValueError`` that names ``ClassName.field`` and the allowed range.
"""

from __future__ import annotations

import math
from dataclasses import dataclass
from typing import Any

__all__ = [
    "MAX_SEED", "BaseModelBudget", "Batching", "Decoding", "FineTuning", "PeakLearningRate", "Seed", "SeedGrid",
    "SettingsBase", "SummaryShapes", "require_bool", "require_float", "require_int",
]

#: The largest seed: numpy's legacy seeding (used by ``accelerate.utils.set_seed``) only accepts 0 <= seed < 2**32.
MAX_SEED = 2**32 - 1


def require_int(owner: str, name: str, value: Any, minimum: int, maximum: int | None = None) -> None:
    """Check that ``owner.name`` is an int (not a bool) in ``[minimum, maximum]``.

    Raises:
        ValueError: naming ``owner.name``, the bound and the value.
    """
    if isinstance(value, bool) or not isinstance(value, int):
        raise ValueError(f"{owner}.{name} must be an int, got {value!r} ({type(value).__name__})")
    if value < minimum:
        raise ValueError(f"{owner}.{name} must be >= {minimum}, got {value}")
    if maximum is not None and value > maximum:
        raise ValueError(f"{owner}.{name} must be <= {maximum}, got {value}")


def require_float(owner: str, name: str, value: Any, *, minimum: float, strict: bool) -> None:
    """Check that ``owner.name`` is a finite number (an int is accepted) above ``minimum`` (``strict``) or at least
    ``minimum``.

    Raises:
        ValueError: naming ``owner.name``, the bound and the value.
    """
    if isinstance(value, bool) or not isinstance(value, (int, float)):
        raise ValueError(f"{owner}.{name} must be a number, got {value!r} ({type(value).__name__})")
    if not math.isfinite(value):
        raise ValueError(f"{owner}.{name} must be finite, got {value}")
    if strict and value <= minimum:
        raise ValueError(f"{owner}.{name} must be > {minimum}, got {value}")
    if not strict and value < minimum:
        raise ValueError(f"{owner}.{name} must be >= {minimum}, got {value}")


def require_bool(owner: str, name: str, value: Any) -> None:
    """Check that ``owner.name`` is a bool.

    Raises:
        ValueError: naming ``owner.name`` and the value.
    """
    if not isinstance(value, bool):
        raise ValueError(f"{owner}.{name} must be a bool, got {value!r}")


class SettingsBase:
    """The base of every settings dataclass: construction runs :meth:`validate`."""

    def __post_init__(self) -> None:
        self.validate()

    def validate(self) -> None:
        """Check the fields; every part extends this (calling ``super().validate()`` first).

        Raises:
            ValueError: naming ``ClassName.field`` and the fix.
        """

    @property
    def _owner(self) -> str:
        return type(self).__name__


@dataclass
class Batching(SettingsBase):
    """Batch size and progress display.

    Attributes:
        batch_size: Training examples per batch and per process (>= 1); one optimizer step reads one batch (or
            ``gradient_accumulation_steps`` batches in :class:`~srformer.training.settings.TrainingSettings`).
        progress: Whether to show progress bars.
    """

    batch_size: int = 8
    progress: bool = True

    def validate(self) -> None:
        super().validate()
        require_int(self._owner, "batch_size", self.batch_size, 1)
        require_bool(self._owner, "progress", self.progress)


@dataclass
class PeakLearningRate(SettingsBase):
    """Attributes:
        learning_rate: Peak AdamW learning rate (> 0), reached after the linear warm-up.
    """

    learning_rate: float = 5e-4

    def validate(self) -> None:
        super().validate()
        require_float(self._owner, "learning_rate", self.learning_rate, minimum=0.0, strict=True)


@dataclass
class Seed(SettingsBase):
    """Attributes:
        seed: Seed of the Python/NumPy/torch RNGs and the data order (0 <= seed <= :data:`MAX_SEED`).
    """

    seed: int = 0

    def validate(self) -> None:
        super().validate()
        require_int(self._owner, "seed", self.seed, 0, MAX_SEED)


@dataclass
class SeedGrid(SettingsBase):
    """Attributes:
        seeds: The seeds of a grid: every cell runs once per seed (at least one; each 0 <= seed <= :data:`MAX_SEED`).
    """

    seeds: tuple[int, ...] = (0,)

    def validate(self) -> None:
        super().validate()
        if not self.seeds:
            raise ValueError(f"{self._owner}.seeds is empty: give at least one seed.")
        for seed in self.seeds:
            require_int(self._owner, "seeds", seed, 0, MAX_SEED)


@dataclass
class FineTuning(Batching):
    """The budget of the fine-tuning stage of a converted model (with :class:`Batching`).

    Attributes:
        finetune_steps: Optimizer steps of fine-tuning every converted model (>= 0; 0 = "convert+0": the converted
            model is scored straight after conversion, with no optimizer step).
        finetune_learning_rate: Peak AdamW learning rate of fine-tuning (> 0).
    """

    finetune_steps: int = 150
    finetune_learning_rate: float = 5e-4

    def validate(self) -> None:
        super().validate()
        require_int(self._owner, "finetune_steps", self.finetune_steps, 0)
        require_float(self._owner, "finetune_learning_rate", self.finetune_learning_rate, minimum=0.0, strict=True)


@dataclass
class BaseModelBudget(FineTuning):
    """A full-attention base model trained first, then converted and fine-tuned (with :class:`FineTuning`).

    Attributes:
        model: Named config (``t5-tiny``...; :data:`srformer.models.factory.NAMED_CONFIGS`), local checkpoint or hub
            id of the base model (:func:`srformer.models.factory.load_pretrained`).
        base_steps: Optimizer steps of full-attention training of the base model (>= 0; where 0 is allowed it means
            ``model`` is used as it is).
        base_learning_rate: Peak AdamW learning rate of the base model's training (> 0).
    """

    model: str = "t5-tiny"
    base_steps: int = 2500
    base_learning_rate: float = 2e-3

    def validate(self) -> None:
        super().validate()
        if not isinstance(self.model, str) or not self.model:
            raise ValueError(f"{self._owner}.model must be a named config, a checkpoint path or a hub id, "
                             f"got {self.model!r}")
        require_int(self._owner, "base_steps", self.base_steps, 0)
        require_float(self._owner, "base_learning_rate", self.base_learning_rate, minimum=0.0, strict=True)


@dataclass
class SummaryShapes(SettingsBase):
    """Input shapes of a summarization run (tokens).

    Attributes:
        target_length: The segment schedule's ``T`` (>= 1; must be >= the number of segments).
        max_source_length: Encoder input length (>= 1; longer documents are truncated).
        max_target_length: Summary length for training (>= 1).
        vocab_size: Size of the tokenizer trained for a named config (>= 1).
    """

    target_length: int = 32
    max_source_length: int = 256
    max_target_length: int = 48
    vocab_size: int = 4000

    def validate(self) -> None:
        super().validate()
        for name in ("target_length", "max_source_length", "max_target_length", "vocab_size"):
            require_int(self._owner, name, getattr(self, name), 1)


@dataclass
class Decoding(SettingsBase):
    """How test summaries are generated.

    Attributes:
        num_beams: Beam width (>= 1; 1 = greedy).
        max_new_tokens: Generated tokens per summary at most (>= 1).
        eval_batch_size: Documents per ``generate`` call (>= 1).
    """

    num_beams: int = 1
    max_new_tokens: int = 48
    eval_batch_size: int = 16

    def validate(self) -> None:
        super().validate()
        for name in ("num_beams", "max_new_tokens", "eval_batch_size"):
            require_int(self._owner, name, getattr(self, name), 1)
