"""srformer's ``Seq2SeqTrainer``: atomic checkpoints, token counts, time budget and loss windows.

:func:`training_arguments` maps :class:`TrainingSettings` onto ``Seq2SeqTrainingArguments``;
:class:`SRformerTrainer` is ``transformers.Seq2SeqTrainer`` with four changes:

* checkpoints are written into a temporary directory and swapped in atomically
  (:mod:`srformer.training.checkpoint`), with ``run_state.json`` (settings, elapsed time, token counts);
* the loss is the mean over the micro-batches of their per-batch mean (``model_accepts_loss_kwargs`` is
  switched off: T5 and BART accept ``**kwargs`` but ignore the Trainer's ``num_items_in_batch``, so the
  Trainer would otherwise skip its division by the accumulation steps and scale gradients and logged
  loss by ``gradient_accumulation_steps``);
* weight decay applies to matrices only (parameters with at least 2 dimensions);
* input and target tokens are counted over all processes.

:class:`RunControl` (a ``TrainerCallback``) stops at the time budget and closes the loss window at every
checkpoint and at the end, so that a resumed run logs exactly the loss history of an uninterrupted one.
"""

from __future__ import annotations

import json
import logging
import os
import shutil
import time
from pathlib import Path
from typing import Any

import torch
import torch.distributed as dist
from transformers import Seq2SeqTrainer, Seq2SeqTrainingArguments, TrainerCallback
from transformers.trainer_utils import PREFIX_CHECKPOINT_DIR

from srformer.training.checkpoint import RUN_STATE_NAME, publish_checkpoint, remove_stale_temporaries, staging_dir
from srformer.training.settings import TrainingSettings

__all__ = ["RunControl", "SRformerTrainer", "training_arguments"]

logger = logging.getLogger(__name__)


def training_arguments(settings: TrainingSettings, output_dir: str | os.PathLike[str], *, use_cpu: bool,
                       sequential: bool = False):
    """``Seq2SeqTrainingArguments`` for ``settings``, writing into ``output_dir``.

    Steps, learning rate, warm-up (linear schedule), weight decay, batch size per process, gradient
    accumulation, clipping, seed (also the data-order seed: epoch ``e`` is shuffled with ``seed + e``),
    checkpoint interval (``save_steps``), logging interval (``logging_steps``), mixed precision,
    activation checkpointing, DeepSpeed/FSDP configs and logging integrations come from ``settings``.
    Every checkpoint is kept by srformer's own rotation (one latest checkpoint), so ``save_total_limit`` is
    unset. ``use_cpu`` must be True on machines without an accelerator: only then does accelerate join
    several launched CPU processes into one gloo group. ``sequential=True`` feeds the examples in dataset order
    (``train_sampling_strategy="sequential"``) instead of shuffling them, for datasets whose example ``i`` is
    meant for optimizer step ``i // (batch size x accumulation x processes)`` (a length curriculum).

    Raises:
        ValueError, ImportError: From transformers, e.g. a ``deepspeed`` config without the ``deepspeed``
            package, or an invalid FSDP config.
    """
    return Seq2SeqTrainingArguments(
        output_dir=str(output_dir),
        max_steps=settings.max_steps,
        learning_rate=settings.learning_rate,
        weight_decay=settings.weight_decay,
        warmup_steps=settings.warmup_steps,
        lr_scheduler_type="linear",
        per_device_train_batch_size=settings.batch_size,
        gradient_accumulation_steps=settings.gradient_accumulation_steps,
        max_grad_norm=settings.max_grad_norm,
        seed=settings.seed,
        data_seed=settings.seed,
        save_strategy="steps",
        save_steps=settings.save_every,
        logging_strategy="steps",
        logging_steps=settings.log_every,
        disable_tqdm=not settings.progress,
        bf16=settings.mixed_precision == "bf16",
        fp16=settings.mixed_precision == "fp16",
        activation_checkpointing=settings.gradient_checkpointing,
        activation_checkpointing_kwargs={"use_reentrant": False} if settings.gradient_checkpointing else None,
        deepspeed=settings.deepspeed,
        fsdp=True if settings.fsdp else None,  # type: ignore[arg-type]  # documented as True, annotated str | None
        fsdp_config=settings.fsdp_config,
        report_to=list(settings.report_to) or "none",
        use_cpu=use_cpu,
        remove_unused_columns=False,
        ddp_find_unused_parameters=False,  # every parameter of every variant gets a gradient in each step
        dataloader_num_workers=0,
        train_sampling_strategy="sequential" if sequential else "random",
    )


