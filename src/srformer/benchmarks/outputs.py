"""The files of a benchmark run: ``bench.json``, ``bench.md``, ``step_time.png``, ``figure5.png``."""

from __future__ import annotations

import json
from collections.abc import Mapping, Sequence
from pathlib import Path

from srformer.benchmarks.plots import plot_figure5, plot_operator_calls, plot_step_time
from srformer.benchmarks.plots_bytes import plot_bytes
from srformer.benchmarks.records import BenchRecord, write_records_json
from srformer.benchmarks.report import write_report

#: File names written by :func:`write_outputs`.
OUTPUT_FILES = ("bench.json", "bench.md", "step_time.png", "figure5.png")


def write_outputs(
    records: Sequence[BenchRecord],
    output_dir: str | Path,
    *,
    figure5_qs: Sequence[int] = (128, 256, 384, 512, 640, 768, 896, 1024),
    environment: dict | None = None,
    settings: dict | None = None,
    notes: Sequence[str] = (),
    seconds: float | None = None,
    details: Mapping[str, list[dict]] | None = None,
) -> dict[str, Path]:
    """Write every output file of a run into ``output_dir`` (created if needed).

    ``step_time.png`` is skipped when there is no step-time record (its section was not run), ``operators.png``
    when there is no operator count, ``bytes.png`` when there is no byte count.

    Args:
        records: the run's records.
        output_dir: the output directory.
        figure5_qs: summary lengths of the Figure 5 curves.
        environment, settings, notes, seconds: shown in ``bench.md`` (see :func:`write_report`).
        details: detail rows by file name, each written as JSON (``bytes_by_operator.json``).

    Returns:
        File name -> path of every file written.
    """
    output_dir = Path(output_dir)
    output_dir.mkdir(parents=True, exist_ok=True)
    written = {
        "bench.json": write_records_json(output_dir / "bench.json", records),
        "bench.md": write_report(records, output_dir / "bench.md", environment=environment, settings=settings,
                                 notes=notes, seconds=seconds),
        "figure5.png": plot_figure5(records, output_dir / "figure5.png", qs=figure5_qs),
    }
    if any(r.metric == "cross_attention_step_time" for r in records):
        written["step_time.png"] = plot_step_time(records, output_dir / "step_time.png")
    if any(r.metric == "operator_calls_per_token" for r in records):
        written["operators.png"] = plot_operator_calls(records, output_dir / "operators.png")
    operator_bytes = (details or {}).get("bytes_by_operator.json", [])
    for name, rows in (details or {}).items():
        path = output_dir / name
        path.write_text(json.dumps(rows, indent=1) + "\n")
        written[name] = path
    if any(r.metric == "persistent_bytes_per_token" for r in records):
        written["bytes.png"] = plot_bytes(records, operator_bytes, output_dir / "bytes.png")
    return written
