"""Tests for srformer.data.load_aclsum (reads the installed aclsum package, no network)."""

from __future__ import annotations

import builtins

import pytest

from srformer.data import load_aclsum


@pytest.mark.parametrize(
    ("split", "count"), [("train", 100), ("val", 50), ("validation", 50), ("test", 100)]
)
def test_split_sizes_and_format(split, count):
    pairs = load_aclsum(split)
    assert len(pairs) == count
    assert len({p.id for p in pairs}) == count
    for pair in pairs:
        lines = pair.summary.split("\n")
        assert len(lines) == 3 and all(line.strip() for line in lines)
        assert "\n" not in pair.document and "  " not in pair.document
        assert len(pair.document.split()) > 100


def test_document_order_and_summary_order():
    import json
    from pathlib import Path

    import aclsum

    path = Path(aclsum.__file__).parent / "dataset" / "val.jsonl"
    record = json.loads(path.read_text(encoding="utf-8").splitlines()[0])
    pair = load_aclsum("val")[0]
    assert pair.id == record["id"]
    sections = record["sentences"]
    assert pair.document.startswith(sections["abstract"][0].strip())
    assert pair.document.endswith(sections["conclusion"][-1].strip())
    assert pair.summary == "\n".join(
        record["summary"][k].strip() for k in ("challenge", "approach", "outcome")
    )


def test_unknown_split():
    with pytest.raises(
        ValueError,
        match=r"unknown ACLSum split 'dev'.*'train', 'val' \(alias 'validation'\) or 'test'",
    ):
        load_aclsum("dev")


def test_aclsum_not_installed(monkeypatch):
    real_import = builtins.__import__

    def fake_import(name, *args, **kwargs):
        if name == "aclsum":
            raise ImportError("No module named 'aclsum'")
        return real_import(name, *args, **kwargs)

    monkeypatch.setattr(builtins, "__import__", fake_import)
    with pytest.raises(ModuleNotFoundError, match=r"pip install aclsum"):
        load_aclsum("train")