class RunControl(TrainerCallback):
    """Time budget, loss-window flushing and log lines of one :func:`srformer.training.train` call.

    After every optimizer step: when ``time_budget_seconds`` of this call (counted from ``call_start``,
    ``time.monotonic()`` seconds) are spent, on any process, every process stops with a checkpoint. Whenever
    a checkpoint is written or training stops, the current logging window is closed (logged), so the loss
    history only depends on the steps, never on where a run was interrupted and resumed.

    Attributes:
        stopped_by: ``"max_steps"`` or ``"time_budget"``.
    """

    def __init__(self, time_budget_seconds: float | None, call_start: float):
        self.time_budget_seconds = time_budget_seconds
        self.call_start = call_start
        self.stopped_by = "max_steps"

    def _over_budget(self, args) -> bool:
        if self.time_budget_seconds is None:
            return False
        over = time.monotonic() - self.call_start >= self.time_budget_seconds
        if dist.is_available() and dist.is_initialized() and dist.get_world_size() > 1:
            flag = torch.tensor([float(over)], device=args.device)
            dist.all_reduce(flag, op=dist.ReduceOp.MAX)  # all processes must agree on stopping
            over = bool(flag.item())
        return over

    def on_step_end(self, args, state, control, **kwargs):
        if not control.should_training_stop and self.time_budget_seconds is not None and self._over_budget(args):
            control.should_training_stop = True
            control.should_save = True
            self.stopped_by = "time_budget"
            logger.info("Time budget of %.1f s reached at step %d.", self.time_budget_seconds, state.global_step)
        if control.should_save or control.should_training_stop:
            control.should_log = True
        return control

    def on_log(self, args, state, control, logs=None, **kwargs):
        if state.is_world_process_zero and logs and "loss" in logs:
            logger.info("step %d: loss %.4f, lr %.3e", state.global_step, logs["loss"], logs.get("learning_rate", 0.0))


class SRformerTrainer(Seq2SeqTrainer):
    """``Seq2SeqTrainer`` with atomic checkpoints, matrix-only weight decay, per-batch-mean loss and token counts.

    Args:
        settings: The run's :class:`TrainingSettings` (stored in every checkpoint's ``run_state.json``).
        run_dir: The run's output directory; the latest checkpoint is ``run_dir / "checkpoint"``.
        elapsed_before: Seconds of training of earlier (resumed-from) calls.
        call_start: ``time.monotonic()`` at the start of this call.
        tokens_before: ``(input_tokens, target_tokens)`` counted by earlier calls.
        **kwargs: Passed to ``Seq2SeqTrainer`` (model, args, train_dataset, data_collator, ...).
    """

    def __init__(self, *, settings: TrainingSettings, run_dir: Path, elapsed_before: float = 0.0,
                 call_start: float, tokens_before: tuple[int, int] = (0, 0), **kwargs: Any):
        super().__init__(**kwargs)
        # T5/BART accept **kwargs but compute a per-batch mean loss, ignoring `num_items_in_batch`.
        self.model_accepts_loss_kwargs = False
        self.settings = settings
        self.run_dir = Path(run_dir)
        self.elapsed_before = elapsed_before
        self.call_start = call_start
        self.input_tokens, self.target_tokens = tokens_before
        self._writing_into: Path | None = None

    def elapsed(self) -> float:
        """Seconds of training so far, over all calls of this run."""
        return self.elapsed_before + (time.monotonic() - self.call_start)

    def run_state(self) -> dict[str, Any]:
        """srformer's bookkeeping saved as ``run_state.json`` in every checkpoint."""
        return {
            "step": self.state.global_step,
            "elapsed_seconds": self.elapsed(),
            "input_tokens": self.input_tokens,
            "target_tokens": self.target_tokens,
            "settings": self.settings.to_dict(),
        }

    def get_decay_parameter_names(self, model: torch.nn.Module) -> list[str]:
        """Names of the parameters AdamW decays: matrices only (biases, norm weights, RAF vectors are not)."""
        return [name for name, parameter in model.named_parameters() if parameter.ndim >= 2]

    def training_step(self, model, inputs, num_items_in_batch=None):
        """The Trainer's step, counting the micro-batch's real input tokens (attention mask) and target tokens
        (labels other than -100), summed over all processes."""
        mask = inputs.get("attention_mask")
        input_count = int(mask.sum()) if mask is not None else inputs["input_ids"].numel()
        counts = torch.tensor([input_count, int((inputs["labels"] != -100).sum())], device=self.args.device)
        total = self.accelerator.gather(counts).view(-1, 2).sum(dim=0).tolist()
        self.input_tokens += int(total[0])
        self.target_tokens += int(total[1])
        return super().training_step(model, inputs, num_items_in_batch)

    def _get_output_dir(self, trial) -> str:
        # While a checkpoint is saved, the Trainer writes `<this>/checkpoint-<step>` into the staging directory.
        if self._writing_into is not None:
            return str(self._writing_into)
        return super()._get_output_dir(trial)

    def _save_checkpoint(self, model, trial) -> None:
        """The Trainer's checkpoint, written into ``.checkpoint-tmp-<step>`` and swapped in atomically."""
        step = self.state.global_step
        staging = staging_dir(self.run_dir, step)
        if self.args.should_save:
            self.run_dir.mkdir(parents=True, exist_ok=True)
            remove_stale_temporaries(self.run_dir)
        self.accelerator.wait_for_everyone()
        self._writing_into = staging
        try:
            super()._save_checkpoint(model, trial)
        finally:
            self._writing_into = None
        self.accelerator.wait_for_everyone()  # every process wrote its files (RNG state, shards)
        if self.args.should_save:
            written = staging / f"{PREFIX_CHECKPOINT_DIR}-{step}"
            (written / RUN_STATE_NAME).write_text(json.dumps(self.run_state(), indent=2), encoding="utf-8")
            publish_checkpoint(written, self.run_dir)
            shutil.rmtree(staging)
        self.accelerator.wait_for_everyone()
