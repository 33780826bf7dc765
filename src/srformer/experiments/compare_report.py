"""Tables and plots of ``srformer compare`` in the shape of the paper's Table 2, Figure 4 and Table 3."""

from __future__ import annotations

from pathlib import Path

import matplotlib

matplotlib.use("Agg")
import matplotlib.pyplot as plt  # noqa: E402

from srformer.core import setting_label  # noqa: E402
from srformer.evaluation.report import format_table  # noqa: E402

ABLATION_LABELS = {
    "ablation-I": "(I) no segmented attention",
    "ablation-II": "(II) no norm(K)",
    "ablation-III": "(III) no RAF",
    "ablation-IV": "(IV) K_S^T V_S instead of P",
    "srformer-sigma": "learnable sigma (Eq. 10)",
}

READS_INPUT_FRACTION = 0.9
"""A cell "reads its input" when it writes distinct summaries for at least this fraction of the test
documents; below it, ROUGE differences say which template a fine-tune settled on, not how well an
attention variant reads the source, and no ranking should be read from that cell."""


def _spread(group: dict, key: str) -> str:
    value = group[key]
    return f"{value['mean']:.2f} ± {value['std']:.2f}" if value["num_seeds"] > 1 else f"{value['mean']:.2f}"


def _interval(low: float, high: float) -> str:
    return f"{low:.2f} to {high:.2f}"


def _distinct(group: dict) -> str:
    """Distinct summaries over the test documents (mean over seeds): 1 means the input is ignored."""
    return f"{group['distinct_outputs']:.0f} / {group['num_documents']}"


def _copy_rate(group: dict) -> str:
    """Share of the summaries' word 3-grams found in their own document (mean over seeds), or "-" when the cells
    predate the reading check."""
    reading = group.get("reading")
    if not reading or reading.get("copy_rate") is None:
        return "-"
    return f"{100 * reading['copy_rate']:.0f}%"


def _lead3(group: dict) -> str:
    """ROUGE-1 of the summaries against their document's first three sentences (mean over seeds), or "-"."""
    reading = group.get("reading")
    return "-" if not reading else f"{reading['lead3_rouge1']:.2f}"


def _mismatched(group: dict) -> str:
    """ROUGE-1 of the summaries against another document's reference (mean over seeds), or "-" without it."""
    reading = group.get("reading")
    value = reading.get("mismatched_rouge1") if reading else None
    return "-" if value is None else f"{value:.2f}"


def _words(group: dict) -> str:
    """Mean output length in words (over documents and seeds), or "-" without the length baselines."""
    baselines = group.get("baselines")
    return "-" if not baselines else f"{baselines['words']:.0f}"


def _baseline_rouge1(group: dict, name: str) -> str:
    """ROUGE-1 of a length baseline of the group's own outputs (``name``: lead matched or oracle capped)."""
    baselines = group.get("baselines")
    return "-" if not baselines else f"{baselines[name]['rouge1']:.2f}"


def _minus_lead(group: dict, key: str = "rouge1") -> str:
    """The group's paired difference to its length-matched lead, ``mean (low to high)`` with ``*`` when the 95%
    interval excludes 0."""
    baselines = group.get("baselines")
    if not baselines:
        return "-"
    return _difference(baselines["minus_lead_matched"][key])


def length_baseline_columns(group: dict) -> dict[str, str]:
    """The length-baseline columns of a table row: output words, the length-matched lead's ROUGE-1, the paired
    difference to it, and the length-capped oracle's ROUGE-1."""
    return {
        "words": _words(group),
        "lead (length-matched) ROUGE-1": _baseline_rouge1(group, "lead (length-matched)"),
        "this − matched lead, ROUGE-1 (95% CI)": _minus_lead(group),
        "this − matched lead, ROUGE-2": _minus_lead(group, "rouge2"),
        "oracle (length-capped) ROUGE-1": _baseline_rouge1(group, "oracle (length-capped)"),
    }


def reference_of(payload: dict) -> str:
    """The setting the variants table pairs every other one with (``srformer`` in results written before
    ``--reference`` existed)."""
    return payload["settings"].get("reference", "srformer")


