"""scripts/sumpubmed_led.sh refuses a folder without SumPubMed's two files, and a base that is not a checkpoint, before
it writes or trains anything."""

from __future__ import annotations

import shutil
import subprocess
from pathlib import Path

import pytest

SCRIPT = Path(__file__).resolve().parents[2] / "scripts" / "sumpubmed_led.sh"


def _run(*args: str) -> subprocess.CompletedProcess:
    return subprocess.run(["bash", str(SCRIPT), *args], env={"PATH": "/usr/bin:/bin"}, capture_output=True,
                          text=True, check=False)


@pytest.mark.skipif(shutil.which("bash") is None, reason="needs bash")
def test_a_folder_without_validation_jsonl_is_a_one_line_error(tmp_path: Path) -> None:
    (tmp_path / "train.jsonl").write_text("")
    root = tmp_path / "out"
    result = _run(str(tmp_path), str(tmp_path / "bart"), str(root))
    assert result.returncode == 2
    assert result.stderr.strip() == (f"{tmp_path}/validation.jsonl not found: SUMPUBMED_DIR must hold train.jsonl "
                                     "and validation.jsonl")
    assert not root.exists()


@pytest.mark.skipif(shutil.which("bash") is None, reason="needs bash")
def test_a_base_without_a_config_is_a_one_line_error(tmp_path: Path) -> None:
    for part in ("train", "validation"):
        (tmp_path / f"{part}.jsonl").write_text("")
    root = tmp_path / "out"
    result = _run(str(tmp_path), str(tmp_path / "bart"), str(root))
    assert result.returncode == 2
    assert result.stderr.strip() == (f"{tmp_path}/bart/config.json not found: BART_BASE must be a BART checkpoint "
                                     "folder (scripts/sumpubmed_extract.sh's)")
    assert not root.exists()
