"""Training on ``transformers.Seq2SeqTrainer`` (:func:`train`) and its result (:class:`TrainingResult`)."""

from __future__ import annotations

import json
import logging
import os
import time
import warnings
from collections.abc import Sequence
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

from torch.utils.data import Dataset
from transformers import (
    DataCollatorForSeq2Seq,
    PreTrainedModel,
    PreTrainedTokenizerBase,
    PrinterCallback,
    TrainerCallback,
)
from transformers.utils import logging as transformers_logging

from srformer.training.checkpoint import RUN_STATE_NAME, TRAINER_STATE_NAME, find_checkpoint
from srformer.training.distributed import check_backend, check_mixed_precision, process_state
from srformer.training.settings import TrainingSettings
from srformer.training.trainer import RunControl, SRformerTrainer, training_arguments

__all__ = ["SUMMARY_NAME", "TrainingResult", "train"]

logger = logging.getLogger(__name__)

SUMMARY_NAME = "training_summary.json"
_FEATURE_KEYS = ("input_ids", "attention_mask", "labels")
_REQUIRED_KEYS = ("input_ids", "labels")
# Settings whose change between an interrupted run and its resumption breaks reproducibility.
_REPRODUCIBILITY_FIELDS = (
    "max_steps",
    "learning_rate",
    "weight_decay",
    "warmup_steps",
    "batch_size",
    "gradient_accumulation_steps",
    "max_grad_norm",
    "seed",
    "mixed_precision",
)


@dataclass
class TrainingResult:
    """Outcome of :func:`train`.

    Attributes:
        steps: Optimizer steps done in total (including those of resumed-from runs).
        seconds: Wall-clock time of training in total, summed over all resumed calls (seconds).
        final_loss: Mean training loss of the last logging window, or ``None`` if no step was taken.
        loss_history: ``(step, loss)`` pairs: mean loss per optimizer step over each window of
            ``settings.log_every`` steps, keyed by the window's last step (the Trainer's ``log_history``
            entries with a ``loss``). A checkpoint and the end of training close the current window early,
            so the history does not depend on where a run was interrupted and resumed.
        stopped_by: ``"max_steps"`` or ``"time_budget"``.
    """

    steps: int
    seconds: float
    final_loss: float | None
    loss_history: list[tuple[int, float]] = field(default_factory=list)
    stopped_by: str = "max_steps"


class _FeatureDataset(Dataset):
    """Map-style view of tokenized features that keeps only the keys the collator understands."""

    def __init__(self, features: Sequence[dict[str, list[int]]]):
        self.features = features

    def __len__(self) -> int:
        return len(self.features)

    def __getitem__(self, index: int) -> dict[str, list[int]]:
        feature = self.features[index]
        return {key: feature[key] for key in _FEATURE_KEYS if key in feature}


def _check_features(train_features: Sequence[dict[str, list[int]]]) -> None:
    if len(train_features) == 0:
        raise ValueError("train_features is empty: nothing to train on")
    for index, feature in enumerate(train_features):
        missing = [key for key in _REQUIRED_KEYS if key not in feature]
        if missing:
            raise ValueError(f"train_features[{index}] lacks {missing}; expected keys {list(_FEATURE_KEYS)}")


def _warn_on_changed_settings(saved: dict[str, Any], settings: TrainingSettings) -> None:
    current = settings.to_dict()
    changed = [
        f"{name}: {saved[name]!r} -> {current[name]!r}"
        for name in _REPRODUCIBILITY_FIELDS
        if name in saved and saved[name] != current[name]
    ]
    if changed:
        warnings.warn(
            "Resuming with settings that differ from the checkpoint's (" + "; ".join(changed) + "); "
            "the result will not match an uninterrupted run.",
            stacklevel=3,
        )


def _write_json(path: Path, payload: dict[str, Any]) -> None:
    tmp = path.with_name(path.name + ".tmp")
    tmp.write_text(json.dumps(payload, indent=2), encoding="utf-8")
    os.replace(tmp, path)


def refuse_to_overwrite(output_dir: str | os.PathLike, resume: bool) -> Path | None:
    """The checkpoint in ``output_dir`` (None if there is none).

    Raises:
        ValueError: a checkpoint exists and ``resume`` is False: existing work is never overwritten.
    """
    existing = find_checkpoint(output_dir)
    if existing is not None and not resume:
        raise ValueError(
            f"{output_dir} already holds a training checkpoint ({existing}). Pass resume=True (CLI: --resume) "
            "to continue that run, or choose another output directory (CLI: --output); existing work is never "
            "overwritten."
        )
    return existing


