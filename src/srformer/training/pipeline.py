"""Fine-tune a summarizer end to end: tokenizer, model, conversion, features, training loop.

Used by ``srformer train`` and by the experiments. The run's description is written to
``output_dir/srformer_run.json`` before training starts, so ``--resume`` can refuse a checkpoint
of another variant or model, and evaluation can reuse the run's source length and prefix.
"""

from __future__ import annotations

import json
import math
import os
import warnings
from collections.abc import Sequence
from dataclasses import asdict, dataclass, field
from pathlib import Path

import torch
from transformers import AutoTokenizer, PreTrainedModel, PreTrainedTokenizerBase

from srformer.core import SEGMENT_FREE_VARIANTS, SRformerConfig
from srformer.core.registry import keeps_own_attention
from srformer.data.features import encode_pairs
from srformer.data.pairs import SummaryPair
from srformer.models.convert import convert, is_converted, srformer_config_of
from srformer.models.factory import load_model, load_tokenizer
from srformer.training.distributed import check_backend, check_mixed_precision, process_state
from srformer.training.loop import SUMMARY_NAME, TrainingResult, refuse_to_overwrite, train
from srformer.training.settings import TrainingSettings

RUN_FILE = "srformer_run.json"


@dataclass
class RunSpec:
    """What to fine-tune, and on which input shapes.

    Attributes:
        model: a named config (e.g. ``t5-tiny``), a local checkpoint directory or a hub id.
        srformer: the cross-attention variant and its settings.
        max_source_length: encoder input length in tokens (longer documents are truncated, counted).
        max_target_length: summary length in tokens for training.
        source_prefix: text put before every document (e.g. ``"summarize: "`` for pretrained T5).
        vocab_size: tokenizer size for named configs (a tokenizer is trained on the training texts).
        data: a description of the training data, recorded in the run file.
    """

    model: str
    srformer: SRformerConfig
    max_source_length: int = 512
    max_target_length: int = 128
    source_prefix: str = ""
    vocab_size: int = 8000
    data: str = ""
    extra: dict = field(default_factory=dict)

    def to_dict(self) -> dict:
        out = asdict(self)
        out["srformer"] = self.srformer.to_dict()
        return out


def differing_run_settings(previous: dict, spec: RunSpec) -> list[str]:
    """The names of the settings in which a saved run file (``previous``, the JSON of an earlier
    :meth:`RunSpec.to_dict`) differs from ``spec``, among the model, the SRformer settings, the source and target
    lengths (tokens) and the source prefix, sorted. The SRformer settings are compared as configs, so a run file
    written in the older flat form of ``SRformerConfig.to_dict`` matches the same settings in the current form;
    a saved model path that names the same local folder as ``spec.model`` matches it.

    Raises:
        ValueError: if the saved SRformer settings are not a valid ``SRformerConfig``.
    """
    requested = json.loads(json.dumps(spec.to_dict()))
    differing = [key for key in ("model", "max_source_length", "max_target_length", "source_prefix")
                 if previous.get(key) != requested.get(key)]
    saved = previous.get("srformer")
    if not isinstance(saved, dict) or SRformerConfig.from_dict(saved) != spec.srformer:
        differing.append("srformer")
    if "model" in differing and same_local_model(previous.get("model"), requested.get("model")):
        differing.remove("model")
    return sorted(differing)


def check_shapes(spec: RunSpec) -> None:
    """Reject segment settings that cannot work for the run's input lengths.

    Decision on a segment larger than the source: when ``segment_size`` exceeds
    ``max_source_length`` no document can have two segments, so the run could not test segmented
    attention at all: that is an error. Individual documents shorter than one segment (the source
    limit allows several) are legitimate data: they are trained on and counted in one warning
    (:func:`warn_single_segment_documents`).

    Raises:
        ValueError: if ``segment_size`` exceeds ``max_source_length`` (every document would be one
            segment: segmented attention would silently be full attention), or if the longest input
            has more segments than ``target_length`` (segments that are never attended).
    """
    cfg = spec.srformer
    if cfg.variant in SEGMENT_FREE_VARIANTS or not isinstance(cfg.segment_size, int):
        return  # segment_size="auto" fits every length to the schedule
    if cfg.segment_size > spec.max_source_length:
        raise ValueError(
            f"--segment-size {cfg.segment_size} is larger than --max-source-length {spec.max_source_length}: every "
            "document would be a single segment. Use a segment size below the source length."
        )
    segments = math.ceil(spec.max_source_length / cfg.segment_size)
    if segments > cfg.target_length:
        raise ValueError(
            f"--target-length {cfg.target_length} is smaller than the number of segments ({segments} = "
            f"ceil({spec.max_source_length} / {cfg.segment_size})): later segments would never be attended. "
            f"Use --segment-size >= {math.ceil(spec.max_source_length / cfg.target_length)} "
            "or a larger --target-length."
        )


