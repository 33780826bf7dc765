"""Hyper-parameters of a training run (:class:`TrainingSettings`)."""

from __future__ import annotations

import dataclasses
import math
import os
from dataclasses import dataclass
from typing import Any

__all__ = ["MIXED_PRECISION_MODES", "TrainingSettings"]

#: Values of :attr:`TrainingSettings.mixed_precision` (``"bf16"``/``"fp16"`` become ``TrainingArguments(bf16=True)``
#: / ``(fp16=True)``).
MIXED_PRECISION_MODES: tuple[str, ...] = ("no", "bf16", "fp16")

# numpy's legacy seeding (used by ``accelerate.utils.set_seed``) only accepts 0 <= seed < 2**32.
_MAX_SEED = 2**32 - 1


def _require_int(name: str, value: Any, minimum: int, maximum: int | None = None) -> None:
    if isinstance(value, bool) or not isinstance(value, int):
        raise ValueError(f"TrainingSettings.{name} must be an int, got {value!r} ({type(value).__name__})")
    if value < minimum:
        raise ValueError(f"TrainingSettings.{name} must be >= {minimum}, got {value}")
    if maximum is not None and value > maximum:
        raise ValueError(f"TrainingSettings.{name} must be <= {maximum}, got {value}")


def _require_float(name: str, value: Any, *, minimum: float, strict: bool) -> None:
    if isinstance(value, bool) or not isinstance(value, (int, float)):
        raise ValueError(f"TrainingSettings.{name} must be a number, got {value!r} ({type(value).__name__})")
    if not math.isfinite(value):
        raise ValueError(f"TrainingSettings.{name} must be finite, got {value}")
    if strict and value <= minimum:
        raise ValueError(f"TrainingSettings.{name} must be > {minimum}, got {value}")
    if not strict and value < minimum:
        raise ValueError(f"TrainingSettings.{name} must be >= {minimum}, got {value}")


