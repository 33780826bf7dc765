"""Check that the headline numbers of the README and the docs are the values in ``results/`` they come from.

Usage, from the repository root: ``python scripts/check_headlines.py [--docs DIR]`` (``--docs``: read README.md
and docs/ from DIR instead, results/ still from the repository). It prints one line per mismatch (file, snippet,
printed value, value from results) and exits 1, or prints a one-line summary (how many numbers it checked) and
exits 0.

Rules:

- A claim (:data:`CLAIMS`) is a snippet of a doc's text with a placeholder where each number stands, the JSON file
  under ``results/`` the numbers come from, and an accessor that reads one value per placeholder from it. A
  placeholder carries the format the text prints the number with, as in ``str.format``: ``{:.1f}`` is the value
  with one decimal (so ``{:.1f}%`` checks a percentage the accessor returns in %); a bare ``{}`` is the value
  rounded to as many decimals as the text prints, for a place whose precision varies (``17.9`` beside ``33``). A
  value may be a tuple: the text's one number stands for each of them (``100% throughout``), and each must print
  as it.
- The snippet must occur in its doc, any run of whitespace (a line break included) matching any other; a snippet
  that is not found is a mismatch, so a claim follows its text when the text is reworded. Every occurrence is
  checked. A number written into a snippet literally (a setting, a number with no JSON behind it) is not checked.
- The probe table with its costs (docs/choosing.md) is not listed cell by cell: each printed row is derived from
  results/pick/pick.json (``quest-tree``'s cost, footnote ³, from results/bench/quest/bench.json), with its
  footnote marks, and compared with the printed row cell by cell; a ``-`` must stand where results have no value
  (:func:`results_table_row`).
- docs/choosing.md's table of every mechanism is results/pick/pick.md's, line for line (:data:`COPIES`).
- A number no JSON under ``results/`` records (a wall-clock time from a log, a run whose JSON was not kept) is left
  out of the claims; it is not given a made-up source.

Only the standard library; it reads nothing outside the repository.
"""

from __future__ import annotations

import argparse
import json
import math
import re
import statistics
import sys
from collections.abc import Callable, Iterable, Sequence
from dataclasses import dataclass
from itertools import zip_longest
from pathlib import Path
from typing import Any

ROOT = Path(__file__).resolve().parents[1]
README, CHOOSING, LONG_INPUTS = "README.md", "docs/choosing.md", "docs/long-inputs.md"
LIMITATIONS = "docs/limitations.md"

PICK = "results/pick/pick.json"
PICK_MD = "results/pick/pick.md"
QUEST_BENCH = "results/bench/quest/bench.json"  # k=4096, s=64, batch 8, next to another job
QUEST_BENCH_65K = "results/bench/quest/k65536/bench.json"
LONG_BENCH = "results/long-input/long_input.json"  # the quiet run, 4k to 262k tokens
LONG_BENCH_1M = "results/long-input/1m/long_input.json"
QUEST_LONG_BENCH = "results/long-input/quest/long_input.json"  # quest, quest-tree, block-topk-b4: next to other jobs
QUEST_QUIET = "results/long-input/quest/262k-quiet/long_input.json"
QUEST_CPU_BUILD = "results/long-input/default-allocator/long_input.json"  # full, segmented, quest-tree side by side
CPU_COMPILED = "results/long-input/compiled-cpu/long_input.json"  # compiled decoding, beside the eager run below
CPU_EAGER = "results/long-input/compiled-cpu/eager/long_input.json"  # eager, the same mechanisms, run at the same time
ROWS_LONG_BENCH = "results/long-input/knn-rows-cpu/long_input.json"  # knn-rows beside full, knn, segmented, quest-b2
B2_PROBE = "results/probe/long-input-convert0/quest-b2/long_probe.json"  # quest-b2, seeds 0 and 2, 0 steps
OPERATORS = "results/bench/operators/bench.json"  # operator calls, t5-small, batch 1, 4k / 16k / 65k
BYTES = "results/bench/bytes/bench.json"  # bytes and calls, t5-small, batch 1, 16k / 65k
LOKI_PROBE = "results/probe/long-input-convert0/knn-loki/long_probe.json"  # knn-loki, seeds 0-2, 0 steps
LOKI_EXACT = "results/probe/long-input-convert0/knn-loki/exact-retrained/long_probe.json"  # knn on the same bases
LOKI_CPU = "results/long-input/knn-loki-cpu/long_input.json"  # knn-loki beside full and segmented, one thread
SEED2_PROBE = "results/probe/long-input-convert0/seed2/long_probe.json"  # the third seed, 0 fine-tuning steps
ROWS_SEED2_PROBE = "results/probe/long-input-convert0/knn-rows/seed2/long_probe.json"  # knn-rows, seed 2, 0 steps
LOKI_NAME = "knn (loki, r=12, C=256)"  # knn-loki's name in LOKI_PROBE
PAGES_PROBE = "results/probe/long-input-convert0/knn-loki-pages/long_probe.json"  # knn-loki-pages, seeds 0-2, 0 steps
#: a fourth probe base (seed 4), 0 steps: the candidate, the pick, the exact search and full at up to 262,144 tokens
SEED4 = "results/probe/long-input-convert0/knn-loki-pages-c64/seed4"
#: knn-loki, knn-loki-pages and knn-loki-tail with the fused step, counted as BYTES (16k / 65k / 262k); BYTES's knn-loki
#: counts are older steps'
PAGES_BYTES = "results/bench/bytes/knn-loki-pages/bench.json"
BYTES_262K = "results/bench/bytes/k262144/bench.json"  # the 262,144-token count of four mechanisms
LOKI_BYTES = PAGES_BYTES
#: full, segmented, knn-loki, knn-loki-pages and knn-loki-tail side by side, one thread (LOKI_CPU: the step before)
PAGES_CPU = "results/long-input/knn-loki-pages-cpu/long_input.json"
PAGES_NAME = "knn (loki, r=12, C=256, pages 16 x 256)"  # knn-loki-pages's name in PAGES_PROBE
#: The README's table, one row a mechanism: (its name in the bench, its probe file, its name there, the run that timed
#: its CPU step beside `full`, the bench files holding its bytes beside `full`'s and `segmented`'s).
README_TABLE = (
    ("knn-loki-pages", PAGES_PROBE, PAGES_NAME, PAGES_CPU, (BYTES, PAGES_BYTES)),
    ("knn-loki", LOKI_PROBE, LOKI_NAME, PAGES_CPU, (LOKI_BYTES, BYTES)),
    ("knn", SEED2_PROBE, "knn", ROWS_LONG_BENCH, (BYTES,)),
    ("knn-rows", ROWS_SEED2_PROBE, "knn (rows)", ROWS_LONG_BENCH, (BYTES,)),
    ("quest-b2", B2_PROBE, "quest-b2", ROWS_LONG_BENCH, (BYTES,)),
)
KNN_LAYOUTS = "results/long-input/knn-index/layouts.json"
CONVERT0_PROBE = "results/probe/long-input-convert0/long_probe.json"  # k=512 models, 0 fine-tuning steps
K512_PROBE = "results/probe/long-input-k512/long_probe.json"  # k=512 models, fine-tuned
OLD_PROBE = "results/probe/mechanisms/results.json"  # the old curriculum
REACH = "results/recipe/copy-reach"  # srformer copy-reach of the bases, one JSON per checkpoint and input
BBC = "results/compare/bbc-reading-base/results.json"  # 64-token outputs
BBC_MINI = "results/compare/bbc-mini-extract/results.json"  # the bart-mini oracle-extract model, 0 steps
SPM_8192 = "results/compare/sumpubmed-mini-extract-8192/results.json"  # the oracle recipe's bart-mini, 8,192 tokens
SPM_8192_SEED1 = "results/compare/sumpubmed-mini-extract-8192-seed1/results.json"  # the same from a second base
SPM_POOLED = "results/compare/sumpubmed-mini-extract-8192-seed1/pooled.json"  # both bases pooled
SPM_LED = "results/compare/sumpubmed-led-4096/results.json"  # the LED-shaped model, its own encoder, 4,096 tokens
FIDELITY_SPM = "results/fidelity/sumpubmed-8192/fidelity.json"  # teacher-forced, 0 steps, 8,192 tokens
FIDELITY_THIRD = "results/fidelity/sumpubmed-8192-third-base/fidelity.json"  # the same on a third base
SPM_THIRD = "results/compare/sumpubmed-mini-extract-8192-third-base/results.json"  # its ROUGE grid

GiB, MiB = 2**30, 2**20
K4, K16, K65, K262 = 4096, 16384, 65536, 262144
DECODER_LAYERS = 6  # t5-small's, the shape of every bench run: bench JSON counts all layers, the docs one

#: pick.json's quality columns, by their ``short`` name.
K128_100, K128_400, K512_0 = "k128 convert+100", "k128 convert+400", "k512 convert+0"
K512_100, K512_400, SCRATCH = "k512 convert+100", "k512 convert+400", "k128 scratch 1000"
CONVERTED = (K128_100, K128_400, K512_0, K512_100, K512_400)

Number = float | tuple[float, ...]


@dataclass(frozen=True)
class Claim:
    """Numbers of ``doc`` printed in ``snippet`` (module docstring) that ``values`` reads from ``source``'s JSON
    (one JSON argument per file when ``source`` names several)."""

    doc: str
    snippet: str
    source: str | tuple[str, ...]
    values: Callable[..., Sequence[Number]]

    @property
    def sources(self) -> tuple[str, ...]:
        return (self.source,) if isinstance(self.source, str) else self.source


# --- results/pick/pick.json: one row per mechanism, quality columns by label, costs, long-input columns ---------


def pick_row(pick: Any, name: str) -> Any:
    for row in pick["rows"]:
        if row["name"] == name:
            return row
    raise LookupError(f"no row {name!r}")


def _quality(pick: Any, name: str, column: str) -> Any:
    label = next((c["label"] for c in pick["columns"] if c["short"] == column), column)
    cell = pick_row(pick, name)["quality"].get(label)
    if cell is None:
        raise LookupError(f"{name!r} has no cell {column!r}")
    return cell


def off(pick: Any, name: str, column: str) -> float:
    """Off-segment token accuracy in %, the mean over seeds."""
    return 100 * float(_quality(pick, name, column)["off"])