def _decode_ratio(payload: dict, group: dict) -> str:
    """The group's decode time over the test documents as a multiple of ``full``'s (same run, same documents), or
    "-" when the grid has no ``full`` group."""
    full = next((g for g in payload["groups"] if g["name"] == "full"), None)
    if full is None or not full["decode_seconds"]:
        return "-"
    return f"{group['decode_seconds'] / full['decode_seconds']:.2f}×"


def _paired(payload: dict, other: str, size: int | None, reference: str = "srformer") -> dict | None:
    for row in payload["paired"]:
        # a grid of segment-free settings only pairs them once, at no segment size (``summarize``)
        if (row["other"] == other and row["segment_size"] in (size, None)
                and row.get("reference", "srformer") == reference):
            return row
    return None


def _delta(payload: dict, name: str, size: int, reference: str = "srformer") -> tuple[str, str]:
    """``reference - name`` ROUGE-1 with its paired interval, and the reference's per-document win rate."""
    row = _paired(payload, name, size, reference)
    if row is None:
        return "-", "-"
    r1 = row["rouge1"]
    return (_delta_other(payload, name, size, "rouge1", reference),
            f"{100 * r1['a_wins']:.0f}% / {100 * r1['b_wins']:.0f}%")


def _delta_other(payload: dict, name: str, size: int, key: str, reference: str = "srformer") -> str:
    """``reference - name`` in ROUGE ``key`` with its paired 95% interval (* when it excludes zero), or "-"."""
    row = _paired(payload, name, size, reference)
    if row is None or key not in row:
        return "-"
    return _difference(row[key])


def _difference(value: dict) -> str:
    """A paired difference (:class:`~srformer.evaluation.statistics.PairedDifference` as a dict): ``+mean (low to
    high)``, with `` *`` when its interval excludes zero."""
    return f"{value['mean']:+.2f} ({_interval(value['low'], value['high'])}){' *' if value['significant'] else ''}"


def _lead3_row(payload: dict, size: int) -> dict | None:
    """The lead-3 baseline's row of a :func:`table2` block (no model: its first three sentences), or None for a
    payload without it."""
    lead = payload.get("lead3")
    if not lead:
        return None
    reference = reference_of(payload)
    delta, wins = _delta(payload, lead["name"], size, reference)
    return {
        "variant": "lead-3 (first three sentences)",
        "ROUGE-1": f"{lead['rouge1']:.2f}",
        "ROUGE-1 95% CI": _interval(*lead["rouge_ci"]["rouge1"]),
        "ROUGE-2": f"{lead['rouge2']:.2f}",
        "ROUGE-L": f"{lead['rougeL']:.2f}",
        "ROUGE-Lsum": f"{lead['rougeLsum']:.2f}",
        f"{reference} − this, ROUGE-1 (95% CI)": delta,
        f"{reference} − this, ROUGE-2": _delta_other(payload, lead["name"], size, "rouge2", reference),
        f"{reference} − this, ROUGE-L": _delta_other(payload, lead["name"], size, "rougeL", reference),
        f"docs {reference} better / worse": wins,
        "distinct outputs": "-", "copied 3-grams": "100%", "lead-3 ROUGE-1": "100.00",
        "ROUGE-1 vs another doc's reference": "-",
        "words": f"{lead['words']:.0f}" if "words" in lead else "-",
        "lead (length-matched) ROUGE-1": "-", "this − matched lead, ROUGE-1 (95% CI)": "-",
        "this − matched lead, ROUGE-2": "-", "oracle (length-capped) ROUGE-1": "-", "decode s": 0.0,
        "decode × full": "-",
    }


