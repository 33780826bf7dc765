"""Teacher-forced accuracy of a seq2seq model on held-out examples, and ``TrainerCallback``s that log it during
pretraining.

A model that reads its input can copy it: given a document's first ``n`` tokens as the source and the same
tokens as the target, teacher forcing predicts each target token from the source and the correct previous
tokens. The share of target tokens whose arg-max prediction is right is the copy accuracy (chance is about
``1 / vocabulary``; a model that ignores its input stays at the share of the most frequent tokens). The same
measure on each objective's held-out examples (:class:`ObjectiveAccuracyCallback`) tells whether the model learns
the content-addressing objectives (cued copy, gap sentences, reordering) or only the positional ones.
"""

from __future__ import annotations

from collections.abc import Mapping, Sequence

import torch
from transformers import PreTrainedModel, TrainerCallback

__all__ = ["CopyAccuracyCallback", "ObjectiveAccuracyCallback", "copy_accuracy", "teacher_forced_accuracy"]


@torch.no_grad()
def teacher_forced_accuracy(model: PreTrainedModel, pairs: Sequence[tuple[Sequence[int], Sequence[int]]], *,
                            pad_id: int, batch_size: int = 16) -> dict[str, float]:
    """Teacher-forced accuracy and mean token loss of ``model`` on ``(source, target)`` token id pairs.

    The model is evaluated in eval mode (no dropout: no random numbers are drawn) and put back into the mode it
    was in.

    Args:
        model: a seq2seq model taking ``input_ids``, ``attention_mask`` and ``labels``.
        pairs: ``(source, target)`` token ids, each ending with ``</s>``.
        pad_id: padding id of the inputs (labels are padded with -100).
        batch_size: pairs per forward pass.

    Returns:
        ``{"accuracy": fraction of target tokens predicted right (0-1), "loss": mean cross-entropy per target token
        (nats), "tokens": target tokens counted}``.

    Raises:
        ValueError: ``pairs`` is empty.
    """
    if not pairs:
        raise ValueError("teacher_forced_accuracy needs at least one (source, target) pair")
    was_training = model.training
    model.eval()
    correct = total = 0
    loss_sum = 0.0
    device = model.device
    try:
        for start in range(0, len(pairs), batch_size):
            batch = pairs[start:start + batch_size]
            source_width = max(len(source) for source, _ in batch)
            target_width = max(len(target) for _, target in batch)
            input_ids = torch.full((len(batch), source_width), pad_id, dtype=torch.long)
            mask = torch.zeros((len(batch), source_width), dtype=torch.long)
            labels = torch.full((len(batch), target_width), -100, dtype=torch.long)
            for row, (source, target) in enumerate(batch):
                input_ids[row, :len(source)] = torch.tensor(list(source))
                mask[row, :len(source)] = 1
                labels[row, :len(target)] = torch.tensor(list(target))
            logits = model(input_ids=input_ids.to(device), attention_mask=mask.to(device),
                           labels=labels.to(device)).logits.float()
            labels = labels.to(device)
            valid = labels != -100
            correct += int(((logits.argmax(-1) == labels) & valid).sum())
            total += int(valid.sum())
            loss_sum += float(torch.nn.functional.cross_entropy(logits[valid], labels[valid], reduction="sum"))
    finally:
        model.train(was_training)
    return {"accuracy": correct / total, "loss": loss_sum / total, "tokens": total}


def copy_accuracy(model: PreTrainedModel, sequences: Sequence[Sequence[int]], *, pad_id: int,
                  batch_size: int = 16) -> dict[str, float]:
    """Teacher-forced copy accuracy and mean token loss of ``model`` on ``sequences`` (each both source and target),
    by :func:`teacher_forced_accuracy`.

    Returns:
        ``{"copy_accuracy": 0-1, "copy_loss": nats per target token, "copy_tokens": target tokens counted}``.

    Raises:
        ValueError: ``sequences`` is empty.
    """
    if not sequences:
        raise ValueError("copy_accuracy needs at least one sequence")
    result = teacher_forced_accuracy(model, [(tokens, tokens) for tokens in sequences], pad_id=pad_id,
                                     batch_size=batch_size)
    return {f"copy_{key}": value for key, value in result.items()}


class _HeldOutCallback(TrainerCallback):
    """Every ``every`` optimizer steps and at the last one, append ``{"step": step, **self.measure(model, step)}`` to
    the Trainer's ``log_history`` (saved in every checkpoint and restored on resume); nothing when there is nothing
    to measure (:attr:`has_examples`)."""

    every: int

    @property
    def has_examples(self) -> bool:
        raise NotImplementedError

    def measure(self, model: PreTrainedModel, step: int) -> dict:
        raise NotImplementedError

    def on_step_end(self, args, state, control, model=None, **kwargs):
        step = state.global_step
        if model is None or not self.has_examples or not (step % self.every == 0 or step >= state.max_steps):
            return control
        entry: dict = {"step": step, **self.measure(model, step)}
        if state.is_world_process_zero:
            state.log_history.append(entry)
        return control


class CopyAccuracyCallback(_HeldOutCallback):
    """Every ``every`` optimizer steps and at the last one, append ``{"step", "copy_accuracy", "copy_loss",
    "copy_tokens", "source_length"}`` to the Trainer's ``log_history`` (saved in every checkpoint and restored on
    resume, so the log does not depend on interruptions).

    Args:
        sequences: held-out token sequences (source = target), see :func:`copy_accuracy`.
        pad_id: padding id.
        every: steps between measurements (>= 1).
        source_length: the curriculum's source length at a 0-based step (logged beside the accuracy).
    """

    def __init__(self, sequences: Sequence[Sequence[int]], *, pad_id: int, every: int, source_length=None):
        self.sequences = [list(tokens) for tokens in sequences]
        self.pad_id = pad_id
        self.every = every
        self.source_length = source_length

    @property
    def has_examples(self) -> bool:
        return bool(self.sequences)

    def measure(self, model: PreTrainedModel, step: int) -> dict:
        entry: dict = copy_accuracy(model, self.sequences, pad_id=self.pad_id)
        if self.source_length is not None:
            entry["source_length"] = self.source_length(step - 1)
        return entry


class ObjectiveAccuracyCallback(_HeldOutCallback):
    """Every ``every`` optimizer steps and at the last one, append ``{"step", "heldout_<objective>_accuracy",
    "heldout_<objective>_loss", "heldout_<objective>_tokens", ...}`` (one triple per objective,
    :func:`teacher_forced_accuracy` on that objective's held-out examples) to the Trainer's ``log_history``.

    Args:
        examples: per objective name, fixed held-out ``(source, target)`` pairs (made from documents the model
            never trains on).
        pad_id: padding id.
        every: steps between measurements (>= 1).
    """

    def __init__(self, examples: Mapping[str, Sequence[tuple[Sequence[int], Sequence[int]]]], *, pad_id: int,
                 every: int):
        self.examples = {name: list(pairs) for name, pairs in examples.items() if pairs}
        self.pad_id = pad_id
        self.every = every

    @property
    def has_examples(self) -> bool:
        return bool(self.examples)

    def measure(self, model: PreTrainedModel, step: int) -> dict:
        return {f"heldout_{name}_{key}": value for name, pairs in self.examples.items()
                for key, value in teacher_forced_accuracy(model, pairs, pad_id=self.pad_id).items()}
