"""Self-supervised pretraining of a small T5 or BART from documents alone (``srformer pretrain``).

Recipe (:class:`~srformer.training.pretrain_data.PretrainRecipe`): a Unigram tokenizer trained on the training
documents (plus T5's sentinel tokens), a randomly initialised named config, and examples mixing T5 span
corruption and copying (:mod:`srformer.data.objectives`) with a length curriculum on the source
(:mod:`srformer.training.curriculum`). Training runs on :func:`srformer.training.loop.train` (the Trainer, atomic
checkpoints, exact resumption), feeding the examples in order so that example ``i`` lands on its curriculum step.
A few training documents are held out to log the teacher-forced copy accuracy at the full input length
(:mod:`srformer.training.pretrain_eval`).

The output directory is a normal checkpoint (``save_pretrained`` model and tokenizer) that ``srformer train
--model``, ``srformer compare --model`` and ``AutoModelForSeq2SeqLM.from_pretrained`` load, plus
``pretrain_run.json`` (the recipe), ``pretrain_log.json`` (losses and copy accuracies), ``pretrain_loss.png``,
``training_summary.json`` and the resumable ``checkpoint/``.
"""

from __future__ import annotations

import dataclasses
import json
import os
from collections.abc import Sequence
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

import matplotlib
import torch
from transformers import AutoModelForSeq2SeqLM, AutoTokenizer, PreTrainedTokenizerBase

from srformer.data.objectives import sentinel_tokens
from srformer.data.sentences import sentence_token_starts
from srformer.data.tokenizer import train_unigram_tokenizer
from srformer.models.factory import NAMED_CONFIGS, load_model
from srformer.training.checkpoint import TRAINER_STATE_NAME, find_checkpoint
from srformer.training.distributed import process_state
from srformer.training.loop import refuse_to_overwrite, train
from srformer.training.pretrain_data import PretrainExamples, PretrainRecipe
from srformer.training.pretrain_eval import CopyAccuracyCallback, ObjectiveAccuracyCallback
from srformer.training.settings import TrainingSettings

matplotlib.use("Agg")  # PNGs without a display
import matplotlib.pyplot as plt  # noqa: E402

__all__ = ["LOG_NAME", "PLOT_NAME", "RECIPE_NAME", "PretrainResult", "pretrain"]

RECIPE_NAME = "pretrain_run.json"
LOG_NAME = "pretrain_log.json"
PLOT_NAME = "pretrain_loss.png"

#: Recipe fields whose change makes a checkpoint unusable or its continuation a different run, with their flags.
_RESUME_FIELDS = {
    "model": "--model", "vocab_size": "--vocab-size", "max_source_length": "--max-source-length",
    "max_target_length": "--max-target-length", "objective_mix": "--objective-mix",
    "noise_density": "--noise-density", "mean_span_length": "--mean-span-length",
    "curriculum_start": "--curriculum-start", "curriculum_hold": "--curriculum-hold",
    "curriculum_end": "--curriculum-end", "curriculum_growth": "--curriculum-growth",
    "eval_documents": "--eval-documents", "init_from": "--init-from",
}


@dataclass
class PretrainResult:
    """Outcome of :func:`pretrain`.

    Attributes:
        steps: optimizer steps done in total (over resumed calls).
        seconds: training wall-clock time in total (seconds).
        final_loss: mean training loss of the last logging window (None if no step was taken).
        stopped_by: ``"max_steps"`` or ``"time_budget"``.
        loss_history: ``(step, mean loss)`` per logging window.
        copy_history: the copy-accuracy entries (``step``, ``copy_accuracy``, ``copy_loss``, ``copy_tokens``,
            ``source_length``).
        objective_history: the held-out accuracy per objective (``step``, ``heldout_<objective>_accuracy``, ...;
            only with a sentence objective in the mix).
    """

    steps: int
    seconds: float
    final_loss: float | None
    stopped_by: str
    loss_history: list[tuple[int, float]] = field(default_factory=list)
    copy_history: list[dict[str, Any]] = field(default_factory=list)
    objective_history: list[dict[str, Any]] = field(default_factory=list)


def _check_resume(previous: dict[str, Any], recipe: PretrainRecipe, output: Path) -> None:
    requested = json.loads(json.dumps(recipe.to_dict()))
    differing = [name for name in _RESUME_FIELDS if previous.get(name) != requested.get(name)]
    if differing:
        details = "; ".join(f"{_RESUME_FIELDS[name]}: saved {previous.get(name)!r}, requested {requested.get(name)!r}"
                            for name in differing)
        raise ValueError(f"Cannot resume {output}: its pretraining run has other settings ({details}). Resume with the "
                         "saved values, or choose another --output for a new run.")


