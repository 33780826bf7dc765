"""Turn :class:`~srformer.data.pairs.SummaryPair` examples into token-id features.

Features are unpadded lists of token ids; batches are padded later by
``transformers.DataCollatorForSeq2Seq``. Truncation is counted and reported, because silently
cutting documents changes what a long-document experiment measures.
"""

from __future__ import annotations

import warnings
from collections.abc import Sequence
from dataclasses import dataclass

from transformers import PreTrainedTokenizerBase

from srformer.data.pairs import SummaryPair


@dataclass
class TruncationReport:
    """How many examples :func:`encode_pairs` truncated.

    Attributes:
        num_examples: number of encoded examples.
        truncated_sources: examples whose source (prefix + document, with special tokens) had
            more than ``max_source_length`` tokens.
        truncated_targets: examples whose summary (with special tokens) had more than
            ``max_target_length`` tokens.
        max_source_length: the source limit used, in tokens.
        max_target_length: the target limit used, in tokens.
    """

    num_examples: int
    truncated_sources: int
    truncated_targets: int
    max_source_length: int
    max_target_length: int

    def summary(self) -> str:
        """One human-readable line with the counts and percentages, e.g. for logs.

        Returns:
            e.g. ``"10 examples: 3 sources (30.0%) longer than 512 tokens truncated, 0 targets
            (0.0%) longer than 64 tokens truncated"``.
        """
        total = max(self.num_examples, 1)
        return (
            f"{self.num_examples} examples: "
            f"{self.truncated_sources} sources ({100.0 * self.truncated_sources / total:.1f}%) "
            f"longer than {self.max_source_length} tokens truncated, "
            f"{self.truncated_targets} targets ({100.0 * self.truncated_targets / total:.1f}%) "
            f"longer than {self.max_target_length} tokens truncated"
        )


def encode_pairs(
    tokenizer: PreTrainedTokenizerBase,
    pairs: Sequence[SummaryPair],
    *,
    max_source_length: int,
    max_target_length: int,
    source_prefix: str = "",
    warn: bool = True,
) -> tuple[list[dict[str, list[int]]], TruncationReport]:
    """Tokenize documents and summaries into seq2seq features, truncating to the limits.

    Args:
        tokenizer: a Hugging Face tokenizer (fast or slow) whose special tokens (e.g. T5's
            trailing ``</s>``) are added by its ``__call__``.
        pairs: the examples, in order.
        max_source_length: the most tokens of an encoded source, special tokens included.
        max_target_length: the most tokens of an encoded summary, special tokens included.
        source_prefix: text put before every document (e.g. ``"summarize: "`` for T5).
        warn: if True, issue one :class:`UserWarning` with the counts when anything was
            truncated.

    Returns:
        ``(features, report)``: ``features[i]`` is ``{"input_ids": list[int],
        "attention_mask": list[int], "labels": list[int]}`` for ``pairs[i]``, unpadded, with
        ``len(input_ids) <= max_source_length`` and ``len(labels) <= max_target_length``;
        ``report`` counts the truncated sources and targets.

    Raises:
        ValueError: ``max_source_length`` or ``max_target_length`` is below 1, or ``pairs`` is
            empty.
    """
    for name, value in (
        ("max_source_length", max_source_length),
        ("max_target_length", max_target_length),
    ):
        if not isinstance(value, int) or value < 1:
            raise ValueError(f"{name} must be a positive number of tokens, got {value!r}")
    if len(pairs) == 0:
        raise ValueError("pairs is empty: there is nothing to encode; load some examples first")

    sources = [source_prefix + pair.document for pair in pairs]
    targets = [pair.summary for pair in pairs]
    source_ids, truncated_sources = _encode_truncated(
        tokenizer, sources, max_source_length, target=False
    )
    label_ids, truncated_targets = _encode_truncated(
        tokenizer, targets, max_target_length, target=True
    )

    features = [
        {"input_ids": ids, "attention_mask": [1] * len(ids), "labels": labels}
        for ids, labels in zip(source_ids, label_ids, strict=True)
    ]
    report = TruncationReport(
        num_examples=len(pairs),
        truncated_sources=truncated_sources,
        truncated_targets=truncated_targets,
        max_source_length=max_source_length,
        max_target_length=max_target_length,
    )
    if warn and (truncated_sources or truncated_targets):
        warnings.warn(
            f"encode_pairs truncated examples: {report.summary()}; raise "
            "max_source_length/max_target_length to keep more text",
            UserWarning,
            stacklevel=2,
        )
    return features, report


def _encode_truncated(
    tokenizer: PreTrainedTokenizerBase, texts: list[str], max_length: int, *, target: bool
) -> tuple[list[list[int]], int]:
    """Encode ``texts`` to at most ``max_length`` ids each and count how many were cut.

    Every text is first encoded in full (to measure it). A too-long source is encoded again with
    the tokenizer's own truncation, so that its special tokens are kept the way the tokenizer
    places them (T5's and BART's trailing ``</s>`` included). A too-long target is cut to the
    first ``max_length`` ids of its full encoding instead: it keeps a leading special token
    (BART's ``<s>``) but gets no end-of-sequence token, so that a summary cut at the length limit
    does not teach the model to stop writing there.

    Returns:
        ``(ids, truncated)``: the id lists in input order and the number of truncated texts.
    """
    key = "text_target" if target else "text"
    full = tokenizer(**{key: texts}, truncation=False, verbose=False)["input_ids"]
    too_long = [index for index, ids in enumerate(full) if len(ids) > max_length]
    result = [list(ids) for ids in full]
    if too_long and target:
        for index in too_long:
            result[index] = result[index][:max_length]
    elif too_long:
        cut = tokenizer(
            **{key: [texts[index] for index in too_long]},
            truncation=True,
            max_length=max_length,
        )["input_ids"]
        for index, ids in zip(too_long, cut, strict=True):
            result[index] = list(ids)
    return result, len(too_long)
