"""scripts/bbc_extract.sh refuses an unknown base before it writes or trains anything."""

from __future__ import annotations

import shutil
import subprocess
from pathlib import Path

import pytest

SCRIPT = Path(__file__).resolve().parents[2] / "scripts" / "bbc_extract.sh"


@pytest.mark.skipif(shutil.which("bash") is None, reason="needs bash")
def test_an_unknown_base_is_a_one_line_error_naming_the_choices(tmp_path: Path) -> None:
    root = tmp_path / "out"
    result = subprocess.run(["bash", str(SCRIPT), str(tmp_path / "all.jsonl"), str(root)],
                            env={"BASE": "bart-huge", "PATH": "/usr/bin:/bin"}, capture_output=True, text=True,
                            check=False)
    assert result.returncode == 2
    assert result.stderr.strip() == "BASE must be bart-tiny or bart-mini, not bart-huge"
    assert not root.exists()  # refused before anything is created
