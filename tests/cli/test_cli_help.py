"""`srformer --help` and `srformer COMMAND --help`: the parsers are built without importing torch or transformers
(each check in a fresh interpreter), every help lists all its options, and each sub-command runs its command."""

from __future__ import annotations

import argparse
import subprocess
import sys
from pathlib import Path

import pytest

import srformer
from srformer.cli.main import build_parser, main

#: Packages that ``--help`` must not import (seconds of CPU time each).
HEAVY = ("torch", "transformers")

#: Runs ``main(ARGV)`` in a fresh interpreter, checks that it printed a help and exited 0, and that none of HEAVY was
#: imported; a meta-path finder that only watches remembers where in srformer each heavy package was first imported.
_CHECK = """
import sys
import traceback

HEAVY, ARGV, PACKAGE = {heavy!r}, {argv!r}, {package!r}
importers = {{}}


class Watch:
    def find_spec(self, name, path=None, target=None):
        if name in HEAVY and name not in importers:
            importers[name] = " -> ".join(f"{{Path(f.filename).relative_to(PACKAGE)}}:{{f.lineno}}"
                                          for f in traceback.extract_stack() if f.filename.startswith(PACKAGE))
        return None


from pathlib import Path

sys.meta_path.insert(0, Watch())
from srformer.cli.main import main

try:
    main(ARGV)
except SystemExit as stop:
    assert stop.code in (0, None), f"exit status {{stop.code}}"
else:
    raise AssertionError("--help did not exit")
loaded = {{name: importers.get(name) for name in HEAVY if name in sys.modules}}
assert not loaded, f"--help imported {{loaded}}"
"""


def _subparsers(parser: argparse.ArgumentParser) -> dict[str, argparse.ArgumentParser]:
    action = next(a for a in parser._actions if isinstance(a, argparse._SubParsersAction))
    return dict(action.choices)


COMMANDS = sorted(_subparsers(build_parser()))


def _help_imports_nothing_heavy(argv: list[str]) -> None:
    script = _CHECK.format(heavy=HEAVY, argv=argv, package=str(Path(srformer.__file__).parent))
    done = subprocess.run([sys.executable, "-c", script], capture_output=True, text=True, timeout=300)
    assert done.returncode == 0, done.stderr[-3000:]
    assert done.stdout.startswith("usage: srformer"), done.stdout[:500]


def test_commands_are_the_parsers_own():
    assert len(COMMANDS) >= 12 and {"train", "compare", "bench", "split", "pretrain"} <= set(COMMANDS)


def test_top_level_help_imports_neither_torch_nor_transformers():
    _help_imports_nothing_heavy(["--help"])


@pytest.mark.parametrize("command", COMMANDS)
def test_command_help_imports_neither_torch_nor_transformers(command):
    _help_imports_nothing_heavy([command, "--help"])


def _printed_help(argv: list[str], capsys, monkeypatch) -> str:
    monkeypatch.setenv("COLUMNS", "100000")  # no wrapping: every text is on one line, words whole
    with pytest.raises(SystemExit) as stop:
        main(argv)
    assert stop.value.code == 0
    return " ".join(capsys.readouterr().out.split())


def _expanded_help(parser: argparse.ArgumentParser, action: argparse.Action) -> str:
    return " ".join(parser._get_formatter()._expand_help(action).split())


def test_top_level_help_lists_every_command(capsys, monkeypatch):
    printed = _printed_help(["--help"], capsys, monkeypatch)
    action = next(a for a in build_parser()._actions if isinstance(a, argparse._SubParsersAction))
    for choice in action._choices_actions:
        assert f"{choice.dest} {' '.join(choice.help.split())}" in printed


@pytest.mark.parametrize("command", COMMANDS)
def test_command_help_lists_every_option_with_its_text_default_and_choices(command, capsys, monkeypatch):
    printed = _printed_help([command, "--help"], capsys, monkeypatch)
    parser = _subparsers(build_parser())[command]
    if parser.description:
        assert " ".join(parser.description.split()) in printed
    for action in parser._actions:
        if action.help == argparse.SUPPRESS:
            continue
        for name in action.option_strings or [action.dest]:
            assert name in printed, name
        if action.help:
            assert _expanded_help(parser, action) in printed, action.dest
        for choice in action.choices or ():
            assert str(choice) in printed, (action.dest, choice)


@pytest.mark.parametrize("command", COMMANDS)
def test_each_command_runs_its_implementation(command, monkeypatch):
    import importlib

    module = importlib.import_module(f"srformer.cli.{command.replace('-', '_')}_command")
    calls = []
    monkeypatch.setattr(module, "run", lambda args: calls.append(args) or 7)
    args = argparse.Namespace(command=command)
    assert _subparsers(build_parser())[command].get_default("run")(args) == 7
    assert calls == [args]
