#!/usr/bin/env python3
"""Compare the junit reports of run.sh: per converted run, what passes on the plain model but not converted.

    python scripts/transformers_suites/compare.py OUT_DIR/FAMILY [--baseline plain] [--json FILE]

Reads every RUN.xml in the folder (RUN.stats.json and RUN.time when present). For each run other than the
baseline it lists: the tests that pass on the plain model but fail (or error) on the converted one, with the
first line of the failure message; the tests that fail on the plain model too; the tests that fail on the plain
model but pass converted; and the tests missing from one of the two reports (e.g. a crash or a timeout).
Prints markdown.
"""

from __future__ import annotations

import argparse
import json
import re
import sys
import xml.etree.ElementTree as ET
from pathlib import Path
from typing import Any

OUTCOMES = ("passed", "failed", "error", "skipped")


def first_line(text: str | None, limit: int = 220) -> str:
    """The first non-blank line of ``text``, stripped and cut to ``limit`` characters; "" for None or blank text."""
    for line in (text or "").splitlines():
        line = line.strip()
        if line:
            return line[:limit]
    return ""


def read_report(path: Path) -> dict[str, tuple[str, str]]:
    """test id -> (outcome, one-line reason) from the junit XML report at ``path``.

    The test id is ``classname::name``; the outcome one of ``OUTCOMES``, a failure winning over a later error and
    both over a skip. Raises ``OSError`` when the file cannot be read and ``xml.etree.ElementTree.ParseError`` when
    it is not well-formed XML.
    """
    results: dict[str, tuple[str, str]] = {}
    for case in ET.parse(path).getroot().iter("testcase"):
        test = f"{case.get('classname', '')}::{case.get('name', '')}"
        outcome, reason = "passed", ""
        for child in case:
            if child.tag in ("failure", "error"):
                # an error in teardown after a failure keeps the failure
                if outcome != "failed":
                    outcome = "failed" if child.tag == "failure" else "error"
                    reason = first_line(child.get("message")) or first_line(child.text)
            elif child.tag == "skipped" and outcome == "passed":
                outcome, reason = "skipped", first_line(child.get("message"))
        results[test] = (outcome, reason)
    return results


def counts(results: dict[str, tuple[str, str]]) -> dict[str, int]:
    """Number of tests per outcome in ``results`` (every outcome of ``OUTCOMES`` present, 0 when none).

    Raises ``KeyError`` for an outcome outside ``OUTCOMES`` (``read_report`` makes none).
    """
    per_outcome = dict.fromkeys(OUTCOMES, 0)
    for outcome, _ in results.values():
        per_outcome[outcome] += 1
    return per_outcome


def short(test: str) -> str:
    """``module.Class::name`` shortened to ``Class::name``; ``ValueError`` when ``test`` has no ``::``."""
    class_path, name = test.rsplit("::", 1)
    return f"{class_path.rsplit('.', 1)[-1]}::{name}"


