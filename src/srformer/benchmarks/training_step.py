"""Time of one training step: forward and backward of the whole model (encoder included).

Random token ids stand in for a document of ``k`` tokens and a summary of ``label_length``
tokens. The step is ``model(input_ids, attention_mask, labels).loss.backward()`` in train mode
(dropout on), as :mod:`srformer.training.loop` calls it; the optimizer update is not part of it.
Gradients are cleared between steps, outside the timed region.
"""

from __future__ import annotations

import torch
from transformers import PreTrainedModel

from srformer.benchmarks.timing import TimingSummary, repeat_samples, time_call


def measure_training_step(
    model: PreTrainedModel,
    *,
    batch_size: int,
    encoder_length: int,
    label_length: int,
    repeats: int,
    warmup: int = 1,
    seed: int = 0,
) -> TimingSummary:
    """Median wall-clock time of forward + backward of ``model``.

    Args:
        model: a seq2seq model (unmodified or converted); left in eval mode with no gradients afterwards.
        batch_size: sequences per step.
        encoder_length: ``k``, input tokens per sequence (no padding).
        label_length: target tokens per sequence (e.g. the target length T = 128).
        repeats: timed steps (the median is reported).
        warmup: discarded steps before them.
        seed: seed of the random token ids.

    Returns:
        A :class:`TimingSummary` in seconds per step.

    Raises:
        ValueError: for ``repeats < 1``, ``warmup < 0`` or a non-positive size.
    """
    for name, value in (("batch_size", batch_size), ("encoder_length", encoder_length), ("label_length", label_length)):
        if value < 1:
            raise ValueError(f"`{name}` must be >= 1, got {value}.")
    device = model.device
    generator = torch.Generator().manual_seed(seed)
    vocab = model.config.vocab_size
    input_ids = torch.randint(2, vocab, (batch_size, encoder_length), generator=generator).to(device)
    labels = torch.randint(2, vocab, (batch_size, label_length), generator=generator).to(device)
    attention_mask = torch.ones_like(input_ids)

    def step() -> None:
        loss = model(input_ids=input_ids, attention_mask=attention_mask, labels=labels).loss
        loss.backward()

    def sample() -> float:
        model.zero_grad(set_to_none=True)
        return time_call(step, device)[1]

    model.train()
    try:
        return repeat_samples(sample, repeats=repeats, warmup=warmup)
    finally:
        model.zero_grad(set_to_none=True)
        model.eval()
