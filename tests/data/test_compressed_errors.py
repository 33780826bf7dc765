"""A truncated or corrupt compressed data file: one ValueError that names the file, never a decompressor's
traceback (gzip.BadGzipFile, EOFError, lzma.LZMAError)."""

from __future__ import annotations

import bz2
import gzip
import json
import lzma

import pytest

from srformer.data.pair_files import iter_csv_rows, iter_json_file, iter_json_lines

RECORDS = [{"document": f"document {i} " * 40, "summary": f"summary {i}"} for i in range(200)]
COMPRESS = {".gz": gzip.compress, ".bz2": bz2.compress, ".xz": lzma.compress}


def _payload(kind: str) -> bytes:
    if kind == ".csv":
        return ("document,summary\n" + "".join(f'"{r["document"]}",{r["summary"]}\n' for r in RECORDS)).encode()
    return "".join(json.dumps(record) + "\n" for record in RECORDS).encode()


@pytest.mark.parametrize("suffix", sorted(COMPRESS))
@pytest.mark.parametrize("damage", ["truncated", "corrupt"])
@pytest.mark.parametrize("kind,reader", [(".jsonl", iter_json_lines), (".json", iter_json_file),
                                         (".csv", iter_csv_rows)])
def test_a_damaged_compressed_file_is_one_error_naming_it(tmp_path, suffix, damage, kind, reader):
    data = COMPRESS[suffix](_payload(kind))
    if damage == "truncated":
        data = data[: len(data) // 2]
    else:  # the container's header intact, its compressed body overwritten
        middle = len(data) // 2
        data = data[:20] + bytes(b ^ 0xFF for b in data[20:middle]) + data[middle:]
    path = tmp_path / f"train{kind}{suffix}"
    path.write_bytes(data)
    with pytest.raises(ValueError, match=f"{path}: cannot be read as a {suffix[1:]}-compressed file, it is "
                                         "truncated or corrupt") as caught:
        list(reader(path))
    assert "\n" not in str(caught.value)


@pytest.mark.parametrize("suffix", sorted(COMPRESS))
def test_an_intact_compressed_file_reads_every_record(tmp_path, suffix):
    path = tmp_path / f"train.jsonl{suffix}"
    path.write_bytes(COMPRESS[suffix](_payload(".jsonl")))
    assert [record for _, record in iter_json_lines(path)] == RECORDS
