"""Opening data files, plain or compressed, as bytes or UTF-8 text, and the errors for bytes that are not UTF-8.

A compressed file is named by its plain form plus one of :data:`COMPRESSIONS` (``train.jsonl.gz`` is read as
``train.jsonl``); :func:`data_extension` gives the format's extension either way.
"""

from __future__ import annotations

import bz2
import gzip
import io
import json
import lzma
import zlib
from pathlib import Path
from typing import IO, Any, cast

#: Compressed forms read as their plain form (``train.jsonl.gz`` is read as ``train.jsonl``), by their last suffix.
COMPRESSIONS: dict[str, Any] = {".gz": gzip.open, ".bz2": bz2.open, ".xz": lzma.open}


def data_extension(path: Path) -> str:
    """The format's extension of a data file, lower-case: ``.jsonl`` for ``train.jsonl`` and for
    ``train.jsonl.gz`` (a compressed file is named by its plain form plus one of :data:`COMPRESSIONS`)."""
    suffixes = [suffix.lower() for suffix in path.suffixes]
    if len(suffixes) >= 2 and suffixes[-1] in COMPRESSIONS:
        return suffixes[-2]
    return suffixes[-1] if suffixes else ""


#: What a decompressor raises on a truncated or corrupt stream (gzip's ``BadGzipFile`` and bz2's errors are
#: ``OSError``s; a stream cut short raises ``EOFError``).
DECOMPRESSION_ERRORS: tuple[type[BaseException], ...] = (EOFError, OSError, zlib.error, lzma.LZMAError)


class _Decompressed(io.RawIOBase):
    """A decompressing stream whose read errors become one ``ValueError`` naming the file and the fix."""

    def __init__(self, path: Path, stream: IO[bytes]) -> None:
        super().__init__()
        self._path, self._stream = path, stream

    def readable(self) -> bool:
        return True

    def readinto(self, buffer: Any) -> int:
        try:
            data = self._stream.read(len(buffer))
        except DECOMPRESSION_ERRORS as exc:
            kind = self._path.suffix.lower().lstrip(".")
            raise ValueError(
                f"{self._path}: cannot be read as a {kind}-compressed file, it is truncated or corrupt "
                f"({type(exc).__name__}: {exc}); download or compress it again"
            ) from exc
        buffer[: len(data)] = data
        return len(data)

    def close(self) -> None:
        self._stream.close()
        super().close()


def open_bytes(path: Path) -> IO[bytes]:
    """``path`` opened for reading bytes, decompressed when its last suffix is one of :data:`COMPRESSIONS`.

    Raises:
        ValueError: while reading, for a compressed file that is truncated or corrupt (naming the file).
    """
    opener = COMPRESSIONS.get(path.suffix.lower())
    if opener is None:
        return path.open("rb")
    return cast(IO[bytes], io.BufferedReader(_Decompressed(path, opener(path, "rb"))))


def open_text(path: Path) -> IO[str]:
    """``path`` as UTF-8 text (a leading BOM dropped, newlines untranslated, as the csv module wants)."""
    return io.TextIOWrapper(open_bytes(path), encoding="utf-8-sig", newline="")


def not_utf8_message(path: Path, line_no: int, raw: bytes, exc: UnicodeDecodeError) -> str:
    """The error message for line ``line_no`` (bytes ``raw``) that ``exc`` failed to decode."""
    bad = raw[exc.start : exc.start + 1]
    return (
        f"{path}, line {line_no}: not valid UTF-8 (byte 0x{bad.hex()} at byte {exc.start + 1} of the line: "
        f"{exc.reason}); save the file as UTF-8, e.g. `iconv -f latin1 -t utf-8 {path.name} > fixed{path.suffix}` "
        "if it was written as Latin-1"
    )


def undecodable_line(path: Path, exc: UnicodeDecodeError) -> ValueError:
    """A ValueError naming the first line of ``path`` that is not UTF-8 (``exc`` came from a text reader)."""
    with open_bytes(path) as handle:
        for line_no, raw in enumerate(handle, start=1):
            try:
                raw.decode("utf-8-sig" if line_no == 1 else "utf-8")
            except UnicodeDecodeError as line_exc:
                return ValueError(not_utf8_message(path, line_no, raw, line_exc))
    # Only a multi-byte character split across lines gets here; report the byte offset instead.
    return ValueError(
        f"{path}: not valid UTF-8 at byte {exc.start + 1} of the file ({exc.reason}); save the file as UTF-8"
    )


def complete_json_lines(data: bytes) -> tuple[list[Any], int]:
    """The records of an append-only JSON-lines file's bytes, up to the first line a kill cut short: parsing stops at
    a line without its newline or one that is not JSON.

    Returns:
        ``(records, length)``: the parsed records and the length in bytes of the part they come from, where a writer
        resuming the file truncates it before appending.
    """
    records: list[Any] = []
    length = 0
    for line in data.splitlines(keepends=True):
        if not line.endswith(b"\n"):
            break
        try:
            records.append(json.loads(line))
        except json.JSONDecodeError:
            break
        length += len(line)
    return records, length
