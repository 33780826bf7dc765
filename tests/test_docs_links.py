"""Every relative link of the README and the Markdown under docs/, results/ and scripts/ resolves.

A link ``[text](target)`` or an image ``![alt](target)`` outside code must name a file or folder of the
repository (relative to the page), and an ``#anchor`` into a Markdown page must be one of that page's headings,
spelled as GitHub spells heading anchors (lower case, punctuation dropped, spaces as hyphens, ``-1``, ``-2``
for repeats). Web links (``http:``, ``https:``, ``mailto:``) are not checked.
"""

from __future__ import annotations

import re
from pathlib import Path

import pytest

ROOT = Path(__file__).resolve().parent.parent

#: Inline links and images: ``[text](target)`` with an optional title after the target.
LINK = re.compile(r"!?\[(?:[^\]\[]|\[[^\]]*\])*\]\(\s*<?([^)\s>]+)>?(?:\s+\"[^\"]*\")?\s*\)")
FENCE = re.compile(r"^\s*(```|~~~)")
INLINE_CODE = re.compile(r"`+[^`]*`+")
HEADING = re.compile(r"^(#{1,6})\s+(.*?)\s*#*\s*$")


def pages() -> list[Path]:
    """The README and every Markdown file under docs/, results/ and scripts/."""
    found = [ROOT / "README.md"]
    for folder in ("docs", "results", "scripts"):
        found += sorted((ROOT / folder).rglob("*.md"))
    return [page for page in found if page.is_file()]


def prose_lines(text: str, *, keep_code: bool = False) -> list[str]:
    """The lines of a Markdown text outside fenced code blocks, with inline code removed unless ``keep_code``."""
    lines, fenced = [], False
    for line in text.splitlines():
        if FENCE.match(line):
            fenced = not fenced
            continue
        if not fenced:
            lines.append(line if keep_code else INLINE_CODE.sub("", line))
    return lines


def slug(heading: str) -> str:
    """GitHub's anchor of a heading: lower case, punctuation (not ``-`` or ``_``) dropped, spaces as hyphens."""
    text = re.sub(r"!?\[([^\]]*)\]\([^)]*\)", r"\1", heading)  # a link in a heading keeps its text
    text = re.sub(r"[^\w\- ]", "", text.lower())
    return text.replace(" ", "-")


def anchors(page: Path) -> set[str]:
    """Every heading anchor of a Markdown page (repeated headings get ``-1``, ``-2``, ... as on GitHub)."""
    seen: dict[str, int] = {}
    result = set()
    for line in prose_lines(page.read_text(encoding="utf-8"), keep_code=True):
        match = HEADING.match(line)
        if not match:
            continue
        base = slug(match.group(2))
        count = seen.get(base, 0)
        seen[base] = count + 1
        result.add(base if count == 0 else f"{base}-{count}")
    return result


def broken_links(page: Path) -> list[str]:
    """The relative links of ``page`` whose file, folder or heading anchor does not exist."""
    broken = []
    for line in prose_lines(page.read_text(encoding="utf-8")):
        for target in LINK.findall(line):
            if re.match(r"^[a-z][a-z0-9+.-]*:", target):
                continue
            path_part, _, anchor = target.partition("#")
            resolved = (page.parent / path_part).resolve() if path_part else page
            if not resolved.exists():
                broken.append(f"{target} (no such file)")
            elif anchor and resolved.suffix == ".md" and anchor not in anchors(resolved):
                broken.append(f"{target} (no heading with anchor #{anchor})")
    return broken


def test_slug_follows_github() -> None:
    assert slug("generate() on converted models") == "generate-on-converted-models"
    assert slug("Recall at k=512 (synthetic; n=4, s=32)") == "recall-at-k512-synthetic-n4-s32"
    assert slug("Your own `transformers.Seq2SeqTrainer`") == "your-own-transformersseq2seqtrainer"


def test_broken_links_are_found(tmp_path: Path) -> None:
    page = tmp_path / "page.md"
    page.write_text("# Title\n\n[ok](#title) [bad](missing.md) [bad anchor](#nope) `[code](x.md)`\n"
                    "```\n[fenced](y.md)\n```\n[web](https://example.org)\n", encoding="utf-8")
    assert broken_links(page) == ["missing.md (no such file)", "#nope (no heading with anchor #nope)"]


@pytest.mark.parametrize("page", pages(), ids=lambda page: str(page.relative_to(ROOT)))
def test_relative_links_resolve(page: Path) -> None:
    assert broken_links(page) == []
