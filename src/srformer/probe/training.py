"""A small self-contained training loop for the probe: fresh examples at every step, a length curriculum.

Plain PyTorch: AdamW, linear warm-up then linear decay, gradients clipped to norm 1, no dropout.
Every batch is generated from a stream seeded by ``(seed, step)``, so a run never sees a fixed small
training set and a resumed run draws the same batches as an uninterrupted one would.
"""

from __future__ import annotations

import math
import random
import time
from collections.abc import Callable, Sequence
from contextlib import nullcontext
from dataclasses import dataclass
from typing import Any

import torch
from transformers import PreTrainedModel, T5Config, T5ForConditionalGeneration

from srformer.evaluation.recurrent_term import RecurrentTermMonitor, recurrent_layers
from srformer.probe.grid import ModelShape  # defined with the grid's settings, which hold one (light)
from srformer.probe.tasks import Example, ProbeVocabulary, TaskSpec, generate_example
from srformer.training.curriculum import curriculum_length


def build_model(vocabulary: ProbeVocabulary, shape: ModelShape, seed: int) -> T5ForConditionalGeneration:
    """A randomly initialised ``T5ForConditionalGeneration`` (no dropout) sized for ``vocabulary``;
    ``seed`` sets the initialisation."""
    torch.manual_seed(seed)
    config = T5Config(  # type: ignore[call-arg]
        vocab_size=len(vocabulary), pad_token_id=vocabulary.pad_id, eos_token_id=vocabulary.eos_id,
        decoder_start_token_id=vocabulary.pad_id, dropout_rate=0.0, d_model=shape.d_model, d_ff=shape.d_ff,
        num_layers=shape.num_layers, num_decoder_layers=shape.num_decoder_layers, num_heads=shape.num_heads,
        d_kv=shape.d_kv,
    )
    return T5ForConditionalGeneration(config)


def collate(examples: Sequence[Example], vocabulary: ProbeVocabulary) -> dict[str, torch.Tensor]:
    """Batch tensors: ``input_ids`` (B, k), ``attention_mask`` (B, k), ``labels`` (B, L+1) with ``</s>``
    appended and ``-100`` padding (targets of one task and size have the same length), and
    ``overlay_ids`` (B, k), ``-1`` where no token is superposed, when any example has an overlay.
    :func:`model_inputs` turns such a batch into the model's keyword arguments."""
    length = max(len(e.source) for e in examples)
    width = max(len(e.target) for e in examples) + 1
    input_ids = torch.full((len(examples), length), vocabulary.pad_id, dtype=torch.long)
    mask = torch.zeros((len(examples), length), dtype=torch.long)
    labels = torch.full((len(examples), width), -100, dtype=torch.long)
    for b, example in enumerate(examples):
        input_ids[b, : len(example.source)] = torch.tensor(example.source)
        mask[b, : len(example.source)] = 1
        labels[b, : len(example.target) + 1] = torch.tensor([*example.target, vocabulary.eos_id])
    batch = {"input_ids": input_ids, "attention_mask": mask, "labels": labels}
    if any(example.overlay for example in examples):
        overlay = torch.full((len(examples), length), -1, dtype=torch.long)
        for b, example in enumerate(examples):
            if example.overlay:
                overlay[b, : len(example.overlay)] = torch.tensor(example.overlay)
        batch["overlay_ids"] = overlay
    return batch


def model_inputs(model: PreTrainedModel, batch: dict[str, torch.Tensor]) -> dict[str, torch.Tensor]:
    """Keyword arguments for ``model`` from a :func:`collate` batch, on the model's device.

    Without ``overlay_ids`` the batch is returned as is (moved to the device). With them, the encoder input becomes
    ``inputs_embeds`` (B, k, d_model): the embedding of ``input_ids`` plus, where ``overlay_ids >= 0``,
    the embedding of the overlaid token (the model's own input embedding table, so a ``recall`` fact
    is the sum of its key's and its value's embeddings).
    """
    inputs = {name: tensor.to(model.device) for name, tensor in batch.items()}
    if "overlay_ids" not in inputs:
        return inputs
    overlay = inputs.pop("overlay_ids")
    embed = model.get_input_embeddings()
    present = (overlay >= 0).unsqueeze(-1)
    inputs["inputs_embeds"] = embed(inputs.pop("input_ids")) + embed(overlay.clamp(min=0)) * present
    return inputs


