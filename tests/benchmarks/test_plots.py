"""The operator-count plot (:func:`srformer.benchmarks.plots.plot_operator_calls`): both panels drawn, the budget
shaded, the per-token axis linear (its values lie within a factor of two of full attention's, where a log axis
labels no tick) and the first step's logarithmic."""

from __future__ import annotations

import pytest

from srformer.benchmarks import plots
from srformer.benchmarks.records import BenchRecord


def _records():
    counts = {("full-sdpa", None): (511.0, 630.0), ("quest-b2", 64): (660.0, 1781.0)}
    return [BenchRecord(variant=variant, encoder_length=k, segment_size=s, batch_size=1, metric=metric,
                        value=value * (1.1 if k > 4096 and variant != "full-sdpa" else 1.0), unit="calls",
                        device="cpu")
            for (variant, s), (per_token, first) in counts.items() for k in (4096, 16384)
            for metric, value in (("operator_calls_per_token", per_token), ("first_step_operator_calls", first))]


def test_the_plot_has_a_linear_per_token_axis_and_a_log_first_step_axis(tmp_path, monkeypatch):
    figures = []
    save = plots._save
    monkeypatch.setattr(plots, "_save", lambda fig, path, **kw: (figures.append(fig), save(fig, path, **kw))[1])
    path = plots.plot_operator_calls(_records(), tmp_path / "operators.png")
    assert path.read_bytes()[:8] == b"\x89PNG\r\n\x1a\n"
    per_token, first_step = figures[0].axes[:2]
    assert per_token.get_yscale() == "linear" and per_token.get_ylim()[0] == 0
    assert first_step.get_yscale() == "log"
    labels = per_token.get_legend_handles_labels()[1]
    assert "full-sdpa" in labels and "quest-b2, s=64" in labels and any(label.startswith("budget") for label in labels)


def test_no_operator_record_is_refused():
    with pytest.raises(ValueError, match="No operator-count records"):
        plots.plot_operator_calls([], "unused.png")
