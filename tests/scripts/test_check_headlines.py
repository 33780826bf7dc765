"""scripts/check_headlines.py: the repository's README and docs match results/, and a drifted number, a wrong
table cell, a reworded snippet or a changed copied table is reported."""

from __future__ import annotations

import shutil
from pathlib import Path

import pytest

from tests.script_loading import script_module

SCRIPT = Path(__file__).resolve().parents[2] / "scripts" / "check_headlines.py"
ROOT = SCRIPT.parents[1]
DOCS = ("README.md", "docs/choosing.md", "docs/long-inputs.md", "docs/limitations.md")


@pytest.fixture(scope="module")
def checker():
    with script_module("check_headlines") as module:
        yield module


def _copy_docs(tmp_path: Path, **replace: tuple[str, str] | list[tuple[str, str]]) -> Path:
    """The README and docs in ``tmp_path``, with ``replace[file stem] = (old, new)`` (or a list of such pairs)
    applied once each."""
    for name in DOCS:
        target = tmp_path / name
        target.parent.mkdir(parents=True, exist_ok=True)
        shutil.copyfile(ROOT / name, target)
    for stem, pairs in replace.items():
        target = next(tmp_path / name for name in DOCS if Path(name).stem == stem.replace("_", "-"))
        for old, new in pairs if isinstance(pairs, list) else [pairs]:
            text = target.read_text(encoding="utf-8")
            assert text.count(old) == 1, f"{old!r} should occur once in {target.name}"
            target.write_text(text.replace(old, new), encoding="utf-8")
    return tmp_path


def test_the_repository_matches_its_results(checker, capsys):
    problems, counts = checker.check()
    assert problems == []
    assert counts["claims"] > 300 and counts["results table"] > 100 and counts["copies"] > 500
    assert checker.main([]) == 0
    out = capsys.readouterr().out.splitlines()
    assert len(out) == 1 and f"{sum(counts.values())} headline numbers" in out[0]


def test_a_drifted_number_a_wrong_cell_and_a_reworded_snippet_are_reported(checker, tmp_path, capsys):
    docs = _copy_docs(
        tmp_path,
        choosing=[("| `knn` | 99.9 / 100.0 | 100.0 / 100.0 / 100.0 (100.0) | 100.0 / 100.0 | 0.643 |",
                   "| `knn` | 99.9 / 100.0 | 100.0 / 100.0 / 100.0 (100.0) | 100.0 / 100.0 | 0.634 |"),
                  ("`block-topk-b4` 0.225× (0.251× in another run), `knn` 0.64×",
                   "`block-topk-b4` 0.225× (0.251× in another run), `knn` 0.65×")],
        long_inputs=("Per token `quest-tree` is 2.7-3.8× `segmented` here",
                     "Per token `quest-tree` costs 2.7-3.8× `segmented` here"),
    )
    problems, _ = checker.check(docs)
    assert "docs/choosing.md: the probe table, row `knn`, column 'step × full': printed 0.634, from results 0.643 " \
           "(results/pick/pick.json)" in problems
    assert any(p.startswith('docs/choosing.md: "`block-topk-b4` {:.3f}× (0.251× in another run), `knn` {:.2f}×')
               and p.endswith(": printed 0.65, from results 0.64 (results/pick/pick.json)") for p in problems)
    assert any(p.startswith('docs/long-inputs.md: snippet not found (reworded? update its claim): "Per token '
                            "`quest-tree` is {:.1f}-{:.1f}×") and 'it reads "Per token `quest-tree` is 2.7-3.8×' in p
               for p in problems)
    assert len(problems) == 3
    assert checker.main(["--docs", str(docs)]) == 1
    assert capsys.readouterr().out.splitlines() == problems


def test_a_dash_where_results_have_a_value_and_a_changed_copy_are_reported(checker, tmp_path):
    docs = _copy_docs(
        tmp_path,
        choosing=[("| `routing` | 71.9 / 68.6 | - / 72.8 / 80.6 (75.1) | - |",
                   "| `routing` | - | 50.0 / 72.8 / 80.6 (75.1) | - |"),
                  ("| knn | 99.9 / 100.0 (1.00) [2 seeds] |", "| knn | 99.8 / 100.0 (1.00) [2 seeds] |")],
    )
    problems, _ = checker.check(docs)
    table = checker._block((ROOT / "results/pick/pick.md").read_text(encoding="utf-8"), "| mechanism | k128")
    line = next(number for number, text in enumerate(table, 1) if text.startswith("| knn |"))
    assert sorted(problems) == [
        "docs/choosing.md: the probe table, row `routing`, column 'k=128, 100 steps: off / on': printed '-', from "
        "results "
        "'71.9 / 68.6' (results/pick/pick.json)",
        "docs/choosing.md: the probe table, row `routing`, column 'k=512: off after 0 / 100 / 400 steps (on, after the "
        "last)': "
        "printed '50.0 / 72.8 / 80.6 (75.1)', from results '- / 72.8 / 80.6 (75.1)' (results/pick/pick.json)",
        f'docs/choosing.md: the table "| mechanism | k128 convert+100 | ...", line {line}: printed '
        "'99.8 / 100.0 (1.00) [2 seeds]', from results '99.9 / 100.0 (1.00) [2 seeds]' (results/pick/pick.md)",
    ]


def test_snippets_match_across_line_breaks_in_the_printed_precision_and_for_each_value(checker):
    text = "it costs 0.98 and\n  0.971× here, −0.01 there; 33 / 17.9 at most, 100% and 100% throughout"
    check = checker.check_snippet
    assert check("d.md", text, "costs {:.2f} and {:.3f}× here, {:.2f} there", (0.9799, 0.9712, -0.013), "r") \
        == ([], 3)
    assert check("d.md", text, "; {} / {} at", (33.45, 17.904), "r") == ([], 2)  # as printed: 0 and 1 decimals
    assert check("d.md", text, "{:.0f}% throughout", ((100.0, 99.7),), "r") == ([], 1)
    problems, checked = check("d.md", text, "{:.0f}% throughout", ((100.0, 99.4),), "r")
    assert problems == ['d.md: "{:.0f}% throughout": printed 100, from results 99 (r)'] and checked == 1
    problems, _ = check("d.md", text, "costs {:.2f} and", (0.99,), "r")
    assert problems == ['d.md: "costs {:.2f} and": printed 0.98, from results 0.99 (r)']
    assert check("d.md", text, "{:.0f}%", (100.0,), "r") == ([], 2)  # every occurrence
    assert check("d.md", text, "{:.2f} there", (-0.001,), "r")[0] == [
        'd.md: "{:.2f} there": printed −0.01, from results 0.00 (r)']