@dataclass(frozen=True)
class TrainSettings:
    """Budget of one training (or fine-tuning) run.

    Args:
        steps: optimizer steps (>= 0; 0 = no training: :func:`train_model` leaves the model as it is).
        batch_size: examples per step.
        learning_rate: peak AdamW learning rate.
        warmup: warm-up steps (linear), then linear decay to 10% of the peak.
        curriculum_start: document length (tokens) of the first batch (raised to the task's
            :meth:`~srformer.probe.tasks.TaskSpec.min_length` where shorter); the length grows linearly to
            the cell's length over ``curriculum_ramp`` of the steps. 0 = no curriculum.
        curriculum_hold: fraction of ``steps`` spent at ``curriculum_start`` before the length grows
            (the lookup is learned there, where steps are cheap).
        curriculum_ramp: fraction of ``steps`` over which the length then grows.
        weight_decay: AdamW weight decay.
        min_curriculum_segments: for 2 or more, the curriculum's documents hold at least this many full segments,
            ``min_curriculum_segments * segment_size`` tokens (capped at the cell's length), so that a segmented
            model has a previous segment, and a recurrent term, from the first step; 1 = no floor (every document
            is at least one segment). See :func:`curriculum_lengths`.
    """

    steps: int = 3000
    batch_size: int = 32
    learning_rate: float = 1e-3
    warmup: int = 100
    curriculum_start: int = 8
    curriculum_hold: float = 0.0
    curriculum_ramp: float = 0.5
    weight_decay: float = 0.0
    min_curriculum_segments: int = 1


def curriculum_lengths(settings: TrainSettings, spec: TaskSpec, vocabulary: ProbeVocabulary, *, length: int,
                       segment_size: int) -> list[int]:
    """Document length (tokens) of every training step's batch, one entry per step of ``settings.steps``.

    The curriculum (:func:`srformer.training.curriculum.curriculum_length`, linear growth) starts at the largest of
    ``settings.curriculum_start``, the task's shortest document (:meth:`TaskSpec.min_length`) and, when
    ``settings.min_curriculum_segments`` is 2 or more, the segment floor ``min_curriculum_segments * segment_size``;
    capped at ``length``. It grows to ``length``; the lengths never decrease, so none is below the (capped) floor.
    ``curriculum_start = 0`` trains at ``length`` throughout.

    Raises:
        ValueError: ``min_curriculum_segments < 1`` or ``segment_size < 1``.
    """
    if settings.min_curriculum_segments < 1:
        raise ValueError(
            f"`min_curriculum_segments` must be >= 1 (1 = no floor), got {settings.min_curriculum_segments}.")
    if segment_size < 1:
        raise ValueError(f"`segment_size` must be >= 1 token, got {segment_size}.")
    if not settings.curriculum_start:
        return [length] * settings.steps
    floor = settings.min_curriculum_segments * segment_size if settings.min_curriculum_segments > 1 else 0
    start = max(settings.curriculum_start, spec.min_length(vocabulary), floor)
    return [curriculum_length(step, settings.steps, start=min(start, length), final=length,
                              ramp=settings.curriculum_ramp, hold=settings.curriculum_hold)
            for step in range(settings.steps)]


def _lr_factor(step: int, settings: TrainSettings) -> float:
    if step < settings.warmup:
        return (step + 1) / settings.warmup
    remaining = max(1, settings.steps - settings.warmup)
    return max(0.1, 1.0 - 0.9 * (step - settings.warmup) / remaining)


def batch_examples(spec: TaskSpec, vocabulary: ProbeVocabulary, *, seed: int, step: int, batch_size: int, length: int,
                   segment_size: int, target_length: int) -> list[Example]:
    """The training batch of ``step``: a pure function of ``(seed, step)`` and the shapes."""
    rng = random.Random(f"probe-train:{seed}:{step}")
    return [generate_example(rng, spec, vocabulary, length=length, segment_size=segment_size,
                             target_length=target_length) for _ in range(batch_size)]