def on(pick: Any, name: str, column: str) -> float:
    """On-segment token accuracy in %."""
    return 100 * float(_quality(pick, name, column)["on"])


def off_by_seed(pick: Any, name: str, column: str) -> tuple[float, ...]:
    return tuple(100 * value for value in _quality(pick, name, column)["off_by_seed"])


def gap(pick: Any, name: str, column: str) -> float:
    """The share of the segmented-to-full off-segment gap recovered (of the means over seeds)."""
    return float(_quality(pick, name, column)["gap_recovered"])


def seed_gap(pick: Any, name: str, column: str, seed: int) -> float:
    """The gap recovered by one seed, against ``full`` and ``segmented`` of the same seed."""
    index = _quality(pick, name, column)["seeds"].index(seed)
    full, segmented = (_quality(pick, ref, column) for ref in ("full", "segmented"))
    low = segmented["off_by_seed"][segmented["seeds"].index(seed)]
    high = full["off_by_seed"][full["seeds"].index(seed)]
    return float((_quality(pick, name, column)["off_by_seed"][index] - low) / (high - low))


def cost(pick: Any, name: str, key: str) -> float:
    """``step_ratio``, ``generate_ratio`` (× full's) or a ``*_bytes_per_layer`` in MiB."""
    value = pick_row(pick, name)[key]
    if value is None:
        raise LookupError(f"{name!r} has no {key}")
    return float(value) / (MiB if key.endswith("bytes_per_layer") else 1)


def long_recall(pick: Any, name: str, length: str) -> Any:
    return pick_row(pick, name)["long_recall"].get(f"recall {length} (convert+0)")


def long_time(pick: Any, name: str, length: str) -> Any:
    return pick_row(pick, name)["long_time"].get(f"ms/token {length} (× segmented)")


# --- results/long-input/**/long_input.json: one record per (kind, variant, length) -----------------------------


def record(run: Any, kind: str, length: int, variant: str | None = None) -> Any:
    for item in run["records"]:
        if item["kind"] == kind and item["length"] == length and item.get("variant") == variant:
            return item
    raise LookupError(f"no {kind} record of {variant} at {length}")


def ms_per_token(run: Any, variant: str, length: int) -> float:
    return 1000 * float(record(run, "decode", length, variant)["seconds_per_token"])


def time_ratio(run: Any, variant: str, length: int, reference: str = "segmented") -> float:
    """Time per token against ``reference``'s at the same length in the same run."""
    return ms_per_token(run, variant, length) / ms_per_token(run, reference, length)


def growth(run: Any, variant: str, start: int, end: int = K262) -> float:
    """Time per token at ``end`` against the same variant's at ``start``."""
    return ms_per_token(run, variant, end) / ms_per_token(run, variant, start)


def decode_bytes(run: Any, variant: str, length: int, key: str) -> float:
    """A decode record's ``peak_bytes`` (above the weights and the encoder output), ``state_bytes`` or
    ``estimated_bytes``."""
    return float(record(run, "decode", length, variant)[key])


def state_beyond_encoder(run: Any, variant: str, length: int) -> float:
    """A state that reads rows of the encoder output (``quest``, ``quest-tree``) counts that output once; the docs
    print it beyond the encoder output."""
    return decode_bytes(run, variant, length, "state_bytes") - record(run, "encode", length)["output_bytes"]


def first_token(run: Any, variant: str, length: int) -> float:
    return float(record(run, "decode", length, variant)["first_token_seconds"])


# --- results/bench/**/bench.json: one record per (variant, metric) -----------------------------------------------


def bench(records: Any, variant: str, metric: str) -> float:
    for item in records:
        if item["variant"] == variant and item["metric"] == metric:
            return float(item["value"])
    raise LookupError(f"no {metric} of {variant}")


def bench_at(records: Any, variant: str, metric: str, encoder_length: int) -> float:
    """A record's value at one encoder length (runs that measured several)."""
    for item in records:
        if (item["variant"], item["metric"], item["encoder_length"]) == (variant, metric, encoder_length):
            return float(item["value"])
    raise LookupError(f"no {metric} of {variant} at {encoder_length}")


def bench_step(records: Any, variant: str) -> float:
    """One layer's step time × full-sdpa's."""
    step = "cross_attention_step_time"
    return bench(records, variant, step) / bench(records, "full-sdpa", step)


def bench_generate(records: Any, variant: str, reference: str = "full-sdpa") -> float:
    """``generate()`` time × ``reference``'s (the inverse of the throughput ratio)."""
    return bench(records, reference, "generate_throughput") / bench(records, variant, "generate_throughput")


def bench_state_per_layer(records: Any, variant: str) -> float:
    return bench(records, variant, "cross_attention_cache_bytes") / DECODER_LAYERS / MiB


def beyond_decoder(records: Any, variant: str, length: int, metric: str = "persistent_bytes_per_token") -> float:
    """A mechanism's bytes per token beyond ``segmented``'s (the decoder's own) × ``full-sdpa``'s beyond it."""
    own = bench_at(records, "segmented", metric, length)
    return (bench_at(records, variant, metric, length) - own) / (bench_at(records, "full-sdpa", metric, length) - own)


def eager_over_persistent(records: Any, variant: str, length: int) -> float:
    """Eager bytes per token beyond the decoder's own × the persistent bytes beyond it."""
    own = (bench_at(records, "segmented", "bytes_per_token", length),
           bench_at(records, "segmented", "persistent_bytes_per_token", length))
    return ((bench_at(records, variant, "bytes_per_token", length) - own[0])
            / (bench_at(records, variant, "persistent_bytes_per_token", length) - own[1]))


# --- results/probe/**/long_probe.json and results.json: one record per cell (and length) ------------------------


def probe_off(probe: Any, name: str, length: int | None = None, seed: int | None = None) -> float:
    """Off-segment token accuracy in %, the mean over the matching records (every seed unless one is given)."""
    values = probe_offs(probe, name, length, seed)
    if not values:
        raise LookupError(f"no record of {name} at {length} (seed {seed})")
    return statistics.fmean(values)


def probe_offs(probe: Any, name: str, length: int | None = None, seed: int | None = None) -> tuple[float, ...]:
    # a record without a seed is of seed 0 (results/probe/long-input-k512 ran the seed-0 cells only)
    return tuple(100 * item["metrics"]["off_token_accuracy"] for item in probe["records"]
                 if item["name"] == name and length in (None, item["length"]) and seed in (None, item.get("seed", 0)))


def seed4_recall(c64: Any, exact: Any, pages: Any, full: Any) -> tuple[float, ...]:
    """Off-segment % at 64k and 262k on the fourth probe base (seed 4) of c64, the pick and ``full``, each record
    file one setting's; NaN (no claim holds) unless c64's equal the exact search's, as the sentence says."""
    def off_at(run: Any, length: int) -> float:
        return probe_off(run, run["records"][0]["name"], length, 4)

    if any(off_at(c64, k) != off_at(exact, k) for k in (K65, K262)):
        return (math.nan,) * 6
    return tuple(off_at(run, k) for run in (c64, pages, full) for k in (K65, K262))


# --- results/compare/*/results.json (srformer compare grids) -------------------------------------------------


def bbc_group(bbc: Any, name: str, segment_size: int = 32) -> Any:
    """The group of ``name`` at ``segment_size`` (``full`` and ``linear`` have none)."""
    for group in bbc["groups"]:
        if group["name"] == name and group["segment_size"] in (segment_size, None):
            return group
    raise LookupError(f"no group {name} at s={segment_size}")


def rouge1(bbc: Any, name: str, segment_size: int = 32) -> float:
    return float(bbc_group(bbc, name, segment_size)["rouge1"]["mean"])


def under_matched_lead(grid: Any, name: str, segment_size: int = 32) -> float:
    """How many ROUGE-1 points ``name``'s outputs score under the lead cut to their length (the paired mean)."""
    return -float(bbc_group(grid, name, segment_size)["baselines"]["minus_lead_matched"]["rouge1"]["mean"])


def reach(record: Any, key: str) -> float:
    """A copy-reach record's summary value ``key`` (``at_start``, ``elsewhere``, ``beyond_first_window``), in %."""
    return 100 * record["summary"][key]


