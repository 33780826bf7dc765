"""Data loading and preparation: summary pairs, tokenizer training, seq2seq features.

* :mod:`srformer.data.pairs`: :class:`SummaryPair`, :func:`load_pairs` (JSONL/JSON/CSV files and
  hub datasets) and :func:`load_aclsum` (ACLSum from the ``aclsum`` package).
* :mod:`srformer.data.split`: :func:`split_by_id` and :func:`parse_split_spec` (a fixed split of one
  file by a stable SHA-256 hash of each example's id).
* :mod:`srformer.data.tokenizer`: :func:`train_unigram_tokenizer` (T5-style Unigram tokenizer).
* :mod:`srformer.data.features`: :func:`encode_pairs` and its :class:`TruncationReport`.

The names are imported on first use (PEP 562, :mod:`srformer.core.lazy`), so that the light modules of the package
(:mod:`~srformer.data.objectives`, ...) import no torch or transformers.
"""

from __future__ import annotations

from typing import TYPE_CHECKING

from srformer.core.lazy import lazy_exports

if TYPE_CHECKING:
    from srformer.data.features import TruncationReport, encode_pairs
    from srformer.data.pairs import SUPPORTED_EXTENSIONS, SummaryPair, load_aclsum, load_pairs
    from srformer.data.split import parse_split_spec, split_by_id
    from srformer.data.tokenizer import train_unigram_tokenizer

__all__ = [
    "SUPPORTED_EXTENSIONS",
    "SummaryPair",
    "TruncationReport",
    "encode_pairs",
    "load_aclsum",
    "load_pairs",
    "parse_split_spec",
    "split_by_id",
    "train_unigram_tokenizer",
]

__getattr__, __dir__ = lazy_exports(__name__, {
    "srformer.data.features": ("TruncationReport", "encode_pairs"),
    "srformer.data.pairs": ("SUPPORTED_EXTENSIONS", "SummaryPair", "load_aclsum", "load_pairs"),
    "srformer.data.split": ("parse_split_spec", "split_by_id"),
    "srformer.data.tokenizer": ("train_unigram_tokenizer",),
})
