"""Batched summary generation with Hugging Face ``generate``, timed for throughput reports."""

from __future__ import annotations

import time
from collections.abc import Sequence
from dataclasses import dataclass
from typing import Any

import torch
from tqdm.auto import tqdm

__all__ = ["BatchDecoder", "GenerationResult", "check_generation_inputs", "generate_summaries", "plan_batches"]


@dataclass
class GenerationResult:
    """Summaries produced by :func:`generate_summaries` and the cost of producing them.

    Attributes:
        summaries: One decoded summary per input document, in input order, special tokens
            removed and surrounding whitespace stripped.
        seconds: Wall-clock time in seconds spent inside ``model.generate`` summed over batches
            (tokenization, decoding and host/device copies of the inputs are excluded).
        num_new_tokens: Total number of generated tokens over all documents, in tokens. Per
            sequence this counts everything after the decoder start token (or after the prompt,
            for decoder-only models) up to and including the first end-of-sequence token;
            padding after it is not counted.
    """

    summaries: list[str]
    seconds: float
    num_new_tokens: int

    @property
    def tokens_per_second(self) -> float:
        """Generation throughput in tokens per second (``0.0`` when ``seconds`` is 0)."""
        return self.num_new_tokens / self.seconds if self.seconds > 0 else 0.0


def _as_id_set(value: Any) -> set[int]:
    """Turn a token id setting (``None``, ``int``, list or tensor of ints) into a set of ints."""
    if value is None:
        return set()
    if isinstance(value, torch.Tensor):
        return {int(v) for v in value.flatten().tolist()}
    if isinstance(value, int):
        return {value}
    return {int(v) for v in value}


def _count_new_tokens(new_tokens: torch.Tensor, eos_ids: set[int], pad_id: int | None) -> int:
    """Count generated tokens in a ``(batch, steps)`` tensor of new token ids.

    Each row counts up to and including its first EOS token; a row without EOS counts up to its
    last non-padding token (or every position when the model has no pad token).
    """
    total = 0
    for row in new_tokens.tolist():
        length = len(row)
        eos_positions = [i for i, token in enumerate(row) if token in eos_ids]
        if eos_positions:
            length = eos_positions[0] + 1
        elif pad_id is not None:
            while length > 0 and row[length - 1] == pad_id:
                length -= 1
        total += length
    return total


def _model_device(model: Any) -> torch.device:
    """Device of the model's parameters (CPU for a model without parameters)."""
    device = getattr(model, "device", None)
    if isinstance(device, torch.device):
        return device
    try:
        return next(model.parameters()).device
    except StopIteration:
        return torch.device("cpu")


def check_generation_inputs(
    documents: Sequence[str], *, batch_size: int, max_source_length: int, max_new_tokens: int, num_beams: int,
    generate_kwargs: dict[str, Any],
) -> None:
    """The checks of :func:`generate_summaries` on its inputs (see its Raises), before any work."""
    if len(documents) == 0:
        raise ValueError("documents must not be empty")
    for name, value in (
        ("batch_size", batch_size),
        ("max_source_length", max_source_length),
        ("max_new_tokens", max_new_tokens),
        ("num_beams", num_beams),
    ):
        if value < 1:
            raise ValueError(f"{name} must be >= 1, got {value}")
    if generate_kwargs.get("num_return_sequences", 1) != 1:
        raise ValueError("num_return_sequences must be 1: one summary is returned per document")
    for index, document in enumerate(documents):
        if not isinstance(document, str):
            raise TypeError(f"document {index} is a {type(document).__name__}, not a str")
        if not document.strip():
            raise ValueError(f"document {index} is empty or whitespace-only")


def plan_batches(tokenizer: Any, sources: Sequence[str], *, max_source_length: int, batch_size: int) -> list[list[int]]:
    """The batches :func:`generate_summaries` decodes: indices of ``sources`` sorted by tokenized length (tokens,
    after truncation to ``max_source_length``), longest first, stable among equal lengths, cut into runs of
    ``batch_size`` (the last may be shorter). A function of the inputs only, so every process of a sharded run
    (:func:`srformer.evaluation.corpus.generate_corpus`) plans the same batches as one process does."""
    lengths = [len(ids) for ids in tokenizer(list(sources), truncation=True, max_length=max_source_length)["input_ids"]]
    order = sorted(range(len(sources)), key=lambda i: lengths[i], reverse=True)
    return [order[start : start + batch_size] for start in range(0, len(order), batch_size)]