def train_model(
    model: PreTrainedModel,
    spec: TaskSpec,
    vocabulary: ProbeVocabulary,
    settings: TrainSettings,
    *,
    length: int,
    segment_size: int,
    target_length: int,
    seed: int,
    on_step: Callable[[int, float, int], None] | None = None,
    diagnostics_every: int = 0,
) -> dict:
    """Train ``model`` in place on fresh batches of ``spec``.

    Args:
        model: a (possibly converted) seq2seq model.
        spec: task and size.
        vocabulary: token ids.
        settings: budget.
        length: final document length ``k`` in tokens.
        segment_size: ``s`` in tokens (used to place ``copy``/``reverse`` tokens and for the curriculum's floor,
            :func:`curriculum_lengths`).
        target_length: the schedule's ``T``.
        seed: the data stream (and nothing else; the model's initialisation is the caller's).
        on_step: called as ``on_step(step, loss, length)`` after every step (progress bars).
        diagnostics_every: when > 0 and the model has recurrent SRformer layers, measure the recurrent term
            (:class:`~srformer.evaluation.recurrent_term.RecurrentTermMonitor`) at every step divisible by it
            and at the last step, on that step's own batch: the monitor watches the step's forward, the
            gradients are read after ``backward`` and before clipping. 0 disables.

    Returns:
        ``{"steps", "seconds", "final_loss", "diagnostics"}``: ``final_loss`` is the mean loss of the last 50
        steps; ``diagnostics`` a list of ``{"step", "loss", "length", "layers"}`` (``layers``: one dict per
        recurrent layer, :meth:`~srformer.evaluation.recurrent_term.RecurrentTermMonitor.report`), empty when
        nothing was measured. ``seconds`` includes the measurements. With ``steps = 0`` nothing is run: no
        optimizer, no forward pass, the model's weights and mode are left as they are, and the result is
        ``{"steps": 0, "seconds": 0.0, "final_loss": None, "diagnostics": []}``.

    Raises:
        ValueError: if ``steps`` is negative, ``batch_size`` is not positive, ``diagnostics_every`` is negative,
            or ``min_curriculum_segments`` is below 1.
    """
    if settings.steps < 0:
        raise ValueError(f"`steps` must be >= 0 (0 = no training), got {settings.steps}.")
    if settings.batch_size < 1:
        raise ValueError(f"`batch_size` must be >= 1, got {settings.batch_size}.")
    if diagnostics_every < 0:
        raise ValueError(f"`diagnostics_every` must be >= 0 (0 disables), got {diagnostics_every}.")
    schedule = curriculum_lengths(settings, spec, vocabulary, length=length, segment_size=segment_size)
    if not schedule:  # steps = 0: the model is scored as it is
        return {"steps": 0, "seconds": 0.0, "final_loss": None, "diagnostics": []}
    monitored = diagnostics_every > 0 and bool(recurrent_layers(model))
    diagnostics: list[dict] = []
    decay: list[torch.nn.Parameter] = []
    no_decay: list[torch.nn.Parameter] = []
    for name, parameter in model.named_parameters():
        (no_decay if parameter.ndim < 2 or "norm" in name else decay).append(parameter)
    optimizer = torch.optim.AdamW(
        [{"params": decay, "weight_decay": settings.weight_decay}, {"params": no_decay, "weight_decay": 0.0}],
        lr=settings.learning_rate,
    )
    scheduler = torch.optim.lr_scheduler.LambdaLR(optimizer, lambda s: _lr_factor(s, settings))
    model.train()
    losses: list[float] = []
    started = time.perf_counter()
    for step, current in enumerate(schedule):
        examples = batch_examples(spec, vocabulary, seed=seed, step=step, batch_size=settings.batch_size,
                                  length=current, segment_size=segment_size, target_length=target_length)
        measure = monitored and (step % diagnostics_every == 0 or step == settings.steps - 1)
        monitor = RecurrentTermMonitor(model) if measure else None
        with monitor or nullcontext():
            loss = model(**model_inputs(model, collate(examples, vocabulary))).loss
        value = loss.item()
        if not math.isfinite(value):
            raise FloatingPointError(f"Probe training loss became {value} at step {step}; lower the learning rate.")
        optimizer.zero_grad(set_to_none=True)
        loss.backward()
        if monitor is not None:
            diagnostics.append({"step": step, "loss": value, "length": current, "layers": monitor.report()})
        torch.nn.utils.clip_grad_norm_(model.parameters(), 1.0)
        optimizer.step()
        scheduler.step()
        losses.append(value)
        if on_step is not None:
            on_step(step, value, current)
    tail = losses[-50:]
    return {"steps": settings.steps, "seconds": time.perf_counter() - started, "final_loss": sum(tail) / len(tail),
            "diagnostics": diagnostics}