def warn_single_segment_documents(features: Sequence[dict], spec: RunSpec) -> int:
    """Count, and warn about, training documents that fit in one segment.

    A document of at most ``segment_size`` tokens (after truncation to ``max_source_length``) is a
    single segment: for it ``segmented`` attention is full attention and the ``srformer``
    recurrent term is zero (``P = K^T V - K_0^T V_0 = 0``). Such documents are trained on, not
    dropped; the warning says how many there are so that a too large ``--segment-size`` shows.
    (A segment size above ``max_source_length``, where every document is one segment, is an error
    of :func:`check_shapes`.)

    Args:
        features: encoded examples, each with ``input_ids`` (a list of token ids).
        spec: the run (its variant and segment size).

    Returns:
        The number of single-segment documents (0 for the ``full`` variant).

    Warns:
        UserWarning: when the count is above zero, with the count, the share and the fix.
    """
    if keeps_own_attention(spec.srformer.variant) or not features:
        return 0
    if not isinstance(spec.srformer.segment_size, int):  # "auto": a document's segments follow its batch
        return 0
    size = spec.srformer.segment_size
    single = sum(1 for feature in features if len(feature["input_ids"]) <= size)
    if single:
        warnings.warn(
            f"{single} of {len(features)} training documents ({100.0 * single / len(features):.1f}%) have at most "
            f"--segment-size {size} tokens (after truncation to --max-source-length {spec.max_source_length}), so each "
            f"is a single segment: for them {spec.srformer.variant} attention is full attention. They are trained on "
            "as they are; use a smaller --segment-size to split them.",
            UserWarning,
            stacklevel=2,
        )
    return single


def read_run(output_dir: str | os.PathLike) -> dict | None:
    """The run description saved in ``output_dir`` (None if there is none)."""
    path = Path(output_dir) / RUN_FILE
    return json.loads(path.read_text()) if path.is_file() else None


def prepare_model(
    spec: RunSpec, train_pairs: Sequence[SummaryPair], *, tokenizer_dir: str | os.PathLike | None = None, seed: int = 0
) -> tuple[PreTrainedModel, PreTrainedTokenizerBase]:
    """Tokenizer and converted model for ``spec``.

    Args:
        spec: the run.
        train_pairs: training texts (used to train a tokenizer for named configs).
        tokenizer_dir: load the tokenizer from here instead (used when resuming).
        seed: seed for the random initialisation of named configs and RAF weights.

    Raises:
        ValueError: if ``spec.model`` is already an SRformer model of other settings.
    """
    tokenizer: PreTrainedTokenizerBase
    if tokenizer_dir is not None:
        tokenizer = AutoTokenizer.from_pretrained(tokenizer_dir)
    else:
        texts = [p.document for p in train_pairs] + [p.summary for p in train_pairs]
        tokenizer = load_tokenizer(spec.model, train_texts=texts, vocab_size=spec.vocab_size)
    torch.manual_seed(seed)
    model = load_model(spec.model, tokenizer)
    if is_converted(model):
        existing = srformer_config_of(model)
        if existing is not None and existing != spec.srformer:
            raise ValueError(
                f"{spec.model} is already an SRformer model of variant {existing.variant!r} ({existing.to_dict()}); "
                f"it cannot be trained as {spec.srformer.to_dict()}. Start from the full-attention model instead."
            )
    else:
        convert(model, spec.srformer)
    return model, tokenizer


def same_local_model(saved: object, requested: object) -> bool:
    """Whether two ``model`` values of a run file name the same local directory, written once relative and once
    absolute (``srformer compare --output runs/x`` and ``--output /abs/runs/x`` resume the same base model).
    Hub names and paths that do not exist compare as strings."""
    if not isinstance(saved, str) or not isinstance(requested, str):
        return False
    first, second = Path(saved), Path(requested)
    return first.is_dir() and second.is_dir() and first.resolve() == second.resolve()