def _check_checkpoint_shape(output: Path, tokenizer: PreTrainedTokenizerBase, model_config: Any) -> None:
    """The checkpoint's model must match the tokenizer and the named config before the Trainer loads its weights."""
    checkpoint = find_checkpoint(output)
    config_file = checkpoint / "config.json" if checkpoint is not None else None
    if config_file is None or not config_file.is_file():
        return
    saved = json.loads(config_file.read_text(encoding="utf-8"))
    if saved.get("vocab_size") != len(tokenizer):
        raise ValueError(f"Cannot resume {output}: its checkpoint's model has {saved.get('vocab_size')} token "
                         f"embeddings but the tokenizer in {output} has {len(tokenizer)} tokens (--vocab-size plus "
                         "the sentinels); the tokenizer was replaced. Restore it, or start a new --output.")
    built = model_config.to_dict()
    differing = [key for key in ("model_type", "d_model", "num_layers", "encoder_layers", "decoder_layers",
                                 "num_decoder_layers", "d_ff", "encoder_ffn_dim")
                 if key in saved and key in built and saved[key] != built[key]]
    if differing:
        raise ValueError(f"Cannot resume {output}: the checkpoint's model differs from --model in "
                         f"{', '.join(f'{k} ({saved[k]!r} vs {built[k]!r})' for k in differing)}. Resume with the "
                         "saved --model, or choose another --output.")


def _check_sentinels(tokenizer: PreTrainedTokenizerBase, recipe: PretrainRecipe) -> None:
    """An ``--init-from`` tokenizer must hold every sentinel token the objectives may use."""
    missing = [token for token in sentinel_tokens(recipe.sentinel_count)
               if tokenizer.convert_tokens_to_ids(token) in (None, tokenizer.unk_token_id)]
    if missing:
        raise ValueError(f"--init-from {recipe.init_from}: its tokenizer lacks {len(missing)} of the "
                         f"{recipe.sentinel_count} sentinel tokens the objectives need (first: {missing[0]}); "
                         "continue from the output of `srformer pretrain`, whose tokenizer has them")


def pretrain_tokenizer(texts: Sequence[str], recipe: PretrainRecipe) -> PreTrainedTokenizerBase:
    """A Unigram tokenizer of ``recipe.vocab_size`` pieces trained on ``texts``, plus
    ``recipe.sentinel_count`` sentinel tokens ``<extra_id_i>`` (special tokens, ids after the pieces)."""
    tokenizer = train_unigram_tokenizer(texts, vocab_size=recipe.vocab_size)
    tokenizer.add_special_tokens({"additional_special_tokens": sentinel_tokens(recipe.sentinel_count)})
    return tokenizer


def encode_documents(tokenizer: PreTrainedTokenizerBase, texts: Sequence[str], *,
                     sentences: bool) -> tuple[list[list[int]], list[list[int]] | None]:
    """``(token ids per text, sentence start tokens per text or None)``: the texts tokenized without special tokens;
    with ``sentences``, each text's sentence starts (:func:`srformer.data.sentences.sentence_token_starts`, pysbd,
    about 0.1 s per 5,000 words) from the tokenizer's character offsets."""
    if not sentences:
        return tokenizer(list(texts), add_special_tokens=False)["input_ids"], None
    batch = tokenizer(list(texts), add_special_tokens=False, return_offsets_mapping=True)
    starts = [sentence_token_starts(text, offsets)
              for text, offsets in zip(texts, batch["offset_mapping"], strict=True)]
    return batch["input_ids"], starts


def held_out_examples(documents: Sequence[Sequence[int]], starts: Sequence[Sequence[int]] | None,
                      recipe: PretrainRecipe, *, sentinel_ids: Sequence[int], eos_id: int,
                      seed: int) -> dict[str, list[tuple[list[int], list[int]]]]:
    """Fixed held-out ``(source, target)`` pairs per objective of the mix, one per held-out document, at the full
    ``recipe.max_source_length`` (no curriculum); a document whose window cannot make that objective (too few
    sentences) gives none."""
    pairs: dict[str, list[tuple[list[int], list[int]]]] = {}
    for name in (name for name, weight in recipe.objective_mix.items() if weight > 0):
        single = dataclasses.replace(recipe, objective_mix={name: 1.0}, curriculum_start=recipe.max_source_length)
        examples = PretrainExamples(documents, single, max_steps=1, examples_per_step=len(documents),
                                    seed=seed + 7919, sentinel_ids=sentinel_ids, eos_id=eos_id, sentence_starts=starts)
        made = (examples.example(index) for index in range(len(examples)))
        pairs[name] = [(example["input_ids"], example["labels"]) for objective, example in made if objective == name]
    return pairs


