"""Which index for ``knn`` on long inputs: one over the encoder output (Unlimiformer's, queried with ``W_k^T q``) or
one per decoder layer and head over its projected keys. Synthetic, costs and retrieval recall only.

For each input length, a t5-small-shaped decoder (6 layers, 8 heads of 64, d_model 512) with random projections
and a random Gaussian encoder output (random vectors have no cluster structure: the hardest case for an inverted
file, so the recall here is a floor). Both layouts use the same faiss index kinds; per layout it measures the
seconds to build every index an input needs, their bytes, the seconds to search one decoder step's queries (every
layer and head), and the share of the exact top-``K`` keys that an IVF search returns (recall@K).

    OMP_NUM_THREADS=1 python scripts/knn_index_layouts.py --lengths 16384 65536 262144 \
        --output results/long-input/knn-index
    OMP_NUM_THREADS=1 python scripts/knn_index_layouts.py --checkpoint CHECKPOINT --documents DOCS.jsonl \
        --lengths 16384 65536 --probes 8 32 128 --output results/long-input/knn-index

Writes ``layouts.json`` and ``layouts.md`` to the output folder.
"""

from __future__ import annotations

import argparse
import json
import time
from pathlib import Path
from typing import Any, cast

import numpy as np
import torch

from srformer.attention.knn_index import build_encoder_index, default_lists, require_faiss
from srformer.attention.projection import HeadProjection

LAYERS, HEADS, HEAD_DIM, HIDDEN = 6, 8, 64, 512


def _recall(found: np.ndarray, exact: np.ndarray) -> float:
    """Mean share of each row of ``exact`` (queries x K) that ``found`` holds."""
    hits = [len(set(a.tolist()) & set(b.tolist())) / len(b) for a, b in zip(found, exact, strict=True)]
    return float(np.mean(hits))


def random_case(length: int, seed: int) -> tuple[torch.Tensor, list[HeadProjection], list[torch.Tensor]]:
    """A t5-small-shaped case: a random Gaussian encoder output (1, k, 512), 6 layers' random projections of 8
    heads of 64, one decoder step's queries per layer, (H, 1, d)."""
    generator = torch.Generator().manual_seed(seed)
    hidden = torch.randn(1, length, HIDDEN, generator=generator)
    projections = []
    for _ in range(LAYERS):
        key = torch.nn.Linear(HIDDEN, HEADS * HEAD_DIM, bias=False)
        value = torch.nn.Linear(HIDDEN, HEADS * HEAD_DIM, bias=False)
        projection = HeadProjection.from_linear(key, value, HEADS, HEAD_DIM)
        assert projection is not None
        projections.append(projection)
    queries = [torch.randn(HEADS, 1, HEAD_DIM, generator=generator) for _ in range(LAYERS)]
    return hidden, projections, queries


