"""scripts/sumpubmed_extract.sh refuses an unknown base, and a folder without SumPubMed's two files, before it writes
or trains anything."""

from __future__ import annotations

import shutil
import subprocess
from pathlib import Path

import pytest

SCRIPT = Path(__file__).resolve().parents[2] / "scripts" / "sumpubmed_extract.sh"


@pytest.mark.skipif(shutil.which("bash") is None, reason="needs bash")
def test_a_folder_without_validation_jsonl_is_a_one_line_error(tmp_path: Path) -> None:
    (tmp_path / "train.jsonl").write_text("")
    root = tmp_path / "out"
    result = subprocess.run(["bash", str(SCRIPT), str(tmp_path), str(root)], env={"PATH": "/usr/bin:/bin"},
                            capture_output=True, text=True, check=False)
    assert result.returncode == 2
    assert result.stderr.strip() == (f"{tmp_path}/validation.jsonl not found: SUMPUBMED_DIR must hold train.jsonl "
                                     "and validation.jsonl")
    assert not root.exists()  # refused before anything is created


@pytest.mark.skipif(shutil.which("bash") is None, reason="needs bash")
def test_an_unknown_base_is_a_one_line_error_naming_the_choices(tmp_path: Path) -> None:
    root = tmp_path / "out"
    result = subprocess.run(["bash", str(SCRIPT), str(tmp_path), str(root)],
                            env={"BASE": "bart-huge", "PATH": "/usr/bin:/bin"}, capture_output=True, text=True,
                            check=False)
    assert result.returncode == 2
    assert result.stderr.strip() == "BASE must be bart-tiny or bart-mini, not bart-huge"
    assert not root.exists()