def diagnose(model: PreTrainedModel, examples: Sequence[Example], vocabulary: ProbeVocabulary) -> dict | None:
    """Measure the recurrent term on ``examples`` (one batch): a forward with autograd and a backward, no
    optimizer step; the gradients are cleared before and after (``model``'s parameters are unchanged).

    Returns:
        ``{"examples", "loss", "length", "layers"}`` (``length``: the longest document in tokens; ``layers``:
        :meth:`~srformer.evaluation.recurrent_term.RecurrentTermMonitor.report`, one dict per recurrent
        layer), or None when ``model`` has no recurrent SRformer layer.
    """
    if not recurrent_layers(model) or not examples:
        return None
    was_training = model.training
    model.train()
    model.zero_grad(set_to_none=True)
    with RecurrentTermMonitor(model) as monitor:
        loss = model(**model_inputs(model, collate(examples, vocabulary))).loss
    loss.backward()
    result = {"examples": len(examples), "loss": loss.item(), "length": max(len(e.source) for e in examples),
              "layers": monitor.report()}
    model.zero_grad(set_to_none=True)
    model.train(was_training)
    return result


@torch.inference_mode()
def predict_stepwise(model: PreTrainedModel, examples: Sequence[Example], vocabulary: ProbeVocabulary, *,
                     batch_size: int = 64) -> list[list[int]]:
    """:func:`predict` one decoder position at a time through the generation cache, as ``generate()`` runs: the
    encoder once, then each target position's argmax given the true prefix (token ids, one list per example). The
    cross attention takes its generation path (a state built at the first step, then read per step): the path where
    ``knn``'s search index is used.
    """
    model.eval()
    predictions: list[list[int]] = []
    for first in range(0, len(examples), batch_size):
        chunk = examples[first:first + batch_size]
        inputs = model_inputs(model, collate(chunk, vocabulary))
        labels = inputs.pop("labels")
        encoder: Any = model.get_encoder()
        encoded = encoder(**inputs)
        shift: Any = model.prepare_decoder_input_ids_from_labels
        decoder_ids = shift(labels=labels)
        cache, steps = None, []
        for t in range(decoder_ids.shape[1]):
            output = model(encoder_outputs=encoded, attention_mask=inputs["attention_mask"],
                           decoder_input_ids=decoder_ids[:, t:t + 1], cache=cache, use_cache=True)
            cache = output.cache
            steps.append(output.logits[:, -1].argmax(dim=-1))
        for row, example in zip(torch.stack(steps, dim=1).tolist(), chunk, strict=True):
            predictions.append(row[: len(example.target)])
    model.train()
    return predictions


def predict(model: PreTrainedModel, examples: Sequence[Example], vocabulary: ProbeVocabulary, *,
            batch_size: int = 64) -> list[list[int]]:
    """Teacher-forced predictions: the argmax token at every target position given the true target prefix
    (token ids, one list per example, as long as its target).

    Teacher forcing is what lets ``recall`` give its query keys to the decoder: the key tokens are inputs,
    never predictions. A previous value token carries no information about the next one (values are
    independent), so for the scored positions this equals decoding with the keys forced.
    """
    model.eval()
    predictions: list[list[int]] = []
    for first in range(0, len(examples), batch_size):
        chunk = examples[first:first + batch_size]
        logits = model(**model_inputs(model, collate(chunk, vocabulary))).logits
        for row, example in zip(logits.argmax(dim=-1).tolist(), chunk, strict=True):
            predictions.append(row[: len(example.target)])
    model.train()
    return predictions