def train(
    model: PreTrainedModel,
    tokenizer: PreTrainedTokenizerBase,
    train_features: Sequence[dict[str, list[int]]],
    output_dir: str | os.PathLike[str],
    settings: TrainingSettings,
    *,
    resume: bool = False,
    save_final: bool = True,
    sequential: bool = False,
    callbacks: Sequence[TrainerCallback] = (),
) -> TrainingResult:
    """Fine-tune a seq2seq ``model`` with ``transformers.Seq2SeqTrainer``, with atomic checkpoints and exact resumption.

    The model is trained in place (moved to the Trainer's device) and put back in eval mode when the call
    returns or raises. :func:`srformer.training.trainer.training_arguments` maps ``settings`` onto
    ``Seq2SeqTrainingArguments``; :class:`srformer.training.trainer.SRformerTrainer` trains. Batches are
    padded with ``DataCollatorForSeq2Seq(tokenizer, model=model, label_pad_token_id=-100)`` (labels padded
    with -100, ``decoder_input_ids`` derived from the labels by the model). Epoch ``e`` is shuffled with the
    seed ``settings.seed + e`` (accelerate's seedable sampler). One optimizer step (the Trainer's AdamW,
    weight decay on matrices only, gradients clipped to ``settings.max_grad_norm``, linear schedule with
    warm-up over ``settings.max_steps``) is taken every ``settings.gradient_accumulation_steps`` batches and
    at the end of every epoch; its loss is the mean of the micro-batches' mean token losses. Training stops
    after ``settings.max_steps`` steps or, if set, once ``settings.time_budget_seconds`` of this call have
    elapsed (checked after each step, on all processes together).

    A checkpoint in the Trainer's format (see :mod:`srformer.training.checkpoint`) is swapped in atomically
    as ``output_dir / "checkpoint"`` every ``settings.save_every`` steps and when training stops. With
    ``resume=True`` the latest complete checkpoint is restored by the Trainer
    (``train(resume_from_checkpoint=...)``: weights, optimizer, scheduler, every process's RNG state, step,
    position in the data order, log history) and srformer's ``run_state.json`` (elapsed time, token counts),
    so that on CPU an interrupted and resumed run ends with exactly the same weights as an uninterrupted
    one, provided the settings are unchanged (a change is warned about). If the checkpoint already reached
    ``settings.max_steps``, no step is taken: its weights are loaded.

    Multiple processes (``torchrun`` or ``accelerate launch``, see :func:`process_state`): every process
    calls this function with the same features; the Trainer gives each process its own batches of one
    shared shuffled order (``batch_size`` is per process, the global batch is ``batch_size x processes x
    gradient_accumulation_steps``) and averages the gradients. Only the main process writes the trainer
    state, the final model and ``training_summary.json``; every process saves its own RNG state into the
    checkpoint. Logged losses are averaged and token counts summed over all processes. Resume with the same
    number of processes. ``settings.deepspeed`` / ``settings.fsdp_config`` are passed to the Trainer
    unchanged.

    Args:
        model: A Hugging Face seq2seq model returning ``.loss`` when given ``labels``.
        tokenizer: Its tokenizer (used for padding and saved with the checkpoints and the final model).
        train_features: Tokenized, unpadded examples, each a dict with ``input_ids`` and ``labels``
            (lists of token ids) and optionally ``attention_mask``; other keys are ignored.
        output_dir: Directory for the checkpoint, the final model and ``training_summary.json``.
        settings: Hyper-parameters, see :class:`TrainingSettings`.
        resume: Continue from the checkpoint in ``output_dir``; if there is none, warn and start fresh.
        save_final: When done, save the model (``Trainer.save_model``: ``save_pretrained``, tokenizer,
            ``training_args.bin``) and ``training_summary.json`` (steps, seconds, final_loss, tokens seen,
            epochs, stopped_by) into ``output_dir``.
        sequential: Feed ``train_features`` in order instead of shuffled (see :func:`training_arguments`): example
            ``i`` is then used at optimizer step ``i // (batch_size x gradient_accumulation_steps x processes)``.
        callbacks: Further ``TrainerCallback`` objects (after srformer's own), e.g. periodic evaluations; what
            they add to ``state.log_history`` is saved with the checkpoints and restored on resume.

    Returns:
        A :class:`TrainingResult`.

    Raises:
        TypeError: If ``settings`` is not a :class:`TrainingSettings`.
        ValueError: If ``train_features`` is empty or an example lacks ``input_ids``/``labels``; or if
            ``resume`` is False and ``output_dir`` already holds a checkpoint (pass ``resume=True`` /
            ``--resume``, or choose another output directory); or for ``mixed_precision="fp16"``
            on a CPU (see :func:`check_mixed_precision`); or for DeepSpeed without its package, FSDP on a
            CPU (see :func:`check_backend`), or DeepSpeed/FSDP that accelerate did not apply (not launched
            as several accelerator processes).
        FileNotFoundError, RuntimeError: From checkpoint loading when the checkpoint does not fit.
    """
    call_start = time.monotonic()
    if not isinstance(settings, TrainingSettings):
        raise TypeError(f"settings must be a TrainingSettings, got {type(settings).__name__}")
    _check_features(train_features)
    output_dir = Path(output_dir)

    existing = refuse_to_overwrite(output_dir, resume)
    if resume and existing is None:
        warnings.warn(f"resume=True but {output_dir} holds no checkpoint; starting a fresh run.", stacklevel=2)
    state = process_state()
    check_mixed_precision(settings.mixed_precision, state.device)
    check_backend(settings, state.device)

    saved: dict[str, Any] = {}
    saved_trainer_state: dict[str, Any] = {}
    if existing is not None:
        saved = json.loads((existing / RUN_STATE_NAME).read_text(encoding="utf-8"))
        saved_trainer_state = json.loads((existing / TRAINER_STATE_NAME).read_text(encoding="utf-8"))
        _warn_on_changed_settings(saved.get("settings", {}), settings)

    control = RunControl(settings.time_budget_seconds, call_start)
    order = {"sequential": True} if sequential else {}  # shuffled (the default) unless asked
    trainer = SRformerTrainer(
        settings=settings,
        run_dir=output_dir,
        elapsed_before=float(saved.get("elapsed_seconds", 0.0)),
        call_start=call_start,
        tokens_before=(int(saved.get("input_tokens", 0)), int(saved.get("target_tokens", 0))),
        model=model,
        args=training_arguments(settings, output_dir, use_cpu=state.device.type == "cpu", **order),
        train_dataset=_FeatureDataset(train_features),
        data_collator=DataCollatorForSeq2Seq(tokenizer, model=model, label_pad_token_id=-100),
        processing_class=tokenizer,
        callbacks=[control, *callbacks],
    )
    trainer.remove_callback(PrinterCallback)  # RunControl logs each window through `logging` instead
    for requested, enabled, option in ((settings.deepspeed is not None, trainer.is_deepspeed_enabled, "--deepspeed"),
                                       (settings.fsdp, trainer.is_fsdp_enabled, "--fsdp")):
        if requested and not enabled:  # accelerate ignores both outside a multi-process accelerator launch
            raise ValueError(f"{option} was not applied by accelerate (distributed type "
                             f"{trainer.accelerator.distributed_type}); launch one process per GPU with "
                             "accelerate launch, torchrun or deepspeed.")
    bars_were_enabled = transformers_logging.is_progress_bar_enabled()
    # transformers' own bars (a one-line "Writing model shards" bar at every checkpoint) only interleave with
    # the Trainer's training bar, which is a plain tqdm bar and stays (unless --no-progress).
    transformers_logging.disable_progress_bar()
    try:
        if existing is not None and int(saved_trainer_state["global_step"]) >= settings.max_steps:
            logger.info("Checkpoint %s already reached max_steps=%d; not training.", existing, settings.max_steps)
            trainer._load_from_checkpoint(str(existing))
            steps = int(saved_trainer_state["global_step"])
            log_history = saved_trainer_state["log_history"]
            epochs = float(saved_trainer_state.get("epoch") or 0.0)
        else:
            if existing is not None:
                logger.info("Resuming from %s at step %d.", existing, saved_trainer_state["global_step"])
            trainer.train(resume_from_checkpoint=str(existing) if existing is not None else None)
            steps = trainer.state.global_step
            log_history = trainer.state.log_history
            epochs = float(trainer.state.epoch or 0.0)
        loss_history = [(int(entry["step"]), float(entry["loss"])) for entry in log_history if "loss" in entry]
        final_loss = loss_history[-1][1] if loss_history else None
        seconds = trainer.elapsed()

        if save_final:
            trainer.save_model(str(output_dir))
            if trainer.is_world_process_zero():
                _write_json(
                    output_dir / SUMMARY_NAME,
                    {
                        "steps": steps,
                        "seconds": seconds,
                        "final_loss": final_loss,
                        "tokens_seen": trainer.input_tokens + trainer.target_tokens,
                        "input_tokens": trainer.input_tokens,
                        "target_tokens": trainer.target_tokens,
                        "epochs": epochs,
                        "stopped_by": control.stopped_by,
                    },
                )
            trainer.accelerator.wait_for_everyone()
    finally:
        model.eval()
        if bars_were_enabled:
            transformers_logging.enable_progress_bar()

    return TrainingResult(
        steps=steps, seconds=seconds, final_loss=final_loss, loss_history=loss_history, stopped_by=control.stopped_by
    )