def pretrain(
    documents: Sequence[str],
    recipe: PretrainRecipe,
    output_dir: str | os.PathLike[str],
    settings: TrainingSettings,
    *,
    resume: bool = False,
) -> PretrainResult:
    """Pretrain ``recipe.model`` from scratch on ``documents``; save a loadable checkpoint in ``output_dir``.

    The last ``recipe.eval_documents`` documents are held out (of the tokenizer too) for the copy-accuracy log;
    the rest train the tokenizer and the model. Pass only training documents: never validation or test ones.

    Args:
        documents: the training documents (texts).
        recipe: model, tokenizer, objectives and curriculum.
        output_dir: the run directory.
        settings: optimizer steps, learning rate, batch size, checkpoints, seed, time budget
            (:class:`~srformer.training.settings.TrainingSettings`).
        resume: continue the checkpoint in ``output_dir`` (same recipe required).

    Returns:
        A :class:`PretrainResult`.

    With ``recipe.init_from`` the run continues an earlier base (its tokenizer and weights) with this recipe's
    objectives and curriculum: a second pretraining stage.

    Raises:
        ValueError: an unknown ``recipe.model`` (not a named config) without ``init_from``, an ``init_from`` with no
            model or without the sentinel tokens; a curriculum that does not fit
            ``settings.max_steps`` (naming the setting); too few documents for the held-out set; an existing
            checkpoint without ``resume``; resuming with another recipe (naming the setting), or a checkpoint whose
            model does not fit the saved tokenizer or ``--model``; and the errors of :func:`srformer.training.train`.
    """
    if recipe.init_from is None and recipe.model not in NAMED_CONFIGS:
        raise ValueError(f"--model {recipe.model!r}: pretraining starts from a named config "
                         f"({', '.join(NAMED_CONFIGS)}), or from an earlier base with --init-from")
    if recipe.init_from is not None and not (Path(recipe.init_from) / "config.json").is_file():
        raise ValueError(f"--init-from {recipe.init_from}: no model there (config.json is missing); give the "
                         "--output directory of an earlier `srformer pretrain`")
    recipe.check_steps(settings.max_steps)
    if len(documents) <= recipe.eval_documents:
        raise ValueError(f"{len(documents)} documents leave none to train on after holding out --eval-documents "
                         f"{recipe.eval_documents}; lower it or give more documents")
    output = Path(output_dir)
    refuse_to_overwrite(output, resume)
    recipe_file = output / RECIPE_NAME
    previous = json.loads(recipe_file.read_text(encoding="utf-8")) if recipe_file.is_file() else None
    if resume and previous is not None:
        _check_resume(previous, recipe, output)
    cut = len(documents) - recipe.eval_documents
    train_texts, held_out = list(documents[:cut]), list(documents[cut:])

    state = process_state()
    reuse_tokenizer = resume and (output / "tokenizer.json").is_file()
    state.wait_for_everyone()
    tokenizer: PreTrainedTokenizerBase
    with state.main_process_first():
        if reuse_tokenizer or not state.is_main_process:
            tokenizer = AutoTokenizer.from_pretrained(output)
        elif recipe.init_from is not None:
            tokenizer = AutoTokenizer.from_pretrained(recipe.init_from)
        else:
            tokenizer = pretrain_tokenizer(train_texts, recipe)
        torch.manual_seed(settings.seed)
        if recipe.init_from is not None:
            model = AutoModelForSeq2SeqLM.from_pretrained(recipe.init_from)
            _check_sentinels(tokenizer, recipe)
        else:
            model = load_model(recipe.model, tokenizer)
        if resume:
            _check_checkpoint_shape(output, tokenizer, model.config)
        if state.is_main_process:
            output.mkdir(parents=True, exist_ok=True)
            if not reuse_tokenizer:
                tokenizer.save_pretrained(output)
            if previous is None or not resume:
                recipe_file.write_text(json.dumps(recipe.to_dict(), indent=2), encoding="utf-8")

    encoded, starts = encode_documents(tokenizer, train_texts, sentences=recipe.needs_sentences)
    sentinel_ids = [int(tokenizer.convert_tokens_to_ids(token))  # type: ignore[arg-type]  # one token: one id
                    for token in sentinel_tokens(recipe.sentinel_count)]
    examples = PretrainExamples(
        encoded, recipe, max_steps=settings.max_steps,
        examples_per_step=settings.batch_size * settings.gradient_accumulation_steps * state.num_processes,
        seed=settings.seed, sentinel_ids=sentinel_ids, eos_id=tokenizer.eos_token_id, sentence_starts=starts,
    )
    held_out_ids, held_out_starts = encode_documents(tokenizer, held_out, sentences=recipe.needs_sentences)
    sequences = [[*tokens[:recipe.max_source_length - 1], tokenizer.eos_token_id] for tokens in held_out_ids if tokens]
    callbacks: list[Any] = [CopyAccuracyCallback(
        sequences, pad_id=tokenizer.pad_token_id, every=recipe.eval_every,
        source_length=lambda step: recipe.source_length(step, settings.max_steps))]
    if recipe.needs_sentences and sequences:
        held_out_pairs = held_out_examples(held_out_ids, held_out_starts, recipe, sentinel_ids=sentinel_ids,
                                           eos_id=tokenizer.eos_token_id, seed=settings.seed)
        callbacks.append(ObjectiveAccuracyCallback(held_out_pairs, pad_id=tokenizer.pad_token_id,
                                                   every=recipe.eval_every))
    result = train(model, tokenizer, examples, output, settings, resume=resume, sequential=True, callbacks=callbacks)

    checkpoint = find_checkpoint(output)
    history = (json.loads((checkpoint / TRAINER_STATE_NAME).read_text(encoding="utf-8"))["log_history"]
               if checkpoint is not None else [])
    copy_history = [entry for entry in history if "copy_accuracy" in entry]
    objective_history = [entry for entry in history if any(key.startswith("heldout_") for key in entry)]
    outcome = PretrainResult(steps=result.steps, seconds=result.seconds, final_loss=result.final_loss,
                             stopped_by=result.stopped_by, loss_history=result.loss_history, copy_history=copy_history,
                             objective_history=objective_history)
    if state.is_main_process:
        write_log(outcome, recipe, settings, output)
    return outcome


