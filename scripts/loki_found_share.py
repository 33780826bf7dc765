"""How often ``knn_index="loki"`` with pages finds the exact top 32 keys on real text, for several numbers of
candidates and channels the keys of the pages read are scored on (``index_candidates``, ``index_key_rank``).

A diagnostic of the selection alone, independent of how well the base summarises: the checkpoint is converted to
``knn-loki-pages`` and teacher-forced on each document's reference summary (``srformer fidelity``'s path, one
document at a time); every layer's call of the parallel path's selection
(:func:`srformer.attention.knn_loki.loki_positions`) is recorded with its projected queries and keys. Each recorded
call is then run again through ``loki_positions`` for every ``--settings`` entry, and compared with the exact top
32 of ``Q . K`` over every real key. Reported per entry: the share of the exact top 32 found, over layers, heads,
documents and target positions, and the share of full attention's softmax mass on the keys found against the
mass on the exact top 32 (the scale ``d^-1/2``, BART's).

``--concatenate N`` joins N consecutive documents into one input (the first one's summary the target): inputs
longer than one paper, at which the pages matter.

Usage (from a checkout; one thread):
    OMP_NUM_THREADS=1 python scripts/loki_found_share.py --checkpoint CHECKPOINT --data validation.jsonl \\
        --output runs/found-share-32k --max-source-length 32768 --concatenate 8 --examples 3 \\
        --setting-encoder-window 128 [--settings 256 64 64:24]
Each ``--settings`` entry is ``C`` or ``C:R``: ``index_candidates`` and ``index_key_rank`` (default: the rank).
Writes ``found_share.json`` and ``found_share.md`` in ``--output``.
"""

from __future__ import annotations

import argparse
import json
import sys
import tempfile
from collections.abc import Sequence
from pathlib import Path
from typing import Any

import torch

import srformer.attention.knn as knn_module
from srformer.attention.knn_loki import loki_positions
from srformer.cli.main import main as srformer_main

RANK, TOP_KEYS, PAGE, PAGES = 12, 32, 16, 256


def _parser() -> argparse.ArgumentParser:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--checkpoint", required=True)
    parser.add_argument("--data", required=True, help="jsonl with document and summary fields")
    parser.add_argument("--output", required=True)
    parser.add_argument("--max-source-length", type=int, default=8192)
    parser.add_argument("--max-target-length", type=int, default=128)
    parser.add_argument("--examples", type=int, default=6, help="inputs scored (after --concatenate)")
    parser.add_argument("--concatenate", type=int, default=1, help="documents joined into one input")
    parser.add_argument("--setting-encoder-window", type=int, default=None, help="the model's encoder_window")
    parser.add_argument("--settings", nargs="+", default=["256", "64", "64:24"],
                        help="C or C:R (index_candidates, index_key_rank)")
    return parser


def _settings(entries: Sequence[str]) -> list[tuple[int, int | None]]:
    parsed = []
    for entry in entries:
        candidates, _, key_rank = entry.partition(":")
        if not candidates.isdigit() or (key_rank and not key_rank.isdigit()):
            raise SystemExit(f"--settings: {entry!r} is not C or C:R (positive integers)")
        parsed.append((int(candidates), int(key_rank) if key_rank else None))
    return parsed


def _inputs(data: Path, concatenate: int, examples: int, folder: Path) -> Path:
    """The documents joined ``concatenate`` at a time, the first ``examples`` of them, as a jsonl in ``folder``."""
    records = [json.loads(line) for line in data.read_text().splitlines() if line.strip()]
    joined = []
    for start in range(0, min(len(records), concatenate * examples) - concatenate + 1, concatenate):
        group = records[start:start + concatenate]
        joined.append({"id": str(group[0].get("id", start)), "document": "\n".join(r["document"] for r in group),
                       "summary": group[0]["summary"]})
    if not joined:
        raise SystemExit(f"--data: fewer than {concatenate} documents in {data}")
    path = folder / "inputs.jsonl"
    path.write_text("".join(json.dumps(record) + "\n" for record in joined))
    return path