def train_summarizer(
    spec: RunSpec,
    train_pairs: Sequence[SummaryPair],
    output_dir: str | os.PathLike,
    settings: TrainingSettings,
    *,
    resume: bool = False,
) -> TrainingResult:
    """Fine-tune ``spec.model`` converted to ``spec.srformer`` on ``train_pairs``; save to ``output_dir``.

    The output directory ends up holding the model (``save_pretrained``), its tokenizer, the
    run file, ``training_summary.json`` and the last resumable checkpoint.

    Under ``torchrun`` / ``accelerate launch`` every process calls this function with the same
    pairs. The main process prepares the tokenizer (for named configs: trains it) and writes it and
    the run file first; the other processes then load that tokenizer, so all processes encode the
    data identically. Checks run on every process before anything is written.

    Raises:
        ValueError: bad shapes (see :func:`check_shapes`); ``resume`` with a run of another
            variant, model or lengths; an existing checkpoint without ``resume`` (from :func:`train`);
            ``settings.mixed_precision == "fp16"`` on a CPU; DeepSpeed without its package or FSDP on a
            CPU (:func:`srformer.training.distributed.check_backend`).
    """
    check_shapes(spec)
    state = process_state()
    check_mixed_precision(settings.mixed_precision, state.device)
    check_backend(settings, state.device)
    output = Path(output_dir)
    refuse_to_overwrite(output, resume)  # before any work and before the run file is written
    previous = read_run(output)
    tokenizer_dir = None
    if resume and previous is not None:
        requested = json.loads(json.dumps(spec.to_dict()))
        differing = differing_run_settings(previous, spec)
        if differing:
            raise ValueError(
                f"Cannot resume {output}: it holds a run with different {', '.join(differing)} "
                f"(saved: {[previous.get(k) for k in differing]}, requested: {[requested.get(k) for k in differing]}). "
                "Use another --output for a new run."
            )
        if (output / "tokenizer.json").is_file() or (output / "tokenizer_config.json").is_file():
            tokenizer_dir = output
    write_run = not resume or previous is None
    state.wait_for_everyone()  # every process has read the output directory before the main process writes
    with state.main_process_first():
        source = tokenizer_dir if tokenizer_dir is not None or state.is_main_process else output
        model, tokenizer = prepare_model(spec, train_pairs, tokenizer_dir=source, seed=settings.seed)
        if state.is_main_process:
            output.mkdir(parents=True, exist_ok=True)
            if tokenizer_dir is None:
                tokenizer.save_pretrained(output)
            if write_run:
                (output / RUN_FILE).write_text(json.dumps(spec.to_dict(), indent=2))
    features, _ = encode_pairs(
        tokenizer, train_pairs, max_source_length=spec.max_source_length,
        max_target_length=spec.max_target_length, source_prefix=spec.source_prefix, warn=state.is_main_process,
    )
    if state.is_main_process:
        warn_single_segment_documents(features, spec)
    return train(model, tokenizer, features, output, settings, resume=resume)


def convert_summarizer(
    spec: RunSpec, train_pairs: Sequence[SummaryPair], output_dir: str | os.PathLike, *, seed: int = 0
) -> TrainingResult:
    """The zero-step counterpart of :func:`train_summarizer` ("convert+0"): convert ``spec.model`` to
    ``spec.srformer`` and save it into ``output_dir`` as a finished run is saved, with no optimizer step.

    ``output_dir`` ends up holding the converted model (``save_pretrained``), its tokenizer, the run file and
    ``training_summary.json`` with ``"steps": 0``, ``"seconds": 0.0`` and ``"final_loss": None``; there is no
    checkpoint. Only the main process writes; under several processes the others wait for it.

    Args:
        spec: the run.
        train_pairs: training texts (only used to train a tokenizer for a named config).
        output_dir: where the converted model is saved.
        seed: seed of the initialisation of new parameters (RAF weights) and of a named config's weights.

    Returns:
        A :class:`~srformer.training.loop.TrainingResult` of 0 steps.

    Raises:
        ValueError: bad shapes (:func:`check_shapes`); ``output_dir`` holds a training checkpoint (it is never
            overwritten: choose another output directory); ``spec.model`` is an SRformer model of other settings
            (:func:`prepare_model`).
    """
    check_shapes(spec)
    output = Path(output_dir)
    refuse_to_overwrite(output, resume=False)
    state = process_state()
    if state.is_main_process:
        model, tokenizer = prepare_model(spec, train_pairs, seed=seed)
        output.mkdir(parents=True, exist_ok=True)
        tokenizer.save_pretrained(output)
        (output / RUN_FILE).write_text(json.dumps(spec.to_dict(), indent=2))
        model.save_pretrained(output)
        summary = {"steps": 0, "seconds": 0.0, "final_loss": None, "tokens_seen": 0, "input_tokens": 0,
                   "target_tokens": 0, "epochs": 0.0, "stopped_by": "max_steps"}
        (output / SUMMARY_NAME).write_text(json.dumps(summary, indent=2))
    state.wait_for_everyone()
    return TrainingResult(steps=0, seconds=0.0, final_loss=None)
