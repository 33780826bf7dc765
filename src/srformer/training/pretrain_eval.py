"""Teacher-forced copy accuracy of a seq2seq model, and a ``TrainerCallback`` that logs it during pretraining.

A model that reads its input can copy it: given a document's first ``n`` tokens as the source and the same
tokens as the target, teacher forcing predicts each target token from the source and the correct previous
tokens. The share of target tokens whose arg-max prediction is right is the copy accuracy (chance is about
``1 / vocabulary``; a model that ignores its input stays at the share of the most frequent tokens).
"""

from __future__ import annotations

from collections.abc import Sequence

import torch
from transformers import PreTrainedModel, TrainerCallback

__all__ = ["CopyAccuracyCallback", "copy_accuracy"]


@torch.no_grad()
def copy_accuracy(model: PreTrainedModel, sequences: Sequence[Sequence[int]], *, pad_id: int,
                  batch_size: int = 16) -> dict[str, float]:
    """Teacher-forced copy accuracy and mean token loss of ``model`` on ``sequences`` (each both source and target).

    The model is evaluated in eval mode (no dropout: no random numbers are drawn) and put back into the mode it
    was in.

    Args:
        model: a seq2seq model taking ``input_ids``, ``attention_mask`` and ``labels``.
        sequences: token ids, each ending with ``</s>`` (the target ends there too).
        pad_id: padding id of the inputs (labels are padded with -100).
        batch_size: sequences per forward pass.

    Returns:
        ``{"copy_accuracy": fraction of target tokens predicted right (0-1), "copy_loss": mean cross-entropy per
        target token (nats), "copy_tokens": target tokens counted}``.

    Raises:
        ValueError: ``sequences`` is empty.
    """
    if not sequences:
        raise ValueError("copy_accuracy needs at least one sequence")
    was_training = model.training
    model.eval()
    correct = total = 0
    loss_sum = 0.0
    device = model.device
    try:
        for start in range(0, len(sequences), batch_size):
            batch = sequences[start:start + batch_size]
            width = max(len(tokens) for tokens in batch)
            input_ids = torch.full((len(batch), width), pad_id, dtype=torch.long)
            labels = torch.full((len(batch), width), -100, dtype=torch.long)
            for row, tokens in enumerate(batch):
                input_ids[row, :len(tokens)] = torch.tensor(list(tokens))
                labels[row, :len(tokens)] = torch.tensor(list(tokens))
            mask = (labels != -100).long()
            logits = model(input_ids=input_ids.to(device), attention_mask=mask.to(device),
                           labels=labels.to(device)).logits.float()
            labels = labels.to(device)
            valid = labels != -100
            correct += int(((logits.argmax(-1) == labels) & valid).sum())
            total += int(valid.sum())
            loss_sum += float(torch.nn.functional.cross_entropy(
                logits[valid], labels[valid], reduction="sum"))
    finally:
        model.train(was_training)
    return {"copy_accuracy": correct / total, "copy_loss": loss_sum / total, "copy_tokens": total}


class CopyAccuracyCallback(TrainerCallback):
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

    def on_step_end(self, args, state, control, model=None, **kwargs):
        step = state.global_step
        if model is None or not self.sequences or not (step % self.every == 0 or step >= state.max_steps):
            return control
        entry: dict = {"step": step, **copy_accuracy(model, self.sequences, pad_id=self.pad_id)}
        if self.source_length is not None:
            entry["source_length"] = self.source_length(step - 1)
        if state.is_world_process_zero:
            state.log_history.append(entry)
        return control
