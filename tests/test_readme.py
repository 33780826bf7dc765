"""The README's test command is exactly what CI runs, and the README stays short."""

from __future__ import annotations

from pathlib import Path

import pytest

ROOT = Path(__file__).resolve().parent.parent


def ci_command() -> str:
    """The command line of ``.ci/run``: its last non-empty, non-comment line."""
    lines = [line.strip() for line in (ROOT / ".ci" / "run").read_text(encoding="utf-8").splitlines()]
    commands = [line for line in lines if line and not line.startswith("#") and not line.startswith(("set ", "cd "))]
    assert len(commands) == 1, f".ci/run should hold one command line, found {commands}"
    return commands[0]


def test_readme_test_command_is_what_ci_runs() -> None:
    readme = (ROOT / "README.md").read_text(encoding="utf-8")
    assert f"```bash\n{ci_command()}\n```" in readme


def test_readme_is_short() -> None:
    assert len((ROOT / "README.md").read_text(encoding="utf-8").splitlines()) <= 160


@pytest.mark.slow
def test_readme_python_example_runs_offline(tmp_path, monkeypatch) -> None:
    """The README's Python example runs as written (a tiny model built from a config, a tokenizer trained on the
    spot, no hub access) in a fresh folder; its own ``assert`` checks the reloaded model generates the same tokens."""
    readme = (ROOT / "README.md").read_text(encoding="utf-8")
    blocks = readme.split("```python\n")
    assert len(blocks) >= 2, "the README has no Python example"
    example = blocks[1].split("```", 1)[0]
    monkeypatch.chdir(tmp_path)
    exec(compile(example, "README.md example", "exec"), {"__name__": "readme_example"})
    assert (tmp_path / "my-srformer" / "config.json").is_file()


@pytest.mark.slow
def test_usage_led_example_runs_offline(tmp_path, monkeypatch) -> None:
    """docs/usage.md's LED example (a tiny LED built from a config, converted to the long-input pick, generating)
    runs as written, offline."""
    usage = (ROOT / "docs" / "usage.md").read_text(encoding="utf-8")
    section = usage.split("An LED converted straight after loading", 1)[1]
    example = section.split("```python\n", 1)[1].split("```", 1)[0]
    monkeypatch.chdir(tmp_path)
    namespace: dict = {"__name__": "usage_led_example"}
    exec(compile(example, "docs/usage.md LED example", "exec"), namespace)
    assert type(namespace["model"]).__name__ == "SRformerLEDForConditionalGeneration"
    assert namespace["summary_ids"].shape[1] > 1