def lead3_line(payload: dict) -> str:
    """One sentence: the best cell's ROUGE-1 beside the lead-3 baseline's, or "" without the baseline."""
    lead = payload.get("lead3")
    if not lead or not payload["groups"]:
        return ""
    best = max(payload["groups"], key=lambda g: g["rouge1"]["mean"])
    size = "" if best["segment_size"] is None else f" at s = {best['segment_size']}"
    verdict = "beats" if best["rouge1"]["mean"] > lead["rouge1"] else "does not beat"
    words = f", {lead['words']:.0f} words" if "words" in lead else ""
    line = (f"Best cell: {setting_label(best['name'], best.get('settings'))}{size}, ROUGE-1 "
            f"{best['rouge1']['mean']:.2f} (95% CI {_interval(*best['rouge_ci']['rouge1'])}); lead-3{words}: "
            f"{lead['rouge1']:.2f} ({_interval(*lead['rouge_ci']['rouge1'])}). The best cell {verdict} lead-3.")
    if best.get("baselines"):
        line += (f" At its own length ({_words(best)} words) the lead scores "
                 f"{_baseline_rouge1(best, 'lead (length-matched)')}: the cell's paired difference is "
                 f"{_minus_lead(best)}; the oracle of that length scores "
                 f"{_baseline_rouge1(best, 'oracle (length-capped)')}.")
    return line


def table2(payload: dict) -> str:
    """One block per segment size: every variant (not the ablations) with ROUGE mean ± std over
    seeds, the pooled 95% interval of ROUGE-1, the paired ROUGE-1/2/L differences to the grid's reference
    (``srformer`` unless ``--reference`` named another), the length baselines, the decode time (seconds, and as a
    multiple of ``full``'s when the grid ran it), and the lead-3 baseline's row when the payload has it."""
    settings = payload["settings"]
    groups = payload["groups"]
    reference = reference_of(payload)
    blocks = []
    for size in settings["segment_sizes"]:
        rows = []
        for group in groups:
            if group["name"] not in settings["variants"] or group["segment_size"] not in (size, None):
                continue
            delta, wins = (_delta(payload, group["name"], size, reference) if group["name"] != reference
                           else ("-", "-"))
            rows.append({
                "variant": setting_label(group["name"], group.get("settings")),
                "ROUGE-1": _spread(group, "rouge1"),
                "ROUGE-1 95% CI": _interval(*group["rouge_ci"]["rouge1"]),
                "ROUGE-2": _spread(group, "rouge2"),
                "ROUGE-L": _spread(group, "rougeL"),
                "ROUGE-Lsum": _spread(group, "rougeLsum"),
                f"{reference} − this, ROUGE-1 (95% CI)": delta,
                f"{reference} − this, ROUGE-2": _delta_other(payload, group["name"], size, "rouge2", reference),
                f"{reference} − this, ROUGE-L": _delta_other(payload, group["name"], size, "rougeL", reference),
                f"docs {reference} better / worse": wins,
                "distinct outputs": _distinct(group),
                "copied 3-grams": _copy_rate(group),
                "lead-3 ROUGE-1": _lead3(group),
                "ROUGE-1 vs another doc's reference": _mismatched(group),
                **length_baseline_columns(group),
                "decode s": group["decode_seconds"],
                "decode × full": _decode_ratio(payload, group),
            })
        lead_row = _lead3_row(payload, size)
        if rows and lead_row is not None:
            rows.append(lead_row)
        if rows:
            blocks.append(f"**Segment size {size}**\n\n" + format_table(rows, list(rows[0])))
    return "\n\n".join(blocks)


def figure4_table(payload: dict) -> str:
    """ROUGE-1 (mean ± std over seeds) per variant (rows) and segment size (columns)."""
    settings = payload["settings"]
    sizes = list(settings["segment_sizes"])
    rows = []
    for name in settings["variants"]:
        row = {"variant": setting_label(name, settings.get("variant_settings", {}).get(name))}
        for size in sizes:
            group = next(
                (g for g in payload["groups"] if g["name"] == name and g["segment_size"] in (size, None)), None
            )
            row[f"s = {size}"] = _spread(group, "rouge1") if group else "-"
        rows.append(row)
    return format_table(rows, ["variant", *[f"s = {s}" for s in sizes]])