@dataclass
class TrainingSettings:
    """Hyper-parameters and bookkeeping options of :func:`srformer.training.train`.

    Attributes:
        max_steps: Total number of optimizer steps of the run (steps, >= 1). One optimizer step consumes
            ``gradient_accumulation_steps`` batches (fewer at the end of an epoch, where the partial
            accumulation window is flushed). The learning-rate schedule spans exactly this many steps.
        time_budget_seconds: Wall-clock budget of one ``train`` call (seconds, > 0) or ``None`` for no
            budget. It is checked after every optimizer step; once exceeded, training stops cleanly and a
            checkpoint is written, so at least one step is always taken. The budget is per call: a run
            resumed with ``resume=True`` gets a fresh budget.
        learning_rate: Peak learning rate of AdamW (> 0), reached after ``warmup_steps``.
        weight_decay: Decoupled AdamW weight decay (>= 0). Applied to matrices only; biases and
            normalization weights (parameters with fewer than 2 dimensions) are never decayed.
        warmup_steps: Linear warm-up length (steps, 0 <= warmup_steps <= max_steps).
        batch_size: Examples per batch and per process (>= 1).
        gradient_accumulation_steps: Batches accumulated per optimizer step (>= 1).
        max_grad_norm: Global gradient-norm clipping threshold (> 0), or 0 to disable clipping.
        save_every: Interval between checkpoints (steps, >= 1; ``TrainingArguments.save_steps``). A checkpoint is
            also written at the end.
        log_every: Interval between loss-history entries (steps, >= 1; ``TrainingArguments.logging_steps``); a
            checkpoint and the end of training close a window early.
        seed: Seed for Python/NumPy/torch RNGs and data shuffling (0 <= seed < 2**32; ``TrainingArguments.seed``
            and ``data_seed``). Epoch ``e`` is shuffled with a generator seeded ``seed + e``.
        progress: Whether to show the Trainer's tqdm progress bar (False also hides transformers' bars while
            checkpoints are written).
        mixed_precision: ``"no"`` (float32), ``"bf16"`` or ``"fp16"``: the forward pass runs under autocast in
            that dtype (``TrainingArguments(bf16=True)`` / ``(fp16=True)``; fp16 adds loss scaling). The weights, the
            optimizer and SRformer's ``K^T V`` products, ``norm(K)`` and RAF state stay float32. fp16 needs a GPU;
            on a CPU only ``"bf16"`` works.
        gradient_checkpointing: Recompute each layer's activations in the backward pass instead of storing them
            (``TrainingArguments(activation_checkpointing=True)``, non-reentrant): less memory, about one more
            forward pass of time, the same loss and gradients. The model keeps it enabled after training.
        deepspeed: Path of a DeepSpeed JSON config, passed unchanged as ``TrainingArguments(deepspeed=...)`` (needs
            the ``deepspeed`` package and, in practice, GPUs), or ``None``.
        fsdp: Train with PyTorch FSDP (``TrainingArguments(fsdp=True)``), configured by ``fsdp_config``.
        fsdp_config: Path of an FSDP JSON config (``TrainingArguments(fsdp_config=...)``; implies ``fsdp``), or
            ``None`` for transformers' defaults.
        report_to: Logging integrations of ``TrainingArguments(report_to=...)`` (e.g. ``("tensorboard",)``);
            empty for none.

    Raises:
        ValueError: On construction, when a field has the wrong type or is out of range; the message
            names the field.
    """

    max_steps: int = 1000
    time_budget_seconds: float | None = None
    learning_rate: float = 5e-4
    weight_decay: float = 0.0
    warmup_steps: int = 0
    batch_size: int = 8
    gradient_accumulation_steps: int = 1
    max_grad_norm: float = 1.0
    save_every: int = 200
    log_every: int = 10
    seed: int = 0
    progress: bool = True
    mixed_precision: str = "no"
    gradient_checkpointing: bool = False
    deepspeed: str | None = None
    fsdp: bool = False
    fsdp_config: str | None = None
    report_to: tuple[str, ...] = ()

    def __post_init__(self) -> None:
        _require_int("max_steps", self.max_steps, 1)
        if self.time_budget_seconds is not None:
            _require_float("time_budget_seconds", self.time_budget_seconds, minimum=0.0, strict=True)
        _require_float("learning_rate", self.learning_rate, minimum=0.0, strict=True)
        _require_float("weight_decay", self.weight_decay, minimum=0.0, strict=False)
        _require_int("warmup_steps", self.warmup_steps, 0)
        if self.warmup_steps > self.max_steps:
            raise ValueError(
                f"TrainingSettings.warmup_steps ({self.warmup_steps}) must not exceed "
                f"TrainingSettings.max_steps ({self.max_steps})"
            )
        _require_int("batch_size", self.batch_size, 1)
        _require_int("gradient_accumulation_steps", self.gradient_accumulation_steps, 1)
        _require_float("max_grad_norm", self.max_grad_norm, minimum=0.0, strict=False)
        _require_int("save_every", self.save_every, 1)
        _require_int("log_every", self.log_every, 1)
        _require_int("seed", self.seed, 0, _MAX_SEED)
        if not isinstance(self.progress, bool):
            raise ValueError(f"TrainingSettings.progress must be a bool, got {self.progress!r}")
        if self.mixed_precision not in MIXED_PRECISION_MODES:
            raise ValueError(
                f"TrainingSettings.mixed_precision must be one of {', '.join(MIXED_PRECISION_MODES)}, "
                f"got {self.mixed_precision!r}"
            )
        if not isinstance(self.gradient_checkpointing, bool):
            raise ValueError(
                f"TrainingSettings.gradient_checkpointing must be a bool, got {self.gradient_checkpointing!r}"
            )

        for name in ("deepspeed", "fsdp_config"):
            value = getattr(self, name)
            if value is not None and not (isinstance(value, str) and os.path.isfile(value)):
                raise ValueError(f"TrainingSettings.{name} must be the path of a JSON config file, got {value!r} "
                                 "(no such file)")
        if not isinstance(self.fsdp, bool):
            raise ValueError(f"TrainingSettings.fsdp must be a bool, got {self.fsdp!r}")
        if self.fsdp_config is not None:
            self.fsdp = True
        if self.deepspeed is not None and self.fsdp:
            raise ValueError("TrainingSettings.deepspeed and TrainingSettings.fsdp exclude each other: choose "
                             "DeepSpeed (--deepspeed) or FSDP (--fsdp / --fsdp-config)")
        if isinstance(self.report_to, str) or not all(isinstance(name, str) for name in self.report_to):
            raise ValueError(f"TrainingSettings.report_to must be a tuple of integration names, got {self.report_to!r}")
        self.report_to = tuple(self.report_to)

    def to_dict(self) -> dict[str, Any]:
        """Return the settings as a JSON-serializable ``dict`` (field name -> value)."""
        return dataclasses.asdict(self)
