"""The README's picture: what each long-input mechanism reads per generated token against what it recalls.

Usage, from the repository root: ``python scripts/plot_cost_recall.py [--output results/pick/cost-recall]``.
Writes ``<output>.png``, ``<output>.json`` and ``<output>.md`` from published results only (no model is run):

- cost: bytes read per generated token beyond the decoder's own, × ``full``'s, at 65,536 tokens, counted on the
  route a GPU runs (``persistent_bytes_per_token`` of ``results/bench/bytes``; ``srformer bench --sections
  operators``), t5-small shape, batch 1;
- recall: off-segment token accuracy (%) of the synthetic recall probe at 65,536 tokens after converting a trained
  full-attention model with 0 fine-tuning steps, on the probe base whose own full attention loses facts beyond 512
  tokens (seed 2, the hardest of the three; ``srformer long-probe``).

The numbers are read with the headline check's own functions (``scripts/check_headlines.py``), so the plot and the
README's table cannot disagree with results/.
"""

from __future__ import annotations

import argparse
import json
import sys
from collections.abc import Sequence
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parent))
import check_headlines as headlines  # noqa: E402  (a sibling script)

ROOT = Path(__file__).resolve().parents[1]
SEED = 2
LENGTH = headlines.K65

#: (mechanism as the bench names it, its probe file, its name there, the bench files of its bytes): the README's
#: table (:data:`check_headlines.README_TABLE`) with `full` and `quest-tree` beside it.
POINTS = (
    ("full-sdpa", headlines.SEED2_PROBE, "full", (headlines.BYTES,)),
    *((name, probe_file, probe_name, bytes_files)
      for name, probe_file, probe_name, _, bytes_files in headlines.README_TABLE),
    ("quest-tree", headlines.SEED2_PROBE, "quest-tree", (headlines.BYTES,)),
)
#: The README's long-input pick, drawn larger and in red.
PICK = "knn-loki-pages"


def _json(path: str) -> object:
    return json.loads((ROOT / path).read_text(encoding="utf-8"))


def _records(path: str) -> list[dict]:
    """A bench file's records (a JSON list)."""
    loaded = _json(path)
    if not isinstance(loaded, list):
        raise LookupError(f"{path} is not a list of bench records")
    return loaded


def points() -> list[dict[str, float | str]]:
    """One ``{"mechanism", "bytes_x_full", "recall_64k"}`` per entry of :data:`POINTS`.

    Raises:
        LookupError: a mechanism missing from the bytes or the probe results.
    """
    found: list[dict[str, float | str]] = []
    for bench_name, probe_file, probe_name, bytes_files in POINTS:
        records = [item for path in bytes_files for item in _records(path)]
        found.append({
            "mechanism": "full" if bench_name == "full-sdpa" else bench_name,
            "bytes_x_full": headlines.beyond_decoder(records, bench_name, LENGTH),
            "recall_64k": headlines.probe_off(_json(probe_file), probe_name, LENGTH, SEED),
        })
    return found


def main(argv: Sequence[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--output", default="results/pick/cost-recall", help="path without extension")
    args = parser.parse_args(argv)
    import matplotlib

    matplotlib.use("Agg")
    from matplotlib import pyplot as plt

    data = points()
    output = ROOT / args.output
    output.parent.mkdir(parents=True, exist_ok=True)
    output.with_suffix(".json").write_text(json.dumps({"seed": SEED, "length": LENGTH, "points": data}, indent=2)
                                           + "\n", encoding="utf-8")
    lines = ["| mechanism | bytes per token beyond the decoder × `full` (65k) | recall at 64k, seed 2 (%) |",
             "| --- | ---: | ---: |"]
    lines += [f"| `{p['mechanism']}` | {p['bytes_x_full']:.3f} | {p['recall_64k']:.1f} |" for p in data]
    output.with_suffix(".md").write_text("\n".join(lines) + "\n", encoding="utf-8")
    figure, axes = plt.subplots(figsize=(6.4, 4.2))
    for point in data:
        pick = point["mechanism"] == PICK
        axes.scatter(point["bytes_x_full"], point["recall_64k"], s=70 if pick else 40,
                     color="tab:red" if pick else "tab:blue", zorder=3)
        # knn and knn-rows read almost the same, as knn-loki-pages and knn-loki recall: one label under the other
        below = point["mechanism"] in ("knn", "knn-loki")
        axes.annotate(str(point["mechanism"]), (float(point["bytes_x_full"]), float(point["recall_64k"])),
                      textcoords="offset points", xytext=(-10, -14) if below else (6, 4), fontsize=9)
    axes.set_xlabel("bytes read per generated token beyond the decoder, × full attention's\n"
                    "(65,536 tokens, t5-small shape, counted on the route a GPU runs)")
    axes.set_ylabel("off-segment recall at 65,536 tokens (%)\n(probe, 0 fine-tuning steps, hardest seed)")
    axes.set_xlim(-0.05, 1.15)
    axes.grid(alpha=0.3)
    axes.set_title("Long-input cross attention: cost against recall (up and left is better)", fontsize=10)
    figure.tight_layout()
    figure.savefig(output.with_suffix(".png"), dpi=120)
    print(f"{len(data)} mechanisms: {output.with_suffix('.png')}")
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
