"""ACLSum (Takeshita et al. 2024) as summary pairs, read from the corpus shipped inside the ``aclsum`` PyPI package."""

from __future__ import annotations

from pathlib import Path

from srformer.data.pair_files import iter_json_lines
from srformer.data.pair_record import SummaryPair, make_pair

#: ACLSum splits, with accepted aliases mapped to the file stem.
_ACLSUM_SPLITS: dict[str, str] = {
    "train": "train",
    "val": "val",
    "validation": "val",
    "test": "test",
}

#: Order of the ACLSum document sections and summary aspects.
_ACLSUM_SECTIONS: tuple[str, ...] = ("abstract", "introduction", "conclusion")
_ACLSUM_ASPECTS: tuple[str, ...] = ("challenge", "approach", "outcome")


def load_aclsum(split: str) -> list[SummaryPair]:
    """Load one split of ACLSum (Takeshita et al. 2024) from the installed ``aclsum`` package.

    The package ships the corpus as JSON lines under ``aclsum/dataset/{split}.jsonl``; this reads
    those files directly (no network). The document is every sentence of the abstract, the
    introduction and the conclusion, in that order, joined with single spaces (the sentences are
    pre-tokenized, with spaces around punctuation such as ``"word ,"``). The summary is the three
    aspect sentences challenge, approach and outcome, one a line (joined with ``"\\n"``), so that
    ``rougeLsum`` sees three sentences.

    Args:
        split: ``"train"`` (100 papers), ``"val"`` (50; ``"validation"`` is accepted as an alias)
            or ``"test"`` (100).

    Returns:
        The split's examples, ``id`` set to the paper's ACL Anthology id.

    Raises:
        ModuleNotFoundError: the ``aclsum`` package is not installed.
        ValueError: ``split`` is not one of the splits above, or a record is malformed.
        FileNotFoundError: the installed package lacks the split's file.
    """
    stem = _ACLSUM_SPLITS.get(split)
    if stem is None:
        raise ValueError(
            f"unknown ACLSum split {split!r}; use one of 'train', 'val' (alias 'validation') "
            "or 'test'"
        )
    try:
        import aclsum
    except ImportError as exc:
        raise ModuleNotFoundError(
            "load_aclsum needs the 'aclsum' package, which is not installed; "
            "install it with `pip install aclsum`"
        ) from exc
    path = Path(aclsum.__file__).parent / "dataset" / f"{stem}.jsonl"
    if not path.is_file():
        raise FileNotFoundError(
            f"the installed aclsum package has no {path}; reinstall it with "
            "`pip install --force-reinstall aclsum`"
        )
    pairs = []
    for location, record in iter_json_lines(path):
        where = f"{path}, {location}"
        try:
            sentences = record["sentences"]
            summary = record["summary"]
            document = " ".join(
                sentence.strip() for section in _ACLSUM_SECTIONS for sentence in sentences[section]
            )
            summary_text = "\n".join(summary[aspect].strip() for aspect in _ACLSUM_ASPECTS)
        except (KeyError, TypeError, AttributeError) as exc:
            raise ValueError(
                f"{where}: not an ACLSum record (expected 'sentences' with keys "
                f"{list(_ACLSUM_SECTIONS)} and 'summary' with keys {list(_ACLSUM_ASPECTS)}): "
                f"{exc!r}"
            ) from exc
        record_id = record.get("id")
        pairs.append(
            make_pair(
                {"document": document, "summary": summary_text, "id": record_id},
                "document",
                "summary",
                where,
            )
        )
    if not pairs:
        raise ValueError(f"{path}: no examples found; the aclsum installation looks broken")
    return pairs