def main(argv: list[str] | None = None) -> int:
    """Command line entry point (see the module docstring): prints the markdown comparison, returns the exit status.

    Returns 2 when the folder has no baseline report, else 0. Raises ``SystemExit`` for bad arguments or ``--help``,
    and what ``read_report`` raises for an unreadable report.
    """
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("folder")
    parser.add_argument("--baseline", default="plain")
    parser.add_argument("--json", help="also write the comparison as JSON here")
    args = parser.parse_args(argv)

    folder = Path(args.folder)
    reports = {report.stem: report for report in sorted(folder.glob("*.xml"))}
    if args.baseline not in reports:
        print(f"no {args.baseline}.xml in {folder}", file=sys.stderr)
        return 2
    runs = {name: read_report(path) for name, path in reports.items()}
    base = runs[args.baseline]
    failing = {"failed", "error"}

    def pytest_line(name: str) -> str:
        """pytest's own closing line (its counts treat subtests differently from the junit report)."""
        log = folder / f"{name}.log"
        if not log.exists():
            return ""
        lines = [
            line for line in log.read_text(errors="replace").splitlines() if re.match(r"^=+ .* in [0-9.]+s", line)
        ]
        return lines[-1].strip("= ") if lines else ""

    def extra(name: str) -> str:
        """The notes column of a run: pytest's closing line, its .time and its plugin counts, where present."""
        bits = [pytest_line(name)]
        time_file = folder / f"{name}.time"
        if time_file.exists():
            bits.append(time_file.read_text().strip())
        stats_file = folder / f"{name}.stats.json"
        if stats_file.exists():
            stats = json.loads(stats_file.read_text())
            plugin_counts = stats.get("counts", {})
            n_tests = stats.get("tests_with_a_converted_model", 0)
            bits.append(f"converted {plugin_counts.get('converted', 0)} models in {n_tests} tests")
            if plugin_counts.get("refused_value_error"):
                bits.append(f"refused {plugin_counts['refused_value_error']}")
        return "; ".join(bit for bit in bits if bit)

    out: dict[str, Any] = {"folder": str(folder), "baseline": args.baseline, "runs": {}}
    print(f"# {folder.name}\n")
    print("Counts from the junit report (a test with a skipped subtest counts as skipped there); pytest's own "
          "closing line is in the notes.\n")
    print("| run | passed | failed | error | skipped | notes |\n| --- | --- | --- | --- | --- | --- |")
    for name, results in runs.items():
        per_outcome = counts(results)
        print(f"| {name} | {per_outcome['passed']} | {per_outcome['failed']} | {per_outcome['error']} "
              f"| {per_outcome['skipped']} | {extra(name)} |")
    plain_failing = sorted(test for test, (outcome, _) in base.items() if outcome in failing)
    print(f"\n## Failing on the plain model ({len(plain_failing)})\n")
    for test in plain_failing:
        print(f"- `{short(test)}` ({base[test][0]}): {base[test][1]}")

    def plain_outcome(test: str) -> str:
        """The test's outcome on the baseline, "" when the baseline does not have it."""
        return base.get(test, ("",))[0]

    for name, results in runs.items():
        if name == args.baseline:
            continue
        regressions = sorted(
            test for test, (outcome, _) in results.items() if outcome in failing and plain_outcome(test) == "passed"
        )
        both = sorted(
            test for test, (outcome, _) in results.items() if outcome in failing and plain_outcome(test) in failing
        )
        fixed = sorted(
            test for test, (outcome, _) in results.items() if outcome == "passed" and plain_outcome(test) in failing
        )
        skip_changed = sorted(
            test
            for test, (outcome, _) in results.items()
            if (outcome == "skipped") != (plain_outcome(test) == "skipped") and test in base
        )
        missing = sorted(set(base) - set(results))
        added = sorted(set(results) - set(base))
        out["runs"][name] = {
            "counts": counts(results),
            "fail_converted_only": {test: results[test][1] for test in regressions},
            "fail_both": both,
            "pass_converted_only": fixed,
            "skip_changed": skip_changed,
            "missing_in_run": missing,
            "missing_in_baseline": added,
        }
        print(f"\n## {name}: pass on plain, fail converted ({len(regressions)})\n")
        for test in regressions:
            print(f"- `{short(test)}` ({results[test][0]}): {results[test][1]}")
        print(f"\nfail on both: {len(both)}; fail on plain only: {len(fixed)}; skipped in one run only: "
              f"{len(skip_changed)}; not in this run: {len(missing)}; not in the baseline: {len(added)}")
        for label, tests in (("fail on plain only", fixed), ("skipped in one run only", skip_changed),
                             ("not in this run", missing)):
            for test in tests[:30]:
                print(f"- {label}: `{short(test)}` (plain {base.get(test, ('-',))[0]}, "
                      f"{name} {results.get(test, ('-',))[0]})")
    if args.json:
        Path(args.json).write_text(json.dumps(out, indent=1) + "\n")
    return 0


if __name__ == "__main__":
    sys.exit(main())