def _record(args: argparse.Namespace, inputs: Path, folder: Path) -> list[tuple[torch.Tensor, ...]]:
    """(queries, keys, key_valid) of every call of the parallel path's selection, teacher-forced."""
    recorded: list[tuple[torch.Tensor, ...]] = []
    original = knn_module.loki_positions

    def recording(queries: torch.Tensor, keys: torch.Tensor, key_valid: torch.Tensor, *rest: Any,
                  **options: Any) -> torch.Tensor:
        recorded.append((queries.detach().clone(), keys.detach().clone(), key_valid.clone()))
        return original(queries, keys, key_valid, *rest, **options)

    command = ["fidelity", "--checkpoint", args.checkpoint, "--data", str(inputs), "--variants", "knn-loki-pages",
               "--max-source-length", str(args.max_source_length), "--max-target-length",
               str(args.max_target_length), "--batch-size", "1", "--output", str(folder / "fidelity"),
               "--no-progress"]
    if args.setting_encoder_window is not None:
        command += ["--setting", f"encoder_window={args.setting_encoder_window}"]
    knn_module.loki_positions = recording  # the module's name for it, which its parallel path calls
    try:
        srformer_main(command)
    finally:
        knn_module.loki_positions = original
    return recorded


def found_share(recorded: Sequence[tuple[torch.Tensor, ...]],
                settings: Sequence[tuple[int, int | None]]) -> dict[str, dict[str, float]]:
    """Per setting: the share (%) of the exact top 32 keys found and of their softmax mass, over every recorded
    call, head and query."""
    sums = {entry: [0.0, 0.0, 0] for entry in settings}
    with torch.no_grad():
        for queries, keys, key_valid in recorded:
            exact = (queries @ keys.mT).masked_fill(~key_valid[:, None, None, :], float("-inf"))
            top = torch.topk(exact, min(TOP_KEYS, exact.shape[-1]), dim=-1).indices
            probabilities = torch.softmax(exact * queries.shape[-1] ** -0.5, dim=-1)
            top_mass = probabilities.gather(-1, top).sum(-1)
            for entry in settings:
                candidates, key_rank = entry
                found = loki_positions(queries, keys, key_valid, RANK, candidates, TOP_KEYS, PAGE, PAGES,
                                       key_rank)
                hits = (found[..., :, None] == top[..., None, :]).any(-1).float().mean(-1)
                mass = probabilities.gather(-1, found).sum(-1) / top_mass
                total = sums[entry]
                total[0] += float(hits.sum())
                total[1] += float(mass.sum())
                total[2] += hits.numel()
    return {_name(entry): {"found_percent": 100 * total[0] / total[2], "mass_percent": 100 * total[1] / total[2],
                           "queries": total[2]} for entry, total in sums.items()}


def _name(entry: tuple[int, int | None]) -> str:
    candidates, key_rank = entry
    return f"C={candidates}, r'={key_rank if key_rank is not None else RANK}"


def main(argv: Sequence[str] | None = None) -> int:
    args = _parser().parse_args(argv)
    settings = _settings(args.settings)
    output = Path(args.output)
    output.mkdir(parents=True, exist_ok=True)
    with tempfile.TemporaryDirectory() as temporary:
        folder = Path(temporary)
        recorded = _record(args, _inputs(Path(args.data), args.concatenate, args.examples, folder), folder)
    lengths = sorted({int(keys.shape[2]) for _, keys, _ in recorded})
    shares = found_share(recorded, settings)
    run = {"checkpoint": args.checkpoint, "data": args.data, "max_source_length": args.max_source_length,
           "concatenate": args.concatenate, "examples": args.examples, "calls": len(recorded),
           "key_lengths": lengths, "rank": RANK, "top_keys": TOP_KEYS, "page": PAGE, "pages": PAGES}
    (output / "found_share.json").write_text(json.dumps({"run": run, "shares": shares}, indent=1) + "\n")
    lines = ["| setting | exact top 32 found | their softmax mass found |", "| --- | ---: | ---: |"]
    lines += [f"| {name} | {value['found_percent']:.2f}% | {value['mass_percent']:.2f}% |"
              for name, value in shares.items()]
    (output / "found_share.md").write_text("\n".join(lines) + "\n")
    print("\n".join(lines), file=sys.stderr)
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
