"""Hyper-parameters of a training run (:class:`TrainingSettings`)."""

from __future__ import annotations

import dataclasses
import os
from dataclasses import dataclass
from typing import Any

from srformer.training.settings_base import (
    Batching,
    PeakLearningRate,
    Seed,
    require_bool,
    require_float,
    require_int,
)

__all__ = ["MIXED_PRECISION_MODES", "TrainingSettings"]

#: Values of :attr:`TrainingSettings.mixed_precision` (``"bf16"``/``"fp16"`` become ``TrainingArguments(bf16=True)``
#: / ``(fp16=True)``).
MIXED_PRECISION_MODES: tuple[str, ...] = ("no", "bf16", "fp16")


@dataclass
class TrainingSettings(Batching, PeakLearningRate, Seed):
    """Hyper-parameters and bookkeeping options of :func:`srformer.training.train`.

    Inherited (:mod:`srformer.training.settings_base`): ``batch_size`` (per process), ``progress`` (the Trainer's tqdm
    bar; False also hides transformers' bars while checkpoints are written), ``learning_rate`` (reached after
    ``warmup_steps``) and ``seed`` (``TrainingArguments.seed`` and ``data_seed``; epoch ``e`` is shuffled with a
    generator seeded ``seed + e``).

    Attributes:
        max_steps: Total number of optimizer steps of the run (steps, >= 1). One optimizer step consumes
            ``gradient_accumulation_steps`` batches (fewer at the end of an epoch, where the partial
            accumulation window is flushed). The learning-rate schedule spans exactly this many steps.
        time_budget_seconds: Wall-clock budget of one ``train`` call (seconds, > 0) or ``None`` for no
            budget. It is checked after every optimizer step; once exceeded, training stops cleanly and a
            checkpoint is written, so at least one step is always taken. The budget is per call: a run
            resumed with ``resume=True`` gets a fresh budget.
        weight_decay: Decoupled AdamW weight decay (>= 0). Applied to matrices only; biases and
            normalization weights (parameters with fewer than 2 dimensions) are never decayed.
        warmup_steps: Linear warm-up length (steps, 0 <= warmup_steps <= max_steps).
        gradient_accumulation_steps: Batches accumulated per optimizer step (>= 1).
        max_grad_norm: Global gradient-norm clipping threshold (> 0), or 0 to disable clipping.
        save_every: Interval between checkpoints (steps, >= 1; ``TrainingArguments.save_steps``). A checkpoint is
            also written at the end.
        log_every: Interval between loss-history entries (steps, >= 1; ``TrainingArguments.logging_steps``); a
            checkpoint and the end of training close a window early.
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
    weight_decay: float = 0.0
    warmup_steps: int = 0
    gradient_accumulation_steps: int = 1
    max_grad_norm: float = 1.0
    save_every: int = 200
    log_every: int = 10
    mixed_precision: str = "no"
    gradient_checkpointing: bool = False
    deepspeed: str | None = None
    fsdp: bool = False
    fsdp_config: str | None = None
    report_to: tuple[str, ...] = ()

    def validate(self) -> None:
        super().validate()
        owner = self._owner
        require_int(owner, "max_steps", self.max_steps, 1)
        if self.time_budget_seconds is not None:
            require_float(owner, "time_budget_seconds", self.time_budget_seconds, minimum=0.0, strict=True)
        require_float(owner, "weight_decay", self.weight_decay, minimum=0.0, strict=False)
        require_int(owner, "warmup_steps", self.warmup_steps, 0)
        if self.warmup_steps > self.max_steps:
            raise ValueError(
                f"TrainingSettings.warmup_steps ({self.warmup_steps}) must not exceed "
                f"TrainingSettings.max_steps ({self.max_steps})"
            )
        require_int(owner, "gradient_accumulation_steps", self.gradient_accumulation_steps, 1)
        require_float(owner, "max_grad_norm", self.max_grad_norm, minimum=0.0, strict=False)
        require_int(owner, "save_every", self.save_every, 1)
        require_int(owner, "log_every", self.log_every, 1)
        if self.mixed_precision not in MIXED_PRECISION_MODES:
            raise ValueError(
                f"TrainingSettings.mixed_precision must be one of {', '.join(MIXED_PRECISION_MODES)}, "
                f"got {self.mixed_precision!r}"
            )
        require_bool(owner, "gradient_checkpointing", self.gradient_checkpointing)

        for name in ("deepspeed", "fsdp_config"):
            value = getattr(self, name)
            if value is not None and not (isinstance(value, str) and os.path.isfile(value)):
                raise ValueError(f"TrainingSettings.{name} must be the path of a JSON config file, got {value!r} "
                                 "(no such file)")
        require_bool(owner, "fsdp", self.fsdp)
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