class BatchDecoder:
    """One ``model.generate`` call per batch of source texts, decoded and counted as :func:`generate_summaries` does.

    Args:
        model, tokenizer: as for :func:`generate_summaries` (the model is used where it is: its device gets the
            inputs; the caller puts it in eval mode).
        max_source_length, max_new_tokens, num_beams, do_sample: as for :func:`generate_summaries`.
        **generate_kwargs: extra keyword arguments for ``model.generate``.
    """

    def __init__(self, model: Any, tokenizer: Any, *, max_source_length: int, max_new_tokens: int, num_beams: int,
                 do_sample: bool, **generate_kwargs: Any) -> None:
        self.model, self.tokenizer = model, tokenizer
        self.max_source_length = max_source_length
        self.options = dict(max_new_tokens=max_new_tokens, num_beams=num_beams, do_sample=do_sample, **generate_kwargs)
        config = getattr(model, "config", None)
        self.is_encoder_decoder = bool(getattr(config, "is_encoder_decoder", False))
        generation_config = getattr(model, "generation_config", None)
        eos_ids = _as_id_set(generate_kwargs.get("eos_token_id"))
        self.eos_ids = eos_ids or _as_id_set(getattr(generation_config, "eos_token_id", None))
        pad_id = generate_kwargs.get("pad_token_id", getattr(generation_config, "pad_token_id", None))
        self.pad_id = getattr(tokenizer, "pad_token_id", None) if pad_id is None else pad_id
        self.device = _model_device(model)

    def __call__(self, sources: Sequence[str]) -> tuple[list[str], float, int]:
        """Summaries of ``sources`` (one batch, padded to its longest), in their order.

        Returns:
            ``(summaries, seconds, new_tokens)``: the decoded, stripped summaries; the wall-clock seconds spent in
            ``generate`` (synchronized on CUDA); the generated tokens (see :class:`GenerationResult`).
        """
        encoded = self.tokenizer(list(sources), truncation=True, max_length=self.max_source_length, padding=True,
                                 return_tensors="pt")
        input_ids = encoded["input_ids"].to(self.device)
        attention_mask = encoded["attention_mask"].to(self.device)
        with torch.inference_mode():
            started = time.perf_counter()
            output = self.model.generate(input_ids=input_ids, attention_mask=attention_mask, **self.options)
            if self.device.type == "cuda":
                torch.cuda.synchronize(self.device)
            seconds = time.perf_counter() - started
        # ``return_dict_in_generate=True`` yields an output object, not a tensor.
        sequences = output if isinstance(output, torch.Tensor) else output.sequences
        prefix = 1 if self.is_encoder_decoder else input_ids.shape[1]
        new_tokens = sequences[:, prefix:].cpu()
        decoded = self.tokenizer.batch_decode(new_tokens, skip_special_tokens=True)
        return [text.strip() for text in decoded], seconds, _count_new_tokens(new_tokens, self.eos_ids, self.pad_id)


def generate_summaries(
    model: Any,
    tokenizer: Any,
    documents: Sequence[str],
    *,
    max_source_length: int = 512,
    max_new_tokens: int = 128,
    batch_size: int = 8,
    num_beams: int = 1,
    do_sample: bool = False,
    source_prefix: str = "",
    progress: bool = True,
    **generate_kwargs: Any,
) -> GenerationResult:
    """Summarize ``documents`` with ``model.generate`` in length-sorted batches.

    The model is put in eval mode for the call; on return ``model.train(was_training)``
    restores its previous mode, so the function can be called from a training loop.

    Documents, each prefixed with ``source_prefix``, are sorted by tokenized length (longest
    first, so an out-of-memory error shows up in the first batch and padding is minimal),
    tokenized with truncation to ``max_source_length`` tokens and padding to the longest in the
    batch, moved to the model's device, and passed to
    ``model.generate(input_ids=..., attention_mask=..., max_new_tokens=..., num_beams=...,
    do_sample=..., **generate_kwargs)`` under :func:`torch.inference_mode`. Outputs are decoded
    with ``skip_special_tokens=True``, stripped, and returned in the original document order.

    For encoder-decoder models (``model.config.is_encoder_decoder``) the first output position
    is the decoder start token and is not counted as generated; for decoder-only models the
    prompt (``input_ids.shape[1]`` positions) is removed before decoding and counting, which
    needs a left-padding tokenizer.

    Args:
        model: A Hugging Face generation model (``transformers.GenerationMixin``), e.g.
            ``T5ForConditionalGeneration`` or ``BartForConditionalGeneration``.
        tokenizer: The matching tokenizer (callable on a list of strings, with
            ``batch_decode``).
        documents: Source documents, non-empty strings.
        max_source_length: Maximum source length in tokens (longer inputs are truncated).
        max_new_tokens: Maximum number of tokens generated per summary.
        batch_size: Number of documents per ``generate`` call, ``>= 1``.
        num_beams: Beam width; 1 means greedy (or sampling with ``do_sample=True``).
        do_sample: Sample instead of greedy/beam decoding (seed torch for reproducibility).
        source_prefix: Text prepended to every document (e.g. ``"summarize: "`` for T5).
        progress: Show a tqdm progress bar over batches.
        **generate_kwargs: Extra keyword arguments for ``model.generate`` (e.g.
            ``length_penalty``, ``no_repeat_ngram_size``).

    Returns:
        A :class:`GenerationResult` with the summaries, the seconds spent in ``generate`` and
        the number of generated tokens.

    Raises:
        ValueError: If ``documents`` is empty, a document is empty or whitespace-only (the
            message names its index), or ``batch_size``, ``max_source_length``,
            ``max_new_tokens`` or ``num_beams`` is smaller than 1, or ``generate_kwargs`` asks
            for ``num_return_sequences`` other than 1 (one summary per document is returned).
        TypeError: If a document is not a ``str``.
    """
    check_generation_inputs(documents, batch_size=batch_size, max_source_length=max_source_length,
                            max_new_tokens=max_new_tokens, num_beams=num_beams, generate_kwargs=generate_kwargs)
    sources = [source_prefix + document for document in documents]
    batches = plan_batches(tokenizer, sources, max_source_length=max_source_length, batch_size=batch_size)
    decode = BatchDecoder(model, tokenizer, max_source_length=max_source_length, max_new_tokens=max_new_tokens,
                          num_beams=num_beams, do_sample=do_sample, **generate_kwargs)
    summaries: list[str] = [""] * len(sources)
    seconds = 0.0
    num_new_tokens = 0
    was_training = bool(getattr(model, "training", False))
    model.eval()
    try:
        for indices in tqdm(batches, desc="Generating", unit="batch", disable=not progress):
            texts, batch_seconds, batch_tokens = decode([sources[i] for i in indices])
            seconds += batch_seconds
            num_new_tokens += batch_tokens
            for i, text in zip(indices, texts, strict=True):
                summaries[i] = text
    finally:
        model.train(was_training)
    return GenerationResult(summaries=summaries, seconds=seconds, num_new_tokens=num_new_tokens)