def table3(payload: dict) -> str:
    """``srformer`` and its ablations at the ablation segment size, with the paired difference."""
    settings = payload["settings"]
    size = settings["ablation_segment_size"] or max(settings["segment_sizes"])
    rows = []
    for name in ("srformer", *settings["ablations"]):
        group = next((g for g in payload["groups"] if g["name"] == name and g["segment_size"] == size), None)
        if group is None:
            continue
        delta, wins = _delta(payload, name, size) if name != "srformer" else ("-", "-")
        rows.append({
            "setting": setting_label(ABLATION_LABELS.get(name, name), group.get("settings")),
            "ROUGE-1": _spread(group, "rouge1"),
            "ROUGE-1 95% CI": _interval(*group["rouge_ci"]["rouge1"]),
            "ROUGE-2": _spread(group, "rouge2"),
            "ROUGE-L": _spread(group, "rougeL"),
            "srformer − this, ROUGE-1 (95% CI)": delta,
            "docs srformer better / worse": wins,
            "distinct outputs": _distinct(group),
            "copied 3-grams": _copy_rate(group),
            "lead-3 ROUGE-1": _lead3(group),
            "ROUGE-1 vs another doc's reference": _mismatched(group),
            **length_baseline_columns(group),
        })
    if not rows:
        return ""
    return f"**Segment size {size}**\n\n" + format_table(rows, list(rows[0]))


def input_check(payload: dict) -> str:
    """One paragraph: do all cells write distinct summaries for >= :data:`READS_INPUT_FRACTION` of the
    test documents? Names the cells below the threshold (per cell, not averaged over seeds)."""
    cells = payload["cells"]
    if not cells:
        return ""
    low = [c for c in cells if c["distinct_outputs"] < READS_INPUT_FRACTION * c["metrics"]["num_examples"]]
    least = min(cells, key=lambda c: c["distinct_outputs"] / c["metrics"]["num_examples"])
    fewest = f"fewest: {least['key']}, {least['distinct_outputs']} / {least['metrics']['num_examples']}"
    if not low:
        return (f"All {len(cells)} cells wrote distinct summaries for at least {READS_INPUT_FRACTION:.0%} of the "
                f"test documents ({fewest}): the models read their input.")
    listed = ", ".join(f"{c['key']} ({c['distinct_outputs']} / {c['metrics']['num_examples']})" for c in low)
    return (f"{len(low)} of {len(cells)} cells wrote distinct summaries for fewer than {READS_INPUT_FRACTION:.0%} "
            f"of the test documents: {listed}. They (partly) ignore their input; no ranking should be read from "
            "them.")


def plot_figure4(payload: dict, path: Path) -> Path:
    """ROUGE-1 vs segment size per variant, error bars = std over seeds; segment-free variants
    (``full``, ``linear``) as horizontal lines with a ±std band (paper Figure 4)."""
    settings = payload["settings"]
    sizes = sorted(settings["segment_sizes"])
    fig, ax = plt.subplots(figsize=(6.5, 4.2))
    for index, name in enumerate(settings["variants"]):
        groups = [g for g in payload["groups"] if g["name"] == name]
        label = setting_label(name, settings.get("variant_settings", {}).get(name))
        color = f"C{index}"
        if len(groups) == 1 and groups[0]["segment_size"] is None:
            mean, std = groups[0]["rouge1"]["mean"], groups[0]["rouge1"]["std"]
            ax.axhline(mean, color=color, linestyle="--", label=label)
            ax.axhspan(mean - std, mean + std, color=color, alpha=0.12)
            continue
        points = sorted(
            (g["segment_size"], g["rouge1"]["mean"], g["rouge1"]["std"]) for g in groups if g["segment_size"] in sizes
        )
        if points:
            xs, means, stds = zip(*points, strict=True)
            ax.errorbar(xs, means, yerr=stds, marker="o", capsize=3, color=color, label=label)
    if payload.get("lead3"):
        ax.axhline(payload["lead3"]["rouge1"], color="black", linestyle=":", label="lead-3 (no model)")
    ax.set_xscale("log", base=2)
    ax.set_xticks(sizes, [str(s) for s in sizes])
    ax.set_xlabel("segment size s (tokens)")
    ax.set_ylabel("ROUGE-1 (F1 x 100)")
    seeds = len(settings["seeds"])
    ax.set_title(f"ROUGE-1 vs segment size ({settings['model']}, {seeds} seed{'s' if seeds > 1 else ''}, ±std)")
    ax.legend(fontsize=8)
    fig.tight_layout()
    fig.savefig(path, dpi=120)
    plt.close(fig)
    return path


