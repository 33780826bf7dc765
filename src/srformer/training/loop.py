"""The training loop (:func:`train`) and its result (:class:`TrainingResult`)."""

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

import torch
from accelerate import Accelerator
from accelerate.state import AcceleratorState
from accelerate.utils import set_seed
from torch.utils.data import DataLoader, Dataset
from tqdm.auto import tqdm
from transformers import DataCollatorForSeq2Seq, PreTrainedModel, PreTrainedTokenizerBase
from transformers import get_linear_schedule_with_warmup

from srformer.training.checkpoint import find_checkpoint, load_checkpoint, save_checkpoint
from srformer.training.distributed import check_mixed_precision, process_state
from srformer.training.settings import TrainingSettings

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
            ``settings.log_every`` steps, keyed by the window's last step (plus a final, possibly shorter
            window when training stops).
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


def _parameter_groups(model: torch.nn.Module, weight_decay: float) -> list[dict[str, Any]]:
    decay, no_decay = [], []
    for parameter in model.parameters():
        if parameter.requires_grad:
            (decay if parameter.ndim >= 2 else no_decay).append(parameter)
    groups = [{"params": decay, "weight_decay": weight_decay}, {"params": no_decay, "weight_decay": 0.0}]
    return [group for group in groups if group["params"]]


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


def _make_accelerator(settings: TrainingSettings) -> Accelerator:
    """An ``Accelerator`` with the run's accumulation and mixed precision (after :func:`process_state`).

    accelerate keeps one process-wide state and refuses a second ``Accelerator`` of another
    mixed-precision mode; that part of the state (not the process group) is reset here, so that
    one process may run several trainings with different modes (tests, experiments).
    """
    state = process_state()
    check_mixed_precision(settings.mixed_precision, state.device)
    shared = AcceleratorState._shared_state
    if shared and shared.get("_mixed_precision") != settings.mixed_precision:
        AcceleratorState._reset_state(reset_partial_state=False)
    return Accelerator(
        gradient_accumulation_steps=settings.gradient_accumulation_steps, mixed_precision=settings.mixed_precision
    )