def checkpoint_case(
    checkpoint: str, documents: str, length: int, window: int, target_tokens: int,
) -> tuple[torch.Tensor, list[HeadProjection], list[torch.Tensor]]:
    """A trained model on real text: documents of ``documents`` (JSONL, a ``document`` field) joined until
    ``length`` tokens, encoded in windows of ``window``; the decoder teacher-forced on the first ``target_tokens``
    tokens of the document in the middle of the input (a copy model's target), its cross-attention queries taken
    per layer, (H, T, d)."""
    from transformers import AutoModelForSeq2SeqLM, AutoTokenizer

    import srformer
    from srformer.models import cross_attention_modules

    tokenizer = AutoTokenizer.from_pretrained(checkpoint)
    model = srformer.convert(AutoModelForSeq2SeqLM.from_pretrained(checkpoint).eval(),
                             srformer.SRformerConfig("full", encoder_window=window))
    pieces: list[list[int]] = []
    with open(documents) as handle:
        for line in handle:
            pieces.append(tokenizer(json.loads(line)["document"], add_special_tokens=False)["input_ids"])
            if sum(map(len, pieces)) >= length:
                break
    ids = [token for piece in pieces for token in piece][:length]
    middle = pieces[len(pieces) // 2][:target_tokens]
    projections, queries = [], []
    captured: list[torch.Tensor] = []
    modules = [module for _, _, module in cross_attention_modules(model)]
    hooks = [module.register_forward_pre_hook(
        lambda module, args, kwargs: captured.append(kwargs.get("hidden_states", args[0] if args else None)),
        with_kwargs=True) for module in modules]
    with torch.no_grad():
        encoded = model.get_encoder()(input_ids=torch.tensor([ids])).last_hidden_state
        model(encoder_outputs=(encoded,), labels=torch.tensor([middle]))
    for hook in hooks:
        hook.remove()
    for module, hidden_states in zip(modules, captured, strict=True):
        module = cast(Any, module)  # a T5Attention or BartAttention: their projection names differ
        query = module.q_proj if hasattr(module, "q_proj") else module.q
        key = module.k_proj if hasattr(module, "k_proj") else module.k
        value = module.v_proj if hasattr(module, "v_proj") else module.v
        heads = getattr(module, "num_heads", None) or module.n_heads
        head_dim = getattr(module, "head_dim", None) or module.key_value_proj_dim
        projection = HeadProjection.from_linear(key, value, heads, head_dim)
        assert projection is not None
        projections.append(projection)
        with torch.no_grad():
            queries.append(query(hidden_states)[0].view(-1, heads, head_dim).transpose(0, 1))
    return encoded, projections, queries


def measure(hidden: torch.Tensor, projections: list[HeadProjection], queries: list[torch.Tensor], top: int,
            probes: int) -> dict:
    """Both layouts, flat and ivf, for an encoder output (1, k, D), each layer's projection and queries (H, T, d)."""
    faiss = require_faiss()
    length = hidden.shape[1]
    heads, _, head_dim = queries[0].shape
    row: dict = {"length": length, "top_keys": top, "probes": probes, "lists": default_lists(length)}
    with torch.no_grad():
        exact = []
        for layer, projection in enumerate(projections):
            keys = torch.einsum("kD,hdD->hkd", hidden[0], projection.key_weight)
            scores = torch.einsum("htd,hkd->htk", queries[layer], keys)
            exact.append(scores.topk(top, dim=-1).indices.numpy())  # (H, T, K)
        # one index over the encoder output, for every layer and head
        for kind in ("flat", "ivf"):
            started = time.perf_counter()
            index = build_encoder_index(hidden, None, kind, None, probes)
            built = time.perf_counter() - started
            slot = torch.zeros(1, dtype=torch.long)
            started = time.perf_counter()
            recalls = []
            for layer, projection in enumerate(projections):
                mapped = projection.hidden_queries(queries[layer][None])  # (1, H, T, D)
                found = index.search(mapped.flatten(1, 2), slot, top)[0][0].view(heads, -1, top).numpy()
                recalls += [_recall(found[h], exact[layer][h]) for h in range(heads)]
            searched = time.perf_counter() - started
            row[f"shared_{kind}"] = {"build_seconds": built, "bytes": index.nbytes,
                                     "step_search_seconds": searched / queries[0].shape[1],
                                     "recall": float(np.mean(recalls))}
        # one index per layer and head over its projected keys (inner product; ivf through the same transformation)
        for kind in ("flat", "ivf"):
            built = searched = 0.0
            nbytes = 0
            recalls = []
            for layer, projection in enumerate(projections):
                head_keys = torch.einsum("kD,hdD->hkd", hidden[0], projection.key_weight).numpy()
                for head in range(heads):
                    vectors = np.ascontiguousarray(head_keys[head])
                    started = time.perf_counter()
                    if kind == "flat":
                        index = faiss.IndexFlatIP(head_dim)
                        index.add(vectors)
                        nbytes += vectors.nbytes
                    else:
                        squared = (vectors.astype(np.float64) ** 2).sum(axis=1)
                        extra = np.sqrt(squared.max() - squared).astype(np.float32)[:, None]
                        augmented = np.ascontiguousarray(np.concatenate([vectors, extra], axis=1))
                        quantizer = faiss.IndexFlatL2(head_dim + 1)
                        index = faiss.IndexIVFFlat(quantizer, head_dim + 1, row["lists"], faiss.METRIC_L2)
                        index.train(augmented)
                        index.add(augmented)
                        index.nprobe = probes
                        nbytes += augmented.nbytes + row["lists"] * (head_dim + 1) * 4
                    built += time.perf_counter() - started
                    query = queries[layer][head].numpy()
                    if kind == "ivf":
                        query = np.concatenate([query, np.zeros((query.shape[0], 1), dtype=np.float32)], axis=1)
                    started = time.perf_counter()
                    _, labels = index.search(np.ascontiguousarray(query), top)
                    searched += time.perf_counter() - started
                    recalls.append(_recall(labels, exact[layer][head]))
            row[f"per_head_{kind}"] = {"build_seconds": built, "bytes": nbytes,
                                       "step_search_seconds": searched / queries[0].shape[1],
                                       "recall": float(np.mean(recalls))}
    return row


def table(rows: list[dict]) -> str:
    """The Markdown report."""
    lines = [
        "# knn on long inputs: one index over the encoder output, or one per layer and head",
        "",
        "Seconds on one thread (build: every index an input needs; search: one decoder step, every layer and head); "
        "bytes of the indexes; recall@K: the share of the exact top-K keys an index returns, averaged over layers, "
        "heads and decoder positions. Data `random`: t5-small shape (6 decoder layers, 8 heads of 64, d_model 512), "
        "random projections and a random Gaussian encoder output (no cluster structure: a floor for ivf). Otherwise "
        "the trained checkpoint named, on real text (its shape), the decoder teacher-forced on a document of the "
        "input.",
        "",
        "| data | tokens | layout | index | build (s) | index bytes | search per step (s) | recall@K |",
        "|---|---|---|---|---|---|---|---|",
    ]
    for row in rows:
        for layout, label in (("shared", "encoder output, shared"), ("per_head", "per layer and head")):
            for kind in ("flat", "ivf"):
                if kind == "flat" and row["probes"] != min(r["probes"] for r in rows if r["data"] == row["data"]
                                                            and r["length"] == row["length"]):
                    continue  # flat does not depend on the probes: one row
                cell = row[f"{layout}_{kind}"]
                name = kind if kind == "flat" else f"ivf ({row['lists']} lists, {row['probes']} probes)"
                lines.append(
                    f"| {row['data']} | {row['length']:,} | {label} | {name} | {cell['build_seconds']:.2f} | "
                    f"{cell['bytes']:,} | {cell['step_search_seconds']:.4f} | {100 * cell['recall']:.1f}% |"
                )
    return "\n".join(lines) + "\n"


def main() -> int:
    """Measure each (data, length, probes) not yet in the output (resumable) and write the report."""
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--lengths", type=int, nargs="+", default=[16384, 65536, 262144])
    parser.add_argument("--top-keys", type=int, default=32)
    parser.add_argument("--probes", type=int, nargs="+", default=[32])
    parser.add_argument("--seed", type=int, default=0)
    parser.add_argument("--checkpoint", default=None, help="a trained seq2seq checkpoint (default: random weights)")
    parser.add_argument("--documents", default=None, help="with --checkpoint: JSONL with a `document` field")
    parser.add_argument("--window", type=int, default=1024, help="with --checkpoint: encoder window (tokens)")
    parser.add_argument("--target-tokens", type=int, default=64, help="with --checkpoint: decoder positions")
    parser.add_argument("--data-name", default=None, help="with --checkpoint: its name in the table")
    parser.add_argument("--output", required=True)
    args = parser.parse_args()
    if (args.checkpoint is None) != (args.documents is None):
        parser.error("--checkpoint and --documents go together")
    data = "random" if args.checkpoint is None else args.data_name or Path(args.checkpoint).name
    folder = Path(args.output)
    folder.mkdir(parents=True, exist_ok=True)
    path = folder / "layouts.json"
    rows: list[dict] = json.loads(path.read_text())["rows"] if path.exists() else []
    for length in args.lengths:
        todo = [p for p in args.probes
                if not any((r["data"], r["length"], r["probes"]) == (data, length, p) for r in rows)]
        if not todo:
            continue
        print(f"knn index layouts: {data}, {length:,} tokens", flush=True)
        case = (random_case(length, args.seed) if args.checkpoint is None else
                checkpoint_case(args.checkpoint, args.documents, length, args.window, args.target_tokens))
        for probes in todo:
            rows.append({"data": data, **measure(*case, args.top_keys, probes)})
            path.write_text(json.dumps({"rows": rows, "threads": torch.get_num_threads()}, indent=2))
    (folder / "layouts.md").write_text(table(rows))
    print(f"wrote {path} and {folder / 'layouts.md'}")
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