def beyond_512(grid: Any, name: str) -> float:
    """The share (%) of ``name``'s copied sentences whose source starts at token 512 or later (windows of 128)."""
    positions = bbc_group(grid, name, 64)["reading"]["source_positions"]
    return 100 * sum(positions["histogram"][512 // positions["window"]:]) / positions["copied"]


def pooled_minus(pooled: Any, name: str) -> float:
    """``scripts/pool_compare_bases.py``'s pooled paired ROUGE-1 difference ``reference − name``."""
    for setting in pooled["settings"]:
        if setting["name"] == name:
            return float(setting["pooled"]["minus"]["rouge1"]["mean"])
    raise LookupError(f"no pooled setting {name}")


def paired_rouge1(grid: Any, reference: str, other: str) -> Any:
    """The paired ROUGE-1 difference ``reference − other`` of a compare grid (``mean``, ``low``, ``high``)."""
    for row in grid["paired"]:
        if row["reference"] == reference and row["other"] == other:
            return row["rouge1"]
    raise LookupError(f"no paired row {reference} − {other}")


def turned_around(difference: Any) -> tuple[float, float, float]:
    """A paired ``reference − other`` difference turned around: ``other − reference`` as (mean, low, high)."""
    return -difference["mean"], -difference["high"], -difference["low"]


def other_minus_reference(difference: Any) -> tuple[float, float, float]:
    """:func:`turned_around` as (mean, −low, high), the numbers of a text that prints ``+mean [−low, +high]``."""
    mean, low, high = turned_around(difference)
    return mean, -low, high


# --- The claims -------------------------------------------------------------------------------------------------


def loki_gap(loki: Any, exact: Any) -> float:
    """The largest off-segment shortfall (points) of ``knn-loki`` under the exact ``knn`` on the same bases, over
    every seed and length."""
    return max(probe_off(exact, "knn", item["length"], item["seed"]) - 100 * item["metrics"]["off_token_accuracy"]
               for item in loki["records"])


CLAIMS: list[Claim] = [
    # README, "Results": the table (the probe's seed 2 at 16k / 64k, 0 steps; bytes beyond the decoder at 65k; CPU
    # time per token at 65k against full's in the same run)
    *(Claim(README, f"| `{name}` | {{:.1f}} / {{:.1f}} | {{:.3f}} | {{:.2f}} |", (probe_file, cpu_file, *bytes_files),
            lambda probe, run, *records, name=name, probe_name=probe_name: (
                *(probe_off(probe, probe_name, k, 2) for k in (K16, K65)),
                beyond_decoder([item for part in records for item in part], name, K65),
                time_ratio(run, name, K65, "full")))
      for name, probe_file, probe_name, cpu_file, bytes_files in README_TABLE),
    Claim(README, "| `full` | {:.1f} / {:.1f} | {:.3f} |", (SEED2_PROBE, BYTES),
          lambda probe, records: (*(probe_off(probe, "full", k, 2) for k in (K16, K65)),
                                  beyond_decoder(records, "full-sdpa", K65))),
    Claim(README, "a state\n  of {:.2f}× `full`'s cache at 65k; on the route a GPU runs, {:.3f}× `full`'s bytes per "
          "token at 262k in {:.2f}× its calls",
          (PAGES_CPU, BYTES, PAGES_BYTES, BYTES_262K), lambda run, records, pages, longest: (
              state_beyond_encoder(run, "knn-loki-pages", K65) / decode_bytes(run, "full", K65, "state_bytes"),
              beyond_decoder(records + pages + longest, "knn-loki-pages", K262),
              bench_at(records + pages + longest, "knn-loki-pages", "operator_calls_per_token", K262)
              / bench_at(records + pages + longest, "full-sdpa", "operator_calls_per_token", K262))),
    Claim(README, "On a CPU `knn-loki-pages` takes {:.2f}× `full`'s time per token at 65k and {:.1f}× `segmented`'s",
          PAGES_CPU, lambda run: (time_ratio(run, "knn-loki-pages", K65, "full"),
                                  time_ratio(run, "knn-loki-pages", K65))),
    # the long-input pick, knn-loki-pages
    Claim(README, "recalls what the exact search recalls from a 64k-token input\nstraight after conversion and reads "
          "{:.2f}× full attention's bytes per token there",
          (BYTES, PAGES_BYTES), lambda records, pages: (beyond_decoder(records + pages, "knn-loki-pages", K65),)),
    Claim(CHOOSING, "Straight\n  after conversion it recalls within {:.1f} points of the exact `knn` on three seeds",
          (PAGES_PROBE, LOKI_EXACT), lambda pages, exact: (loki_gap(pages, exact),)),
    Claim(CHOOSING, "on the route a GPU runs a token reads {:.3f}× `full`'s bytes beyond the decoder's own at 65k",
          (BYTES, PAGES_BYTES), lambda records, pages: (beyond_decoder(records + pages, "knn-loki-pages", K65),)),
    Claim(CHOOSING, "in {:.3f}× its operator calls. On a CPU",
          (BYTES, PAGES_BYTES), lambda records, pages: (
              bench_at(pages, "knn-loki-pages", "operator_calls_per_token", K65)
              / bench_at(records, "full-sdpa", "operator_calls_per_token", K65),)),
    Claim(CHOOSING, "On a CPU it takes {:.2f}× `full`'s time per token at 65k and {:.1f}× `segmented`'s.",
          PAGES_CPU, lambda run: (time_ratio(run, "knn-loki-pages", K65, "full"),
                                  time_ratio(run, "knn-loki-pages", K65))),
    Claim(CHOOSING, "token reads {:.3f} / {:.3f} / {:.4f}× `full`'s bytes beyond the decoder's own at 16k / 65k / 262k",
          (BYTES, PAGES_BYTES, "results/bench/bytes/k262144/bench.json"),
          lambda records, pages, longest: tuple(beyond_decoder(records + pages + longest, "knn-loki-pages", k)
                                                for k in (K16, K65, K262))),
    Claim(CHOOSING, "cheaper than `full` per token\n  ({:.2f} / {:.2f} / {:.2f}× at 16k / 65k / 262k)",
          PAGES_CPU, lambda run: tuple(time_ratio(run, "knn-loki", k, "full") for k in (K16, K65, K262))),
    Claim(CHOOSING, "but {:.2f} / {:.2f} / {:.2f}× `segmented`'s\n  per token",
          PAGES_CPU, lambda run: tuple(time_ratio(run, "knn-loki", k) for k in (K16, K65, K262))),
    Claim(LONG_INPUTS, "| 33.9 / 46.5 / 86.9 ({:.1f} / {:.1f} / {:.1f}× `segmented`'s; {:.2f} / {:.2f} / {:.2f}× "
          "`full`'s) |",
          LOKI_CPU, lambda run: (*(time_ratio(run, "knn-loki", k) for k in (K16, K65, K262)),
                                 *(time_ratio(run, "knn-loki", k, "full") for k in (K16, K65, K262)))),
    Claim(CHOOSING, "Straight after conversion it recalls within {:.1f} points of the exact `knn` at",
          (LOKI_PROBE, LOKI_EXACT), lambda loki, exact: (loki_gap(loki, exact),)),
    Claim(CHOOSING, "a token reads {:.3f}× `full`'s bytes beyond the decoder's own at 65k tokens",
          (LOKI_BYTES, BYTES), lambda pages, records: (beyond_decoder(pages + records, "knn-loki", K65),)),
    Claim(CHOOSING, "moves {:.2f}× that eagerly, in {:.3f}× `full`'s operator calls",
          (LOKI_BYTES, BYTES), lambda pages, records: (
              eager_over_persistent(pages + records, "knn-loki", K65),
              bench_at(pages, "knn-loki", "operator_calls_per_token", K65)
              / bench_at(records, "full-sdpa", "operator_calls_per_token", K65))),
    Claim(CHOOSING, "on the route a GPU runs it moves {:.2f}× `full`'s bytes per token at 65k",
          BYTES, lambda records: (beyond_decoder(records, "quest-tree", K65, "bytes_per_token"),)),
    Claim(CHOOSING, "on the route a GPU runs it moves {:.2f}× `full`'s bytes per token at 65k, and",
          BYTES, lambda records: (beyond_decoder(records, "quest-tree", K65, "bytes_per_token"),)),
    # README, "Long inputs"
    Claim(CHOOSING, "A **262,144-token input is summarised end to end** by `srformer` with `lean_cache=True` in "
          "{:.0f} s "
          "({:.0f} s of it encoding); decoding needs {:.0f} MiB beyond the weights and the {:.0f} MiB encoder output.",
          LONG_BENCH, lambda run: (record(run, "end_to_end", K262, "srformer-lean")["seconds"],
                                   record(run, "encode", K262)["seconds"],
                                   decode_bytes(run, "srformer-lean", K262, "peak_bytes") / MiB,
                                   record(run, "encode", K262)["output_bytes"] / MiB)),
    Claim(CHOOSING, "`full` (SLED), `knn`, `block-topk` and `segmented` need {:.1f} GiB there, the paper's `srformer` "
          "layout {:.1f} GiB.",
          LONG_BENCH, lambda run: (tuple(decode_bytes(run, v, K262, "estimated_bytes") / GiB
                                         for v in ("full", "knn", "block-topk", "segmented")),
                                   decode_bytes(run, "srformer", K262, "estimated_bytes") / GiB)),
    Claim(CHOOSING, "At 1,048,576 tokens they are refused with their estimate ({:.0f}-{:.0f} GiB) before anything is "
          "allocated, while the streaming ones generate with at most {:.0f} MiB above the weights and the {:.0f} GiB "
          "encoder output.",
          LONG_BENCH_1M, lambda run: (
              min(r["estimated_bytes"] for r in run["records"] if r.get("refused")) / GiB,
              max(r["estimated_bytes"] for r in run["records"] if r.get("refused")) / GiB,
              max(decode_bytes(run, v, 2**20, "peak_bytes") for v in ("segmented-lean", "srformer-lean", "linear"))
              / MiB,
              record(run, "encode", 2**20)["output_bytes"] / GiB)),
    Claim(CHOOSING, "Time per token from 4k to 262k tokens: `linear` {:.2f}×, lean `segmented` {:.2f}×, lean "
          "`srformer` "
          "{:.2f}× ({:.2f}× from 16k on); `full` {:.0f}× and `knn` {:.0f}× (they score every key).",
          LONG_BENCH, lambda run: (growth(run, "linear", K4), growth(run, "segmented-lean", K4),
                                   growth(run, "srformer-lean", K4), growth(run, "srformer-lean", K16),
                                   growth(run, "full", K4), growth(run, "knn", K4))),
    Claim(CHOOSING, "`quest-tree` {:.0f} / {:.1f} / {:.1f}% at 2k / 16k / 64k, `full` over windows {:.0f} / {:.1f} / "
          "{:.1f}%, `knn` {:.0f}% throughout, `block-topk-b4` {:.0f} / {:.0f} / {:.0f}% and Quest itself (`quest`, "
          "pages of 16) {:.0f} / {:.0f} / {:.0f}% (one seed each).",
          CONVERT0_PROBE, lambda probe: (
              *(probe_off(probe, "quest-tree", k) for k in (2048, K16, K65)),
              *(probe_off(probe, "full", k) for k in (2048, K16, K65)),
              probe_offs(probe, "knn"),
              *(probe_off(probe, "block-topk-b4", k) for k in (2048, K16, K65)),
              *(probe_off(probe, "quest", k) for k in (2048, K16, K65)))),
    Claim(CHOOSING, "Fine-tuned `routing` falls to {:.0f}% at 16k",
          K512_PROBE, lambda probe: (probe_off(probe, "routing", K16),)),
    Claim(CHOOSING, "A third seed ([seed2](../results/probe/long-input-convert0/seed2/long_probe.md)), whose "
          "base itself "
          "loses facts beyond 512: `quest-tree` {:.0f} / {:.0f}% at 16k / 64k, `full` {:.0f} / {:.0f}%, `knn` {:.0f} / "
          "{:.0f}%;",
          SEED2_PROBE, lambda probe: tuple(probe_off(probe, name, k) for name in ("quest-tree", "full", "knn")
                                           for k in (K16, K65))),
    Claim(CHOOSING, "no tree; [results](../results/probe/long-input-convert0/quest-b2/long_probe.md)) {:.0f}% "
          "on seeds 0-1, "
          "{:.0f} / {:.0f}% on seed 2.",
          B2_PROBE, lambda probe: (min(probe_offs(probe, "quest-b2", seed=0) + probe_offs(probe, "quest-b2", seed=1)),
                                   probe_off(probe, "quest-b2", K16, 2), probe_off(probe, "quest-b2", K65, 2))),
    Claim(CHOOSING, "**keeps {:.3f}× full's state beyond the encoder output and starts in {:.2f}× its time at "
          "262k**, at "
          "{:.2f}× its CPU time per token.",
          ROWS_LONG_BENCH, lambda run: (state_beyond_encoder(run, "knn-rows", K262)
                                        / decode_bytes(run, "full", K262, "state_bytes"),
                                        first_token(run, "knn-rows", K262) / first_token(run, "full", K262),
                                        ms_per_token(run, "knn-rows", K262) / ms_per_token(run, "full", K262))),
    Claim(CHOOSING, "per token at 65k: `full` {:.0f}, `segmented` {:.0f}, `srformer` {:.0f}, `knn` {:.0f}, "
          "`block-topk-b4` {:.0f}, `knn-rows` {:,.0f}, `quest-b2` {:,.0f}, `quest-tree` {:,.0f};",
          OPERATORS, lambda records: tuple(bench_at(records, name, "operator_calls_per_token", K65) for name in (
              "full-sdpa", "segmented", "srformer", "knn", "block-topk-b4", "knn-rows", "quest-b2", "quest-tree"))),
    Claim(CHOOSING, "{:.1f} GiB instead of {:.1f} GiB at 262k, {:.0f} ms per token instead of {:.0f}, and it "
          "runs at 1M "
          "tokens where `knn` is refused",
          LONG_BENCH, lambda run: (decode_bytes(run, "knn-ivf", K262, "peak_bytes") / GiB,
                                   decode_bytes(run, "knn", K262, "peak_bytes") / GiB,
                                   ms_per_token(run, "knn-ivf", K262), ms_per_token(run, "knn", K262))),
    Claim(CHOOSING, "It is approximate: {:.0f}% recall on the probe up to 65k tokens",
          CONVERT0_PROBE, lambda probe: (probe_offs(probe, "knn (ivf, 32 probes)"),)),
    Claim(CHOOSING, "on news text it returns {:.0f}% of the exact top 32 keys at its default 32 probes ({:.0f}% "
          "at 128)",
          KNN_LAYOUTS, lambda layouts: tuple(
              100 * next(r["shared_ivf"]["recall"] for r in layouts["rows"]
                         if r["data"] == "bbc-bart" and r["length"] == K262 and r["probes"] == probes)
              for probes in (32, 128))),
    # README, "Results" (the table: results_table_row)
    Claim(CHOOSING, "recalls {:.1f}% off-segment at k=512 with no fine-tuning ({:.2f} of the gap after 400 "
          "steps; one of "
          "2 seeds {:.2f}), at {:.3f}× full's step",
          PICK, lambda pick: (off(pick, "block-topk-b4", K512_0), gap(pick, "block-topk-b4", K512_400),
                              seed_gap(pick, "block-topk-b4", K512_400, 1), cost(pick, "block-topk-b4", "step_ratio"))),
    Claim(CHOOSING, "On BBC News it scores ROUGE-1 {:.1f} (`full` {:.1f}, `block-topk` {:.1f})",
          BBC, lambda bbc: (rouge1(bbc, "block-topk-b4"), rouge1(bbc, "full"), rouge1(bbc, "block-topk"))),
    Claim(CHOOSING, "it matches `full` on every recall column and on BBC News ROUGE, at {:.2f}× full's step",
          PICK, lambda pick: (cost(pick, "knn", "step_ratio"),)),
    Claim(CHOOSING, "`block-topk` with whole segments as blocks steps at {:.2f}× but recovers only {:.2f} of "
          "the gap at "
          "k=512; `routing` and `reformer` recall {:.0f}% and {:.0f}% there after 400 steps ({:.0f}-{:.0f}% by seed) "
          "but do not read their own segment exactly (on-segment {:.0f}% and {:.0f}%), `reformer` at {:.2f}× full's "
          "step.",
          PICK, lambda pick: (
              cost(pick, "block-topk", "step_ratio"), gap(pick, "block-topk", K512_400),
              off(pick, "routing", K512_400), off(pick, "reformer", K512_400),
              min(off_by_seed(pick, "routing", K512_400) + off_by_seed(pick, "reformer", K512_400)),
              max(off_by_seed(pick, "routing", K512_400) + off_by_seed(pick, "reformer", K512_400)),
              on(pick, "routing", K512_400), on(pick, "reformer", K512_400), cost(pick, "reformer", "step_ratio"))),
    Claim(CHOOSING, "After conversion it recovers {:.2f} of the gap at k=128 ({:.2f} after 400 steps) and {:.2f} / "
          "{:.2f} at k=512, and its recurrent term costs on-segment accuracy ({:.0f}-{:.0f}%)",
          PICK, lambda pick: (
              gap(pick, "srformer", K128_100), gap(pick, "srformer", K128_400), gap(pick, "srformer", K512_100),
              gap(pick, "srformer", K512_400),
              min(on(pick, "srformer", c) for c in CONVERTED if c != K512_0),
              max(on(pick, "srformer", c) for c in CONVERTED if c != K512_0))),
    Claim(CHOOSING, "From scratch it reaches {:.1f}% at k=128, behind `linear`'s {:.1f}% and ahead of its own no-RAF "
          "ablation ({:.1f}%).",
          PICK, lambda pick: tuple(off(pick, name, SCRATCH) for name in ("srformer", "linear", "ablation-III"))),
    Claim(CHOOSING, "article: `full` {:.1f} ROUGE-1, {:.1f} under its matched lead, {:.0f}% of its copied "
          "sentences from "
          "beyond the first 128 tokens",
          BBC_MINI, lambda grid: (
              rouge1(grid, "full"), under_matched_lead(grid, "full"),
              100 * bbc_group(grid, "full")["reading"]["source_positions"]["beyond_first_window"])),
    Claim(README, "Teacher-forced at 8,192 tokens, `knn-loki-pages` picks `full`'s next token at {:.1f}% (perplexity "
          "{:.3f}×; 99% and 1.01× were aimed at: it reads 32 keys), `srformer` at {:.1f}%; `knn-loki-tail`, the pick's "
          "reads plus clusters standing for the keys not read, at {:.1f}% ({:.3f}×).",
          FIDELITY_SPM, lambda spm: (
              100 * spm["summary"]["knn-loki-pages"]["agreement"],
              spm["summary"]["knn-loki-pages"]["perplexity_ratio"],
              100 * spm["summary"]["srformer"]["agreement"], 100 * spm["summary"]["knn-loki-tail"]["agreement"],
              spm["summary"]["knn-loki-tail"]["perplexity_ratio"])),
    Claim(CHOOSING, "pick scores: {:.4f}× `full`'s perplexity and {:.2f}% agreement, both the pick's, and ROUGE-1 "
          "+{:.2f} [+{:.2f}, +{:.2f}]",
          (FIDELITY_THIRD, SPM_THIRD), lambda spm, grid: (
              spm["summary"]["knn-loki-pages-c64"]["perplexity_ratio"],
              100 * spm["summary"]["knn-loki-pages-c64"]["agreement"],
              *turned_around(paired_rouge1(grid, "full", "knn-loki-pages-c64")))),
    Claim(LONG_INPUTS, "  - seed 4, a fourth base, at 64k / 262k: {:.0f} / {:.0f}, the exact search's (the pick: "
          "{:.1f} / {:.0f}; `full`: {:.1f} /\n    {:.1f}).",
          tuple(f"{SEED4}/{part}/long_probe.json" for part in ("c64", "knn", "pages", "full")),
          seed4_recall),
    Claim(LONG_INPUTS, "teacher-forced, {:.4f}× `full`'s perplexity and {:.2f}% argmax agreement, the pick's to four "
          "decimals", FIDELITY_THIRD, lambda spm: tuple(  # each number is c64's and the pick's
              tuple(scale * spm["summary"][name][key] for name in ("knn-loki-pages-c64", "knn-loki-pages"))
              for key, scale in (("perplexity_ratio", 1), ("agreement", 100)))),
    Claim(README, "`knn-loki-pages` on an LED-shaped model reading 4,096 tokens whole (+{:.2f} [−{:.2f}, +{:.2f}] "
          "ROUGE-1)",
          SPM_LED, lambda grid: other_minus_reference(paired_rouge1(grid, "full", "knn-loki-pages"))),
    Claim(CHOOSING, "`quest-tree` ({:.1f}) and `knn` ({:.1f}) keep `full`'s score, `srformer` {:.1f}, `block-topk-b4` "
          "{:.1f} and `segmented` {:.1f} lose about 4, `linear` {:.1f} does not read",
          BBC_MINI, lambda grid: tuple(rouge1(grid, name) for name in (
              "quest-tree", "knn", "srformer", "block-topk-b4", "segmented", "linear"))),
    Claim(CHOOSING, "the first 8,192 tokens of 300 papers: `full` scores {:.1f} and {:.1f} ROUGE-1, above its matched "
          "lead by {:.1f} and\n",
          (SPM_8192, SPM_8192_SEED1), lambda grid, second: (rouge1(grid, "full", 64), rouge1(second, "full", 64),
                                                            -under_matched_lead(grid, "full", 64))),
    Claim(CHOOSING, "\n{:.1f} (intervals above 0), but {:.0f}% and {:.0f}% of the sentences it copies come from beyond "
          "512 tokens",
          (SPM_8192, SPM_8192_SEED1), lambda grid, second: (-under_matched_lead(second, "full", 64),
                                                            beyond_512(grid, "full"), beyond_512(second, "full"))),
    Claim(CHOOSING, "keep its score (pooled `full` − them: {:.1f} and +{:.1f}), `segmented` loses {:.1f} and "
          "`block-topk-b4` {:.1f}",
          SPM_POOLED, lambda pooled: tuple(pooled_minus(pooled, name)
                                           for name in ("quest-tree", "knn", "segmented", "block-topk-b4"))),
    Claim(CHOOSING, "(+{:.1f}, +{:.1f}, +{:.1f} ROUGE-1 at s = 64, 32, 16;",
          BBC, lambda bbc: tuple(rouge1(bbc, "srformer", s) - rouge1(bbc, "segmented", s) for s in (64, 32, 16))),
    # docs/choosing.md, "The answer"
    Claim(CHOOSING, "With **no fine-tuning** it recalls {:.1f}% off-segment at k=512 (2 seeds; {:.0f}% on-segment)",
          PICK, lambda pick: (off(pick, "quest-tree", K512_0), on(pick, "quest-tree", K512_0))),
    Claim(CHOOSING, "and at 2k / 16k / 64k tokens {:.1f} / {:.1f} / {:.1f}% (2 seeds), where `full` over windows keeps "
          "{:.1f} / {:.1f} / {:.1f}% and `knn` {:.0f}%",
          CONVERT0_PROBE, lambda probe: (*(probe_off(probe, name, k) for name in ("quest-tree", "full")
                                           for k in (2048, K16, K65)), probe_offs(probe, "knn"))),
    Claim(CHOOSING, "{:.1f} GiB of state at 262k tokens against full attention's {:.1f} GiB. **It is not yet cheap per "
          "token on a CPU**: {:.1f}×, {:.1f}× and {:.1f}× `segmented`'s time per token at 16k, 65k and 262k tokens "
          "({:.2f}× `full`'s at 262k, {:.2f}× at 16k)",
          QUEST_CPU_BUILD, lambda run: (
              state_beyond_encoder(run, "quest-tree", K262) / GiB, decode_bytes(run, "full", K262, "state_bytes") / GiB,
              *(time_ratio(run, "quest-tree", k) for k in (K16, K65, K262)),
              time_ratio(run, "quest-tree", K262, "full"), time_ratio(run, "quest-tree", K16, "full"))),
    Claim(CHOOSING, "its first token at 262k waits {:.0f} s for\n  the tree, {:.1f}× `full`'s in the same run",
          QUEST_CPU_BUILD, lambda run: (first_token(run, "quest-tree", K262),
                                        first_token(run, "quest-tree", K262) / first_token(run, "full", K262))),
    Claim(CHOOSING, "At k=4096 and batch 8 its step costs {:.2f}× full's (and `generate()` {:.2f}× full's time",
          QUEST_BENCH, lambda records: (bench_step(records, "quest-tree"), bench_generate(records, "quest-tree"))),
    Claim(CHOOSING, "Straight after conversion it recalls {:.1f}% off-segment at k=512 (2 seeds: {:.1f} and {:.1f}); "
          "after 400 fine-tuning steps {:.1f}% ({:.2f} of the segmented-to-full gap; 2 seeds, {:.1f}% and {:.1f}%) "
          "with its segment exact ({:.0f}% on-segment); after 100 steps {:.1f}% ({:.2f}); at k=128 {:.1f}% (2 seeds). "
          "Its step costs {:.3f}× full's and `generate()` {:.2f}× full's time. It keeps every key and value plus one "
          "mean key per 4 positions ({:.0f} MiB per layer here against full's {:.0f}).",
          PICK, lambda pick: (
              off(pick, "block-topk-b4", K512_0), *off_by_seed(pick, "block-topk-b4", K512_0),
              off(pick, "block-topk-b4", K512_400), gap(pick, "block-topk-b4", K512_400),
              *off_by_seed(pick, "block-topk-b4", K512_400), on(pick, "block-topk-b4", K512_400),
              off(pick, "block-topk-b4", K512_100), gap(pick, "block-topk-b4", K512_100),
              (off(pick, "block-topk-b4", K128_100), off(pick, "block-topk-b4", K128_400)),
              cost(pick, "block-topk-b4", "step_ratio"), cost(pick, "block-topk-b4", "generate_ratio"),
              cost(pick, "block-topk-b4", "state_bytes_per_layer"), cost(pick, "full", "state_bytes_per_layer"))),
    Claim(CHOOSING, "On BBC News it scores ROUGE-1 {:.2f} ± {:.2f} (2 seeds; `full` {:.2f}, `knn` {:.2f}, `block-topk` "
          "{:.2f}, `segmented` {:.2f}; {:.0f} of {:.0f} summaries distinct)",
          BBC, lambda bbc: (rouge1(bbc, "block-topk-b4"), bbc_group(bbc, "block-topk-b4")["rouge1"]["std"],
                            *(rouge1(bbc, name) for name in ("full", "knn", "block-topk", "segmented")),
                            bbc_group(bbc, "block-topk-b4")["distinct_outputs"],
                            bbc_group(bbc, "block-topk-b4")["num_documents"])),
    Claim(CHOOSING, "Beyond its fine-tuning length it loses facts ({:.0f}% at 16k tokens after 400 steps;",
          K512_PROBE, lambda probe: (probe_off(probe, "block-topk-b4", K16),)),
    Claim(CHOOSING, "{:.0f}% at 2k, {:.0f}% at 16k and {:.0f}% at 64k tokens straight after conversion",
          CONVERT0_PROBE, lambda probe: tuple(probe_off(probe, "block-topk-b4", k) for k in (2048, K16, K65))),
    Claim(CHOOSING, "It recalls as well as `full` in every column ({:.1f}-{:.0f}% off-segment, {:.0f}% on-segment, at "
          "k=128 and k=512)",
          PICK, lambda pick: (min(off(pick, "knn", c) for c in CONVERTED), max(off(pick, "knn", c) for c in CONVERTED),
                              tuple(on(pick, "knn", c) for c in CONVERTED))),
    Claim(CHOOSING, "on BBC News it ties `full` (ROUGE-1 {:.1f} against {:.1f})",
          BBC, lambda bbc: (rouge1(bbc, "knn"), rouge1(bbc, "full"))),
    Claim(CHOOSING, "so its step costs {:.2f}× full's and `generate()` {:.2f}× full's time, with full's state",
          PICK, lambda pick: (cost(pick, "knn", "step_ratio"), cost(pick, "knn", "generate_ratio"))),
    Claim(CHOOSING, "is cheaper still, {:.2f}× full's step and {:.2f}× its `generate()` time",
          PICK, lambda pick: (cost(pick, "block-topk", "step_ratio"), cost(pick, "block-topk", "generate_ratio"))),
    Claim(CHOOSING, "It recovers {:.2f} of the off-segment gap at k=128 ({:.2f} after 400 steps) but only {:.2f} at "
          "k=512 ({:.2f} after 400; 2 seeds each)",
          PICK, lambda pick: tuple(gap(pick, "block-topk", c) for c in (K128_100, K128_400, K512_100, K512_400))),
    Claim(CHOOSING, "On BBC News it gains {:.1f} ROUGE-1 over `segmented` where `knn` gains {:.1f}.",
          BBC, lambda bbc: tuple(rouge1(bbc, name) - rouge1(bbc, "segmented") for name in ("block-topk", "knn"))),
    Claim(CHOOSING, "exact on its segment at {:.2f}× full's step.",
          PICK, lambda pick: (cost(pick, "segmented", "step_ratio"),)),
    Claim(CHOOSING, "`knn` and `block-topk-b4` recall {:.1f}-{:.0f}%, `block-topk` {:.1f}% with its segment exact "
          "({:.0f}% on-segment), `reformer` {:.1f}%; `linear` attention's memory {:.1f}% at {:.2f}× full's step with "
          "{:.0f} MiB of state per layer, `inducing` {:.1f}%. `srformer` reaches {:.1f}% and its variants "
          "{:.1f}-{:.1f}% (`-two-sided`, `-sigma`, `-surrogate`), `srformer-gated-taylor` {:.1f}% with exact segments.",
          PICK, lambda pick: (
              min(off(pick, name, SCRATCH) for name in ("knn", "block-topk-b4")),
              max(off(pick, name, SCRATCH) for name in ("knn", "block-topk-b4")),
              off(pick, "block-topk", SCRATCH), on(pick, "block-topk", SCRATCH), off(pick, "reformer", SCRATCH),
              off(pick, "linear", SCRATCH), cost(pick, "linear", "step_ratio"),
              cost(pick, "linear", "state_bytes_per_layer"), off(pick, "inducing", SCRATCH),
              off(pick, "srformer", SCRATCH),
              min(off(pick, f"srformer-{v}", SCRATCH) for v in ("two-sided", "sigma", "surrogate")),
              max(off(pick, f"srformer-{v}", SCRATCH) for v in ("two-sided", "sigma", "surrogate")),
              off(pick, "srformer-gated-taylor", SCRATCH))),
    Claim(CHOOSING, "at k=512 after 400 steps its own no-RAF ablation recalls more ({:.1f}% against {:.1f}%, 2 seeds) "
          "for the same cost. After conversion it recovers {:.2f} of the gap at k=128 ({:.2f} after 400 steps) and "
          "little at k=512 ({:.2f} after 100 steps, {:.2f} after 400), and its unnormalised recurrent term costs "
          "on-segment accuracy ({:.0f}-{:.0f}% against",
          PICK, lambda pick: (
              off(pick, "ablation-III", K512_400), off(pick, "srformer", K512_400),
              *(gap(pick, "srformer", c) for c in (K128_100, K128_400, K512_100, K512_400)),
              min(on(pick, "srformer", c) for c in CONVERTED if c != K512_0),
              max(on(pick, "srformer", c) for c in CONVERTED if c != K512_0))),
    Claim(CHOOSING, "Its variants move it little (`srformer-two-sided`, `-surrogate`, `-sigma`: {:.2f}-{:.2f} at "
          "k=128)",
          PICK, lambda pick: (min(gap(pick, f"srformer-{v}", K128_100) for v in ("two-sided", "surrogate", "sigma")),
                              max(gap(pick, f"srformer-{v}", K128_100) for v in ("two-sided", "surrogate", "sigma")))),
    Claim(CHOOSING, "while staying {:.0f} ROUGE-1 under `full`.",
          BBC, lambda bbc: (rouge1(bbc, "full") - rouge1(bbc, "srformer"),)),
    Claim(CHOOSING, "(after 400 steps {:.1f}% and {:.1f}% off-segment against {:.1f}%, 2 seeds each; both vary with "
          "the seed: `reformer` {:.1f}% and {:.1f}%, `routing` {:.1f}% and {:.1f}%), and `reformer`'s step is the "
          "cheapest of the accurate ones ({:.2f}× full's), but neither reads its own segment exactly (on-segment "
          "{:.0f}% and {:.0f}% at k=512 after 400 steps), and `block-topk-b4` recalls more than `routing` ({:.1f}% "
          "against {:.1f}% over the same two seeds) at a cheaper step ({:.3f}× against {:.2f}× full's)",
          PICK, lambda pick: (
              off(pick, "reformer", K512_400), off(pick, "routing", K512_400), off(pick, "block-topk", K512_400),
              *off_by_seed(pick, "reformer", K512_400), *off_by_seed(pick, "routing", K512_400),
              cost(pick, "reformer", "step_ratio"), on(pick, "reformer", K512_400), on(pick, "routing", K512_400),
              off(pick, "block-topk-b4", K512_400), off(pick, "routing", K512_400),
              cost(pick, "block-topk-b4", "step_ratio"), cost(pick, "routing", "step_ratio"))),
    # docs/choosing.md, "What was aimed for, and what was measured"
    Claim(CHOOSING, "`block-topk-b4` {:.2f} (100 steps), {:.2f} (400; 2 seeds: {:.2f} and {:.2f}); `knn` {:.2f} (100 "
          "and 400; 2 seeds); `routing` {:.2f} (100 steps), {:.2f} (400; seeds {:.2f} and {:.2f}); `reformer` {:.2f} "
          "(100), {:.2f} (400; seeds {:.2f} and {:.2f}); `block-topk` {:.2f} (100), {:.2f} (400); `srformer` {:.2f} "
          "(100), {:.2f} (400); `srformer-two-sided` {:.2f} (100), {:.2f} (400); `ablation-III` {:.2f} (100), {:.2f} "
          "(400); `linear` {:.2f} (100), {:.2f} (400); `srformer-gated` {:.2f} (100), {:.2f} (400); every value here "
          "the mean of 2 seeds",
          PICK, lambda pick: (
              gap(pick, "block-topk-b4", K512_100), gap(pick, "block-topk-b4", K512_400),
              *(seed_gap(pick, "block-topk-b4", K512_400, seed) for seed in (0, 1)),
              (gap(pick, "knn", K512_100), gap(pick, "knn", K512_400)),
              *(value for name in ("routing", "reformer") for value in (
                  gap(pick, name, K512_100), gap(pick, name, K512_400),
                  seed_gap(pick, name, K512_400, 0), seed_gap(pick, name, K512_400, 1))),
              *(gap(pick, name, c) for name in ("block-topk", "srformer", "srformer-two-sided", "ablation-III",
                                                "linear", "srformer-gated") for c in (K512_100, K512_400)))),
    Claim(CHOOSING, "`block-topk-b4` {:.0f}, `knn` {:.0f} and `block-topk` {:.0f} against {:.0f}; `routing` {:.0f} "
          "(400 steps, 2 seeds), `reformer` {:.0f} (400 steps)",
          PICK, lambda pick: tuple(on(pick, name, K512_400) for name in ("block-topk-b4", "knn", "block-topk",
                                                                        "segmented", "routing", "reformer"))),
    Claim(CHOOSING, "`block-topk-b4` {:.3f}× (0.251× in another run), `knn` {:.2f}×, `block-topk` {:.2f}×, `reformer` "
          "{:.2f}×, `routing` {:.2f}×",
          PICK, lambda pick: tuple(cost(pick, name, "step_ratio") for name in ("block-topk-b4", "knn", "block-topk",
                                                                              "reformer", "routing"))),
    Claim(CHOOSING, "`block-topk-b4`: {:.2f} of the gap (2 seeds), {:.0f}% on-segment, {:.3f}× full's step",
          PICK, lambda pick: (gap(pick, "block-topk-b4", K512_400), on(pick, "block-topk-b4", K512_400),
                              cost(pick, "block-topk-b4", "step_ratio"))),
    Claim(CHOOSING, "(one seed {:.2f} of the gap; its step 0.251× in another run)",
          PICK, lambda pick: (seed_gap(pick, "block-topk-b4", K512_400, 1),)),
    Claim(CHOOSING, "elu+1: {:.1f}% (on {:.0f}%); Taylor features: {:.1f}% (on {:.1f}%); `linear` {:.1f}% | no (Taylor "
          "is {:.1f}× elu, still {:.0f} points short)",
          PICK, lambda pick: (
              off(pick, "srformer-gated", SCRATCH), on(pick, "srformer-gated", SCRATCH),
              off(pick, "srformer-gated-taylor", SCRATCH), on(pick, "srformer-gated-taylor", SCRATCH),
              off(pick, "linear", SCRATCH),
              off(pick, "srformer-gated-taylor", SCRATCH) / off(pick, "srformer-gated", SCRATCH),
              off(pick, "linear", SCRATCH) - off(pick, "srformer-gated-taylor", SCRATCH))),
    Claim(CHOOSING, "`srformer` {:.1f}% against `ablation-III` {:.1f}% off-segment at k=128 (2 seeds);",
          PICK, lambda pick: (off(pick, "srformer", SCRATCH), off(pick, "ablation-III", SCRATCH))),
    Claim(CHOOSING, "under the old curriculum `ablation-III` led ({:.1f} against {:.1f})",
          OLD_PROBE, lambda probe: tuple(
              100 * next(r["metrics"]["off_token_accuracy"] for r in probe["records"]
                         if r["protocol"] == "scratch" and r["name"] == name)
              for name in ("ablation-III", "srformer"))),
    Claim(CHOOSING, "`quest-tree` {:.1f} / {:.1f} / {:.1f}% (2 seeds; {:.1f} / {:.1f} / {:.1f} and {:.1f} / {:.1f} / "
          "{:.1f}), on-segment {:.0f}% at 512 and 2k tokens; `full` over windows {:.1f} / {:.1f} / {:.1f}%, `knn` "
          "{:.0f}% throughout | no at 64k tokens: {:.1f} points short on the mean, {:.1f} on seed 1 (`full` itself is "
          "{:.1f} short)",
          (CONVERT0_PROBE, PICK), lambda probe, pick: (
              *(probe_off(probe, "quest-tree", k) for k in (2048, K16, K65)),
              *(probe_off(probe, "quest-tree", k, seed) for seed in (0, 1) for k in (2048, K16, K65)),
              (on(pick, "quest-tree", K512_0), *(100 * r["metrics"]["on_token_accuracy"] for r in probe["records"]
                                                 if r["name"] == "quest-tree" and r["length"] == 2048)),
              *(probe_off(probe, "full", k) for k in (2048, K16, K65)), probe_offs(probe, "knn"),
              99 - probe_off(probe, "quest-tree", K65), 99 - probe_off(probe, "quest-tree", K65, 1),
              99 - probe_off(probe, "full", K65))),
    Claim(CHOOSING, "| {:.2f}×, {:.2f}×, {:.2f}× (side by side, one thread next to one other job, [default-allocator]"
          "(../results/long-input/default-allocator/long_input.md)); {:.2f}×, {:.2f}×, {:.2f}× in an earlier run under "
          "a pinned allocator ([results/long-input/quest](../results/long-input/quest/long_input.md)) | no: "
          "{:.0f}-{:.0f} ms more per layer and step",
          (QUEST_CPU_BUILD, QUEST_LONG_BENCH), lambda run, pinned: (
              *(time_ratio(run, "quest-tree", k) for k in (K16, K65, K262)),
              *(time_ratio(pinned, "quest-tree", k) for k in (K16, K65, K262)),
              *((ms_per_token(run, "quest-tree", k) - ms_per_token(run, "segmented", k)) / DECODER_LAYERS
                for k in (K16, K262)))),
    *(Claim(LONG_INPUTS, f"| {k:,} | {{:.1f}} → {{:.1f}} | {{:.1f}} → {{:.1f}} | {{:.1f}} ({{:.1f}}×) → {{:.1f}} "
            "({:.1f}×) | {:.1f} ({:.1f}×) → {:.1f} ({:.1f}×) |",
            (CPU_EAGER, CPU_COMPILED), lambda eager, compiled, k=k: (
                *(ms_per_token(run, "full", k) for run in (eager, compiled)),
                *(ms_per_token(run, "segmented", k) for run in (eager, compiled)),
                *(value for name in ("knn-rows", "quest-tree") for run in (eager, compiled)
                  for value in (ms_per_token(run, name, k), time_ratio(run, name, k)))))
      for k in (K16, K65, K262)),
    Claim(CHOOSING, "| {:.2f}× ({:.2f} against {:.1f} ms, batch 1,",
          QUEST_BENCH_65K, lambda records: (
              bench_step(records, "quest-tree"), bench(records, "quest-tree", "cross_attention_step_time"),
              bench(records, "full-sdpa", "cross_attention_step_time"))),
    Claim(CHOOSING, "state {:.1f} GiB (float16 leaf bounds; no keys or values); peak {:.1f} GiB while the tree is "
          "built, one head at a time ({:.1f} GiB with every head at once;",
          (QUEST_QUIET, QUEST_LONG_BENCH), lambda quiet, run: (
              state_beyond_encoder(quiet, "quest-tree", K262) / GiB,
              decode_bytes(quiet, "quest-tree", K262, "peak_bytes") / GiB,
              decode_bytes(run, "quest-tree", K262, "peak_bytes") / GiB)),
    Claim(CHOOSING, "the state yes; the peak no, by {:.1f} GiB",
          QUEST_QUIET, lambda quiet: (decode_bytes(quiet, "quest-tree", K262, "peak_bytes") / GiB - 2,)),
    Claim(CHOOSING, "the estimate counts `quest`'s bounds ({:.1f} GiB of states at 262k for `quest-tree`)",
          QUEST_LONG_BENCH, lambda run: (decode_bytes(run, "quest-tree", K262, "estimated_bytes") / GiB,)),
    Claim(CHOOSING, "| step {:.2f}× full's, `generate()` {:.2f}× `segmented`'s time",
          QUEST_BENCH, lambda records: (bench_step(records, "quest-tree"),
                                        bench_generate(records, "quest-tree", "segmented"))),
    Claim(CHOOSING, "cuts that on long inputs ({:.0f} instead of {:.0f} ms per generated token at 262,144 tokens)",
          LONG_BENCH, lambda run: (ms_per_token(run, "knn-ivf", K262), ms_per_token(run, "knn", K262))),
    Claim(CHOOSING, "at k=512 after 400 steps `routing` {:.1f}% and {:.1f}%, `reformer` {:.1f}% and {:.1f}%, "
          "`performer` {:.1f}% and {:.1f}%.",
          PICK, lambda pick: tuple(value for name in ("routing", "reformer", "performer")
                                   for value in off_by_seed(pick, name, K512_400))),
    # docs/long-inputs.md, "Long-input benchmark": the quiet run's table, the same-run table of quest and its kin
    *(Claim(LONG_INPUTS, f"| {label} | {{:.0f}} {'MiB → {:.1f} GiB' if big else '→ {:.0f} MiB'} | {{:.1f}} → {{:.1f}} "
            "→ {:.1f} | {:.1f} s |",
            LONG_BENCH, lambda run, v=variant, big=big: (
                decode_bytes(run, v, K4, "peak_bytes") / MiB, decode_bytes(run, v, K262, "peak_bytes") / (
                    GiB if big else MiB),
                *(ms_per_token(run, v, k) for k in (K4, K16, K262)), first_token(run, v, K262)))
      for label, variant, big in (
          ("`full` (SLED)", "full", True), ("`knn`", "knn", True), ('`knn`, `knn_index="flat"`', "knn-flat", True),
          ('`knn`, `knn_index="ivf"` (32 probes)', "knn-ivf", True), ("`block-topk`", "block-topk", True),
          ("`segmented`", "segmented", True), ("`srformer`", "srformer", True),
          ("`segmented` + `lean_cache`", "segmented-lean", False),
          ("`srformer` + `lean_cache`", "srformer-lean", False),
          ("`linear`", "linear", False))),
    *(Claim(LONG_INPUTS, f"| {label} | {{:.1f}} → {{:.1f}} → {{:.1f}} → {{:.1f}} | {ratios} | {{:.1f}} GiB | "
            "{:.1f} GiB | {:.1f} s |",
            QUEST_LONG_BENCH, lambda run, v=variant, reference=(variant == "segmented"): (
                *(ms_per_token(run, v, k) for k in (K4, K16, K65, K262)),
                *(() if reference else (time_ratio(run, v, k) for k in (K16, K65, K262))),
                decode_bytes(run, v, K262, "peak_bytes") / GiB,
                (state_beyond_encoder(run, v, K262) if v.startswith("quest")
                 else decode_bytes(run, v, K262, "state_bytes")) / GiB,
                first_token(run, v, K262)))
      for label, variant, ratios in (
          ("`full` (SLED)", "full", "{} / {} / {}"), ("`segmented`", "segmented", "1"),
          ("`block-topk-b4`", "block-topk-b4", "{:.2f} / {:.2f} / {:.2f}"),
          ("`quest` (pages of 16)", "quest", "{:.2f} / {:.2f} / {:.2f}"),
          ("`quest-tree`", "quest-tree", "{:.2f} / {:.2f} / {:.2f}"))),
    Claim(LONG_INPUTS, "their state at 262,144 tokens is the bounds, {:.1f} GiB for `quest-tree` (leaves of 2, "
          "float16) against the {:.1f} GiB of keys and values that `full` and `segmented` keep",
          QUEST_LONG_BENCH, lambda run: (state_beyond_encoder(run, "quest-tree", K262) / GiB,
                                         tuple(decode_bytes(run, v, K262, "state_bytes") / GiB
                                               for v in ("full", "segmented")))),
    Claim(LONG_INPUTS, "{:.1f} GiB peak, {:.0f} s to the first token, {:.1f} ms per token against `segmented`'s {:.1f} "
          "({:.1f}×)",
          QUEST_QUIET, lambda run: (decode_bytes(run, "quest-tree", K262, "peak_bytes") / GiB,
                                    first_token(run, "quest-tree", K262), ms_per_token(run, "quest-tree", K262),
                                    ms_per_token(run, "segmented", K262), time_ratio(run, "quest-tree", K262))),
    Claim(LONG_INPUTS, "Per token `quest-tree` is {:.1f}-{:.1f}× `segmented` here: {:.0f} ms more per layer and step "
          "at 16,384 tokens, {:.0f} ms at 65,536 and {:.0f} ms at 262,144",
          QUEST_LONG_BENCH, lambda run: (
              min(time_ratio(run, "quest-tree", k) for k in (K16, K65, K262)),
              max(time_ratio(run, "quest-tree", k) for k in (K16, K65, K262)),
              *((ms_per_token(run, "quest-tree", k) - ms_per_token(run, "segmented", k)) / DECODER_LAYERS
                for k in (K16, K65, K262)))),
    Claim(LONG_INPUTS, "That is {:.2f}× `full`'s time at 262,144 tokens and {:.2f}× at 65,536",
          QUEST_LONG_BENCH, lambda run: tuple(time_ratio(run, "quest-tree", k, "full") for k in (K262, K65))),
    Claim(LONG_INPUTS, "{:.0f} s ({:.0f} s quiet) at 262,144 tokens",
          (QUEST_LONG_BENCH, QUEST_QUIET), lambda run, quiet: (first_token(run, "quest-tree", K262),
                                                               first_token(quiet, "quest-tree", K262))),
    Claim(LONG_INPUTS, "lean `segmented`, lean `srformer` and `linear` generate with {:.0f}, {:.0f} and {:.0f} MiB of "
          "decode-time peak above the weights and the {:.0f} GiB encoder output",
          LONG_BENCH_1M, lambda run: (
              *(decode_bytes(run, v, 2**20, "peak_bytes") / MiB for v in ("segmented-lean", "srformer-lean", "linear")),
              record(run, "encode", 2**20)["output_bytes"] / GiB)),
    Claim(LONG_INPUTS, "From 4k to 262k tokens: `linear` {:.2f}×, `segmented` + lean {:.2f}×, `srformer` + lean "
          "{:.2f}×",
          LONG_BENCH, lambda run: tuple(growth(run, v, K4) for v in ("linear", "segmented-lean", "srformer-lean"))),
    Claim(LONG_INPUTS, "from 16k to 262k it grows {:.2f}×.",
          LONG_BENCH, lambda run: (growth(run, "srformer-lean", K16),)),
    Claim(LIMITATIONS, "they continue {:.1f}-{:.1f}% of the passages that start after token 0; bart-mini bases "
          "{:.0f}% (BBC) and {:.0f}%",
          (f"{REACH}/sumpubmed-base-512.json", f"{REACH}/bbc-base.json", f"{REACH}/bbc-mini-passage-128.json",
           f"{REACH}/sumpubmed-mini-passage-128.json"),
          lambda whole, bbc, mini, spm: (reach(whole, "elsewhere"), reach(bbc, "elsewhere"), reach(mini, "elsewhere"),
                                         reach(spm, "elsewhere"))),
    Claim(LIMITATIONS, "within 128 tokens, {:.0f}-{:.0f}% across windows of 128",
          (f"{REACH}/sumpubmed-mini-passage-1024w128.json", f"{REACH}/bbc-mini-passage-768w128.json"),
          lambda spm, bbc: (reach(spm, "beyond_first_window"), reach(bbc, "beyond_first_window"))),
]


# --- The probe table with its costs (docs/choosing.md) ---------------------------------------------------------------

TABLE_HEADER = "| mechanism | k=128, 100 steps: off / on |"
QUIET_RUN = LONG_BENCH  # footnote ¹: the quiet long-input run


@dataclass(frozen=True)
class Cell:
    """One cell of a derived table row: its text with placeholders, the values that fill them and their file."""

    snippet: str
    values: tuple[Number, ...] = ()
    source: str = PICK


def results_table_row(pick: Any, quest_bench: Any, name: str) -> list[Cell]:
    """The probe table's row of ``name``, from ``pick.json``: the quality columns (off / on in %), the
    long-input recall and time columns, and the costs; a row that pick.json has no cost for (``quest-tree``) takes
    it from results/bench/quest (footnote ³)."""
    row = pick_row(pick, name)
    # k=128, 100 steps: off / on
    cells = [Cell("{:.1f} / {:.1f}", (off(pick, name, K128_100), on(pick, name, K128_100)))
             if _has(pick, name, K128_100) else Cell("-")]
    # k=512: off after 0 / 100 / 400 steps, "-" where not run, and on-segment after the last that was
    present = [c for c in (K512_0, K512_100, K512_400) if _has(pick, name, c)]
    if present:
        after = "" if present[-1] == K512_400 else f" after {present[-1].rsplit('+', 1)[1]}"
        offs = " / ".join("{:.1f}" if c in present else "-" for c in (K512_0, K512_100, K512_400))
        cells.append(Cell(f"{offs} ({{:.1f}}{after})",
                          (*(off(pick, name, c) for c in present), on(pick, name, present[-1]))))
    else:
        cells.append(Cell("-"))
    # 16k / 64k tokens, off after 0 steps; ² where one seed
    recall = [long_recall(pick, name, k) for k in ("16k", "64k")]
    if all(recall):
        one_seed = " ²" if any(len(r["seeds"]) == 1 for r in recall) else ""
        cells.append(Cell("{:.1f} / {:.1f}" + one_seed, tuple(100 * r["off"] for r in recall)))
    else:
        cells.append(Cell("-"))
    # step and generate() × full
    if row["step_ratio"] is None:
        cells += [Cell("{:.2f} ³", (bench_step(quest_bench, name),), QUEST_BENCH),
                  Cell("{:.2f} ³", (bench_generate(quest_bench, name),), QUEST_BENCH)]
    else:
        cells += [Cell("{:.3f}", (cost(pick, name, "step_ratio"),)),
                  Cell("{:.2f}", (cost(pick, name, "generate_ratio"),))]
    # time per token × segmented, 16k / 262k; ¹ where from the quiet run
    times = [long_time(pick, name, k) for k in ("16k", "256k")]
    if name == "segmented":  # the reference: 1
        cells.append(Cell("{:.0f}", (times[0]["segmented_ratio"],)))
    elif all(times):
        files = pick["long_input"]["bench_files"]
        quiet = " ¹" if all(files[t["bench_file"]]["file"] == QUIET_RUN for t in times) else ""
        # the column prints two significant digits, `full`'s 17.9 three: the precision the text prints
        cells.append(Cell("{} / {}" + quiet, tuple(t["segmented_ratio"] for t in times)))
    else:
        cells.append(Cell("-"))
    # state per layer
    if row["state_bytes_per_layer"] is None:
        cells.append(Cell("{:.1f} MiB ³", (bench_state_per_layer(quest_bench, name),), QUEST_BENCH))
    elif row["lean_state_bytes_per_layer"] is None:
        cells.append(Cell("{:.1f} MiB", (cost(pick, name, "state_bytes_per_layer"),)))
    else:
        cells.append(Cell("{:.1f} MiB ({:.1f} lean)", (cost(pick, name, "state_bytes_per_layer"),
                                                       cost(pick, name, "lean_state_bytes_per_layer"))))
    return cells


def _has(pick: Any, name: str, column: str) -> bool:
    try:
        _quality(pick, name, column)
    except LookupError:
        return False
    return True


#: Blocks of a doc that are a results file's, line for line: (doc, the block's first line's start, the file).
COPIES = [(CHOOSING, "| mechanism | k128 convert+100 |", PICK_MD)]


# --- Checking ----------------------------------------------------------------------------------------------------

PLACEHOLDER = re.compile(r"\{(:[^{}]*)?\}")
NUMBER = r"([-−]?\d+(?:,\d{3})*(?:\.\d+)?)"
ANY_NUMBER = re.compile(NUMBER)


def _pattern(snippet: str) -> tuple[str, list[str | None]]:
    """A regex of ``snippet`` with one group per placeholder (any run of whitespace matching any other), and each
    placeholder's format spec (None: as printed)."""
    parts = PLACEHOLDER.split(snippet)
    literals, specs = parts[0::2], parts[1::2]
    regex = NUMBER.join(r"\s+".join(re.escape(word) for word in re.split(r"\s+", literal)) for literal in literals)
    return regex, [None if spec is None else spec[1:] for spec in specs]


def _normal(text: str) -> str:
    text = text.replace("−", "-").replace(",", "")
    return text[1:] if re.fullmatch(r"-0(\.0*)?", text) else text


def render(value: float, spec: str | None, printed: str | None = None) -> str:
    """``value`` as the text prints it: with ``spec``, or (None) to as many decimals as ``printed`` has (three
    significant digits with nothing printed)."""
    if spec is None:
        spec = ".3g" if printed is None else f".{len(printed.split('.')[1]) if '.' in printed else 0}f"
    return _normal(format(value, spec))


def _mismatch(printed: str, value: Number, spec: str | None) -> str | None:
    """The results value as printed where it differs from ``printed``, else None."""
    for one in value if isinstance(value, tuple) else (value,):
        expected = render(float(one), spec, printed)
        if expected != _normal(printed):
            return expected
    return None


def _filled(snippet: str, values: Sequence[Number], specs: Sequence[str | None]) -> str:
    """``snippet`` with the results values in its placeholders (a tuple by its first value)."""
    pieces = iter(render(float(value[0] if isinstance(value, tuple) else value), spec)
                  for value, spec in zip(values, specs, strict=True))
    return PLACEHOLDER.sub(lambda _: next(pieces), snippet)


def _one_line(text: str) -> str:
    return " ".join(text.split())


def check_snippet(doc: str, text: str, snippet: str, values: Sequence[Number], source: str,
                  where: str | None = None, whole: bool = False) -> tuple[list[str], int]:
    """Mismatches of ``snippet``'s numbers in ``text`` (every occurrence; with ``whole``, ``text`` is one table
    cell that must match the snippet entirely), and how many numbers were checked."""
    regex, specs = _pattern(snippet)
    label = where or f'"{_one_line(snippet)}"'
    if len(specs) != len(values):
        return [f"{doc}: {label}: {len(specs)} placeholders but {len(values)} values from {source}"], 0
    matches = [m for m in [re.fullmatch(regex, text.strip())] if m] if whole else list(re.finditer(regex, text))
    if not matches:
        return [f"{doc}: {label}: printed {_one_line(text)!r}, from results {_filled(snippet, values, specs)!r} "
                f"({source})" if whole else
                f"{doc}: snippet not found (reworded? update its claim): {label}; from results it reads "
                f'"{_one_line(_filled(snippet, values, specs))}" ({source})'], 0
    problems, checked = [], 0
    for match in matches:
        for printed, value, spec in zip(match.groups(), values, specs, strict=True):
            checked += 1
            expected = _mismatch(printed, value, spec)
            if expected is not None:
                problems.append(f"{doc}: {label}: printed {printed}, from results {expected} ({source})")
    return problems, checked


def _read(base: Path, path: str, cache: dict[str, Any]) -> Any:
    if path not in cache:
        text = (base / path).read_text(encoding="utf-8")
        cache[path] = json.loads(text) if path.endswith(".json") else text
    return cache[path]


def check_claims(docs: Path, results: Path, claims: Iterable[Claim] = CLAIMS) -> tuple[list[str], int]:
    """Mismatches of every claim, and how many numbers were checked."""
    problems: list[str] = []
    checked = 0
    texts: dict[str, Any] = {}
    data: dict[str, Any] = {}
    for claim in claims:
        text = _read(docs, claim.doc, texts)
        source = ", ".join(claim.sources)
        try:
            values = claim.values(*(_read(results, s, data) for s in claim.sources))
        except (LookupError, ValueError, ZeroDivisionError) as error:
            problems.append(f'{claim.doc}: "{_one_line(claim.snippet)}": no value in {source}: {error}')
            continue
        found, count = check_snippet(claim.doc, text, claim.snippet, values, source)
        problems += found
        checked += count
    return problems, checked


def check_results_table(docs: Path, results: Path) -> tuple[list[str], int]:
    """Mismatches of the probe table with its costs (docs/choosing.md) against the rows derived from results, and
    the numbers checked."""
    table = _block((docs / CHOOSING).read_text(encoding="utf-8"), TABLE_HEADER)
    if not table:
        return [f"{CHOOSING}: the probe table with its costs ({TABLE_HEADER} ...) is not found"], 0
    headers = [cell.strip() for cell in table[0].strip("|").split("|")]
    pick, quest_bench = (json.loads((results / path).read_text(encoding="utf-8")) for path in (PICK, QUEST_BENCH))
    problems: list[str] = []
    checked = 0
    for line in table[2:]:
        printed = [cell.strip() for cell in line.strip().strip("|").split("|")]
        name = printed[0].split("`")[1] if "`" in printed[0] else printed[0]
        try:
            cells = results_table_row(pick, quest_bench, name)
        except LookupError as error:
            problems.append(f"{CHOOSING}: the probe table, row `{name}`: {error} in {PICK}")
            continue
        if len(printed) != len(cells) + 1:
            problems.append(f"{CHOOSING}: the probe table, row `{name}`: {len(printed) - 1} cells, {len(cells)} "
                "derived")
            continue
        for cell, text, header in zip(cells, printed[1:], headers[1:], strict=True):
            where = f"the probe table, row `{name}`, column '{header}'"
            found, count = check_snippet(CHOOSING, text, cell.snippet, cell.values, cell.source, where, whole=True)
            problems += found
            checked += count
    return problems, checked


def check_copies(docs: Path, results: Path) -> tuple[list[str], int]:
    """Mismatches of the tables copied from results files (:data:`COPIES`), one per differing line (its first
    differing cell), and how many numbers the copies hold."""
    problems: list[str] = []
    checked = 0
    for doc, start, source in COPIES:
        printed = _block((docs / doc).read_text(encoding="utf-8"), start)
        expected = _block((results / source).read_text(encoding="utf-8"), start)
        for number, (line, copied) in enumerate(zip_longest(printed, expected, fillvalue="(no line)"), 1):
            if line != copied:
                cells = zip_longest(line.split("|"), copied.split("|"), fillvalue="")
                mine, theirs = next((a.strip(), b.strip()) for a, b in cells if a != b)
                problems.append(f'{doc}: the table "{start} ...", line {number}: printed {mine!r}, from results '
                                f"{theirs!r} ({source})")
        checked += sum(len(ANY_NUMBER.findall(line)) for line in printed)
    return problems, checked


def _block(text: str, start: str) -> list[str]:
    """The table whose first line begins with ``start``: that line and the ``|`` lines after it."""
    lines = text.splitlines()
    first = next((i for i, line in enumerate(lines) if line.startswith(start)), len(lines))
    block = []
    for line in lines[first:]:
        if not line.startswith("|"):
            break
        block.append(line)
    return block


#: The three kinds of check, by name.
PARTS: dict[str, Callable[[Path, Path], tuple[list[str], int]]] = {
    "claims": check_claims, "results table": check_results_table, "copies": check_copies}


def check(docs: Path = ROOT, results: Path = ROOT) -> tuple[list[str], dict[str, int]]:
    """Every mismatch of the claims, the probe table of docs/choosing.md and the copied tables (``docs``: where
    README.md and docs/ are read; ``results``: where results/ is), and how many numbers each part checked."""
    problems: list[str] = []
    counts: dict[str, int] = {}
    for name, part in PARTS.items():
        found, counts[name] = part(docs, results)
        problems += found
    return problems, counts


def main(argv: Sequence[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--docs", type=Path, default=ROOT, help="where README.md and docs/ are (default: the repo)")
    args = parser.parse_args(argv)
    problems, counts = check(args.docs, ROOT)
    for problem in problems:
        print(problem)
    if problems:
        return 1
    print(f"{sum(counts.values())} headline numbers of {README}, {CHOOSING}, {LONG_INPUTS} and {LIMITATIONS} match "
          "results/: "
          f"{counts['claims']} in {len(CLAIMS)} claims, {counts['results table']} in the probe table of {CHOOSING}, "
          f"{counts['copies']} in the table copied from {PICK_MD}")
    return 0


if __name__ == "__main__":
    sys.exit(main())
