"""scripts/training_stages.sh, sourced by the recipe scripts: a stage skips finished work, continues an interrupted
run with --resume, and starts a fresh one otherwise (a stand-in ``srformer`` records the commands it gets)."""

from __future__ import annotations

import json
import shutil
import subprocess
import sys
from pathlib import Path

import pytest

STAGES = Path(__file__).resolve().parents[2] / "scripts" / "training_stages.sh"

pytestmark = pytest.mark.skipif(shutil.which("bash") is None, reason="needs bash")


def _run(tmp_path: Path, call: str) -> list[str]:
    """Source the stages, run ``call``, and return the commands the stand-in srformer got (one line each)."""
    bin_dir = tmp_path / "bin"
    bin_dir.mkdir(exist_ok=True)
    log = tmp_path / "calls.txt"
    fake = bin_dir / "srformer"
    fake.write_text(f'#!/usr/bin/env bash\necho "$*" >> "{log}"\n')
    fake.chmod(0o755)
    python = Path(sys.executable).parent  # the stage reads training_summary.json with python
    subprocess.run(["bash", "-c", f'set -euo pipefail; . "{STAGES}"; {call}'], check=True,
                   env={"PATH": f"{bin_dir}:{python}:/usr/bin:/bin"}, capture_output=True, text=True)
    return log.read_text().splitlines() if log.exists() else []


def test_train_stage_starts_resumes_and_skips_by_the_recorded_steps(tmp_path: Path) -> None:
    out = tmp_path / "run"
    assert _run(tmp_path, f'train_stage "{out}" 900 --model base --seed 0') == [
        f"train --output {out} --max-steps 900 --model base --seed 0"]
    (out / "checkpoint").mkdir(parents=True)
    assert _run(tmp_path, f'train_stage "{out}" 900 --model base')[-1] == (
        f"train --output {out} --max-steps 900 --model base --resume")
    (out / "training_summary.json").write_text(json.dumps({"steps": 724}))  # stopped by a time budget: not done
    assert _run(tmp_path, f'train_stage "{out}" 900')[-1] == f"train --output {out} --max-steps 900 --resume"
    (out / "training_summary.json").write_text(json.dumps({"steps": 900}))
    calls = len(_run(tmp_path, "true"))
    assert len(_run(tmp_path, f'train_stage "{out}" 900')) == calls  # finished: nothing run


def test_pretrain_stage_skips_a_finished_model_and_resumes_a_checkpoint(tmp_path: Path) -> None:
    out = tmp_path / "base"
    (out / "checkpoint").mkdir(parents=True)
    assert _run(tmp_path, f'pretrain_stage "{out}" --model bart-mini') == [
        f"pretrain --output {out} --model bart-mini --resume"]
    (out / "model.safetensors").write_text("")
    assert len(_run(tmp_path, f'pretrain_stage "{out}" --model bart-mini')) == 1  # not run again