def write_log(result: PretrainResult, recipe: PretrainRecipe, settings: TrainingSettings, output: Path) -> None:
    """Write ``pretrain_log.json`` (recipe, settings, steps/s, losses, copy accuracies) and ``pretrain_loss.png``
    into ``output``."""
    payload = {
        "recipe": recipe.to_dict(),
        "settings": settings.to_dict(),
        "steps": result.steps,
        "seconds": result.seconds,
        "steps_per_second": result.steps / result.seconds if result.seconds > 0 else None,
        "final_loss": result.final_loss,
        "stopped_by": result.stopped_by,
        "loss": [[step, loss] for step, loss in result.loss_history],
        "copy_eval": result.copy_history,
        "objective_eval": result.objective_history,
    }
    tmp = output / (LOG_NAME + ".tmp")
    tmp.write_text(json.dumps(payload, indent=2), encoding="utf-8")
    os.replace(tmp, output / LOG_NAME)
    plot_log(result, recipe, output / PLOT_NAME)


def plot_log(result: PretrainResult, recipe: PretrainRecipe, path: Path) -> Path:
    """Training loss per logging window (left) and held-out teacher-forced accuracy (right: copy, and each objective
    of the mix when it holds a sentence objective) against the step."""
    fig, (left, right) = plt.subplots(1, 2, figsize=(10, 3.8))
    if result.loss_history:
        steps, losses = zip(*result.loss_history, strict=True)
        left.plot(steps, losses)
    left.set_xlabel("optimizer step")
    left.set_ylabel("training loss (nats / target token)")
    mix = ", ".join(f"{name} {weight:g}" for name, weight in recipe.objective_mix.items())
    start = f"from {Path(recipe.init_from).name}" if recipe.init_from else recipe.model
    fig.suptitle(f"{start}: {mix}, curriculum from {recipe.curriculum_start} tokens", fontsize=10)
    if result.copy_history:
        right.plot([e["step"] for e in result.copy_history], [100 * e["copy_accuracy"] for e in result.copy_history],
                   marker="o")
        right.lines[-1].set_label("copy (whole window)")
    names = sorted({key[len("heldout_"):-len("_accuracy")] for entry in result.objective_history for key in entry
                    if key.startswith("heldout_") and key.endswith("_accuracy")})
    for name in names:
        entries = [entry for entry in result.objective_history if f"heldout_{name}_accuracy" in entry]
        right.plot([e["step"] for e in entries], [100 * e[f"heldout_{name}_accuracy"] for e in entries], marker=".",
                   label=name)
    if right.lines:
        right.legend(fontsize=8)
    right.set_ylim(0, 100)
    right.set_xlabel("optimizer step")
    right.set_ylabel(f"accuracy at {recipe.max_source_length} tokens (%)")
    right.set_title("teacher-forced, held-out documents")
    fig.tight_layout()
    fig.savefig(path, dpi=110)
    plt.close(fig)
    return path