def plot_table3(payload: dict, path: Path) -> Path | None:
    """Bars of ROUGE-1 for ``srformer`` and each ablation (error bars: std over seeds)."""
    settings = payload["settings"]
    size = settings["ablation_segment_size"] or max(settings["segment_sizes"])
    groups = [g for name in ("srformer", *settings["ablations"])
              for g in payload["groups"] if g["name"] == name and g["segment_size"] == size]
    if len(groups) < 2:
        return None
    fig, ax = plt.subplots(figsize=(7, 3.8))
    labels = [setting_label(ABLATION_LABELS.get(g["name"], g["name"]), g.get("settings")) for g in groups]
    ax.bar(range(len(groups)), [g["rouge1"]["mean"] for g in groups], yerr=[g["rouge1"]["std"] for g in groups],
           capsize=3, color=[f"C{i}" for i in range(len(groups))])
    ax.set_xticks(range(len(groups)), labels, rotation=20, ha="right", fontsize=8)
    ax.set_ylabel("ROUGE-1 (F1 x 100)")
    ax.set_title(f"Ablations at segment size {size} (paper Table 3)")
    fig.tight_layout()
    fig.savefig(path, dpi=120)
    plt.close(fig)
    return path


def write_report(payload: dict, output: Path) -> None:
    """Write ``results.md``, ``figure4.png`` and (with ablations) ``table3.png`` into ``output``."""
    settings = payload["settings"]
    num_documents = payload["groups"][0]["num_documents"] if payload["groups"] else 0
    decoding = "greedy decoding" if settings["num_beams"] == 1 else f"beam search ({settings['num_beams']} beams)"
    decoding += f", at most {settings['max_new_tokens']} new tokens"
    if settings.get("no_repeat_ngram_size"):
        decoding += f", no repeated {settings['no_repeat_ngram_size']}-gram"
    header = (
        f"# srformer compare: {settings['data'] or 'custom data'}\n\n"
        f"Model {settings['model']}; base: {settings['base_steps']} steps of full attention; every cell: "
        f"{settings['finetune_steps']} fine-tuning steps, batch {settings['batch_size']}; source "
        f"{settings['max_source_length']} tokens, target length T = {settings['target_length']}; "
        f"{num_documents} test documents; seeds {list(settings['seeds'])}; {decoding}.\n"
        "ROUGE is F1 x 100 (rouge-score, stemming), mean ± std over seeds. The 95% interval is a bootstrap "
        "over documents of the per-document scores averaged over seeds. The paired difference resamples "
        "documents jointly for both systems; * marks an interval that excludes zero. \"Distinct outputs\" counts the "
        "different summaries written for the test documents (mean over seeds): a model that ignores its input "
        "writes one summary for all of them. \"Copied 3-grams\" is the share of the summaries' word 3-grams found in "
        "their own document, \"lead-3 ROUGE-1\" the summaries' ROUGE-1 against their document's first three "
        "sentences (both mean over seeds; - for cells recorded without predictions to check). \"ROUGE-1 vs another "
        "doc's reference\" scores each summary against the next document's reference: what a summary that ignored "
        "its document would score, so ROUGE-1 minus it is what reading earns. The lead-3 row "
        "is no model: each document's first three sentences (pysbd) as its summary. \"Words\" is the outputs' mean "
        "length; the length-matched lead is each document's lead cut to its output's word count (the floor), the "
        "length-capped oracle the greedy ROUGE-1+2 oracle of the document's sentences within those words (the "
        "ceiling), and \"this − matched lead\" the paired difference to that lead.\n"
    )
    parts = [header, "## Do the models read their input?\n", input_check(payload),
             *(["\n## Against lead-3\n", lead3_line(payload)] if payload.get("lead3") else []),
             "\n## Table 2 shape: variants per segment size\n", table2(payload),
             "\n## Figure 4 shape: ROUGE-1 by segment size\n", figure4_table(payload)]
    if settings["ablations"]:
        parts += ["\n## Table 3 shape: ablations\n", table3(payload)]
    (output / "results.md").write_text("\n".join(parts) + "\n")
    plot_figure4(payload, output / "figure4.png")
    if settings["ablations"]:
        plot_table3(payload, output / "table3.png")