def enable_gradient_checkpointing(model: PreTrainedModel) -> None:
    """Turn on activation (gradient) checkpointing of a Hugging Face model, in place.

    Uses ``activation_checkpointing_enable()`` where transformers has it (recent 5.x releases, which
    deprecate the old name), else ``gradient_checkpointing_enable()``, with non-reentrant
    ``torch.utils.checkpoint``. In training
    mode the model then passes no cache between layers; SRformer cross attention rebuilds its
    per-sequence state in the recomputation, so loss and gradients are unchanged (tested).

    Raises:
        ValueError: the model does not support gradient checkpointing (from transformers).
    """
    enable = getattr(model, "activation_checkpointing_enable", None)
    if enable is not None:
        enable(activation_checkpointing_kwargs={"use_reentrant": False})
    else:
        model.gradient_checkpointing_enable(gradient_checkpointing_kwargs={"use_reentrant": False})


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
) -> TrainingResult:
    """Fine-tune a seq2seq ``model`` on tokenized features, with atomic checkpoints and exact resumption.

    The model is trained in place (moved to the accelerator's device), in train mode, and put back in
    eval mode when the call returns or raises. Batches are padded with
    ``DataCollatorForSeq2Seq(tokenizer, model=model, label_pad_token_id=-100)`` (labels padded with
    -100, ``decoder_input_ids`` derived from the labels by the model). Epoch ``e`` is shuffled by a
    ``torch.Generator`` seeded ``settings.seed + e``. One optimizer step (AdamW, gradients clipped to
    ``settings.max_grad_norm``, linear schedule with warm-up over ``settings.max_steps``) is taken every
    ``settings.gradient_accumulation_steps`` batches and at the end of every epoch. Training stops after
    ``settings.max_steps`` steps or, if set, once ``settings.time_budget_seconds`` of this call have
    elapsed (checked after each step).

    A checkpoint (see :mod:`srformer.training.checkpoint`) is written to ``output_dir / "checkpoint"``
    every ``settings.save_every`` steps and when training stops. With ``resume=True`` the latest
    checkpoint is restored — weights, optimizer, scheduler, RNG states, step, epoch, position inside
    the epoch (already seen batches are skipped), elapsed time and loss history — so that on CPU an
    interrupted and resumed run ends with exactly the same weights as an uninterrupted one, provided
    the settings are unchanged. If the checkpoint already reached ``settings.max_steps``, no step is
    taken.

    Multiple processes (``torchrun`` or ``accelerate launch``, see :func:`process_state`): every
    process must call this function with the same features; accelerate gives each process its own
    batches of one shared shuffled order (``batch_size`` is per process, the global batch is
    ``batch_size x processes x gradient_accumulation_steps``) and averages the gradients. Only the
    main process writes the trainer state, the final model and ``training_summary.json``; every
    process saves its own RNG state into the checkpoint. Losses and token counts are reduced over
    all processes. A run may be resumed with the same number of processes.

    ``settings.mixed_precision`` runs the forward pass under bf16/fp16 autocast (accelerate);
    ``settings.gradient_checkpointing`` enables activation checkpointing on ``model``.

    Args:
        model: A Hugging Face seq2seq model returning ``.loss`` when given ``labels``.
        tokenizer: Its tokenizer (used for padding and saved with the final model).
        train_features: Tokenized, unpadded examples, each a dict with ``input_ids`` and ``labels``
            (lists of token ids) and optionally ``attention_mask``; other keys are ignored.
        output_dir: Directory for the checkpoint, the final model and ``training_summary.json``.
        settings: Hyper-parameters, see :class:`TrainingSettings`.
        resume: Continue from the checkpoint in ``output_dir``; if there is none, warn and start fresh.
        save_final: When done, save the model (``save_pretrained``), the tokenizer and
            ``training_summary.json`` (steps, seconds, final_loss, tokens seen) into ``output_dir``.

    Returns:
        A :class:`TrainingResult`.

    Raises:
        TypeError: If ``settings`` is not a :class:`TrainingSettings`.
        ValueError: If ``train_features`` is empty or an example lacks ``input_ids``/``labels``; or if
            ``resume`` is False and ``output_dir`` already holds a checkpoint (pass ``resume=True`` /
            ``--resume``, or choose another output directory); or for ``mixed_precision="fp16"``
            on a CPU (see :func:`check_mixed_precision`).
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

    accelerator = _make_accelerator(settings)
    set_seed(settings.seed)
    if settings.gradient_checkpointing:
        enable_gradient_checkpointing(model)

    collator = DataCollatorForSeq2Seq(tokenizer, model=model, label_pad_token_id=-100)
    # The generator drives both the shuffling and the DataLoader's base seed, so the global RNG (used by
    # dropout and restored from checkpoints) is not consumed by data loading.
    generator = torch.Generator()
    generator.manual_seed(settings.seed)
    loader = DataLoader(
        _FeatureDataset(train_features),
        batch_size=settings.batch_size,
        shuffle=True,
        generator=generator,
        collate_fn=collator,
    )
    optimizer = torch.optim.AdamW(
        _parameter_groups(model, settings.weight_decay), lr=settings.learning_rate, weight_decay=settings.weight_decay
    )
    # accelerate steps a prepared scheduler once per process at every optimizer step, so the schedule is
    # stretched by the number of processes to span `max_steps` optimizer steps.
    scale = accelerator.num_processes
    scheduler = get_linear_schedule_with_warmup(
        optimizer, num_warmup_steps=settings.warmup_steps * scale, num_training_steps=settings.max_steps * scale
    )
    model, optimizer, loader, scheduler = accelerator.prepare(model, optimizer, loader, scheduler)
    batches_per_epoch = len(loader)

    step = 0
    epoch = 0
    batches_seen = 0
    previous_seconds = 0.0
    loss_history: list[tuple[int, float]] = []
    window_loss_sum = 0.0
    window_steps = 0
    input_tokens = 0
    target_tokens = 0
    if existing is not None:
        state = load_checkpoint(accelerator, existing)
        _warn_on_changed_settings(state.get("settings", {}), settings)
        step = int(state["step"])
        epoch = int(state["epoch"])
        batches_seen = int(state["batches_seen_in_epoch"])
        previous_seconds = float(state["elapsed_seconds"])
        loss_history = [(int(s), float(value)) for s, value in state["loss_history"]]
        window_loss_sum = float(state.get("window_loss_sum", 0.0))
        window_steps = int(state.get("window_steps", 0))
        input_tokens = int(state.get("input_tokens", 0))
        target_tokens = int(state.get("target_tokens", 0))
        logger.info("Resumed from %s at step %d (epoch %d, batch %d).", existing, step, epoch, batches_seen)
        if step >= settings.max_steps:
            logger.info("Checkpoint already reached max_steps=%d; not training.", settings.max_steps)
    last_saved_step = step

    def elapsed() -> float:
        return previous_seconds + (time.monotonic() - call_start)

    def trainer_state() -> dict[str, Any]:
        return {
            "step": step,
            "epoch": epoch,
            "batches_seen_in_epoch": batches_seen,
            "elapsed_seconds": elapsed(),
            "loss_history": [[s, value] for s, value in loss_history],
            "settings": settings.to_dict(),
            "window_loss_sum": window_loss_sum,
            "window_steps": window_steps,
            "input_tokens": input_tokens,
            "target_tokens": target_tokens,
        }

    def flush_window() -> None:
        nonlocal window_loss_sum, window_steps
        if window_steps:
            loss_history.append((step, window_loss_sum / window_steps))
            window_loss_sum, window_steps = 0.0, 0

    stopped_by = "max_steps"
    progress = tqdm(
        total=settings.max_steps,
        initial=min(step, settings.max_steps),
        desc="training",
        unit="step",
        disable=not (settings.progress and accelerator.is_local_main_process),
    )
    model.train()
    try:
        done = step >= settings.max_steps
        micro_losses: list[torch.Tensor] = []
        micro_input_tokens = torch.zeros((), dtype=torch.long, device=accelerator.device)
        micro_target_tokens = torch.zeros((), dtype=torch.long, device=accelerator.device)
        while not done:
            if batches_seen >= batches_per_epoch:  # only after resuming with a changed data set
                epoch, batches_seen = epoch + 1, 0
            generator.manual_seed(settings.seed + epoch)
            epoch_loader = accelerator.skip_first_batches(loader, batches_seen) if batches_seen else loader
            for batch in epoch_loader:
                with accelerator.accumulate(model):
                    loss = model(**batch).loss
                    accelerator.backward(loss)
                    if accelerator.sync_gradients and settings.max_grad_norm > 0:
                        accelerator.clip_grad_norm_(model.parameters(), settings.max_grad_norm)
                    optimizer.step()
                    scheduler.step()
                    optimizer.zero_grad()
                batches_seen += 1
                micro_losses.append(loss.detach().float())
                mask = batch.get("attention_mask")
                micro_input_tokens += mask.sum() if mask is not None else batch["input_ids"].numel()
                micro_target_tokens += (batch["labels"] != -100).sum()
                if not accelerator.sync_gradients:
                    continue

                # One optimizer step is complete.
                step += 1
                if batches_seen >= batches_per_epoch:
                    epoch, batches_seen = epoch + 1, 0
                step_loss = accelerator.reduce(torch.stack(micro_losses).mean(), reduction="mean").item()
                input_tokens += int(accelerator.reduce(micro_input_tokens, reduction="sum").item())
                target_tokens += int(accelerator.reduce(micro_target_tokens, reduction="sum").item())
                micro_losses = []
                micro_input_tokens.zero_()
                micro_target_tokens.zero_()
                window_loss_sum += step_loss
                window_steps += 1
                progress.update(1)
                if step % settings.log_every == 0:
                    flush_window()
                    learning_rate = scheduler.get_last_lr()[0]
                    progress.set_postfix(loss=f"{loss_history[-1][1]:.4f}", lr=f"{learning_rate:.2e}")
                    logger.info("step %d: loss %.4f, lr %.3e", step, loss_history[-1][1], learning_rate)

                if step >= settings.max_steps:
                    stopped_by, done = "max_steps", True
                elif settings.time_budget_seconds is not None:
                    over = time.monotonic() - call_start >= settings.time_budget_seconds
                    # All processes must agree on stopping.
                    flag = torch.tensor(float(over), device=accelerator.device)
                    if accelerator.reduce(flag, reduction="sum").item() > 0:
                        stopped_by, done = "time_budget", True
                        logger.info("Time budget of %.1f s reached at step %d.", settings.time_budget_seconds, step)
                if done:
                    flush_window()
                    break
                if step % settings.save_every == 0:
                    save_checkpoint(accelerator, output_dir, trainer_state())
                    last_saved_step = step

        if step != last_saved_step:
            save_checkpoint(accelerator, output_dir, trainer_state())
        seconds = elapsed()
        final_loss = loss_history[-1][1] if loss_history else None

        if save_final:
            accelerator.wait_for_everyone()
            unwrapped = accelerator.unwrap_model(model)
            unwrapped.save_pretrained(
                output_dir, is_main_process=accelerator.is_main_process, state_dict=accelerator.get_state_dict(model)
            )
            if accelerator.is_main_process:
                tokenizer.save_pretrained(output_dir)
                _write_json(
                    output_dir / SUMMARY_NAME,
                    {
                        "steps": step,
                        "seconds": seconds,
                        "final_loss": final_loss,
                        "tokens_seen": input_tokens + target_tokens,
                        "input_tokens": input_tokens,
                        "target_tokens": target_tokens,
                        "epochs": epoch + batches_seen / batches_per_epoch,
                        "stopped_by": stopped_by,
                    },
                )
            accelerator.wait_for_everyone()
    finally:
        progress.close()
        model.eval()

    return TrainingResult(
        steps=step, seconds=seconds, final_loss=final_loss, loss_history=list(loss_history), stopped_by=stopped_by
    )
