"""``srformer fidelity``: teacher-forced fidelity of each converted mechanism to the reference (full attention).

Each mechanism's per-document scores are written to ``OUTPUT/fidelity.json`` as soon as it is finished, so a run
stopped between mechanisms resumes at the next one (:mod:`srformer.evaluation.fidelity`). A mechanism given settings
of its own (``--setting knn-loki:top_keys=128``) is stored as ``NAME@SETTING=VALUE``, beside the same mechanism
without them: a later call with other settings adds its mechanisms to the same folder, and the summary covers every
mechanism the folder holds."""

from __future__ import annotations

import json
import os
from pathlib import Path
from typing import Any

from tqdm.auto import tqdm
from transformers import DataCollatorForSeq2Seq

from srformer.cli.arguments import parse_shared_settings, parse_variant_settings
from srformer.cli.data_source import load_data
from srformer.core import keeps_own_attention, named_config
from srformer.data.features import encode_pairs
from srformer.evaluation.evaluate import load_summarizer
from srformer.evaluation.fidelity import DocumentFidelity, fidelity_summary, teacher_forced
from srformer.evaluation.fidelity_plot import plot_fidelity
from srformer.models.convert import convert
from srformer.models.install import srformer_config_of


def _write(path: Path, payload: dict[str, Any]) -> None:
    partial = path.with_suffix(".json.tmp")
    partial.write_text(json.dumps(payload) + "\n")
    os.replace(partial, path)


def fidelity_markdown(summary: dict[str, dict[str, Any]], reference: str, run: dict[str, Any]) -> str:
    """The table of ``fidelity.md``: one row per mechanism."""
    lines = [
        "# Teacher-forced fidelity to the reference",
        "",
        f"Each mechanism converted from `{run['checkpoint']}` with no fine-tuning, teacher-forced on the reference "
        f"summaries of {next(iter(summary.values()))['documents']} documents (sources cut to "
        f"{run['max_source_length']} tokens, references to {run['max_target_length']}), against `{reference}`. "
        "Perplexity of the references "
        "over all their tokens; agreement: the share of target positions whose next-token argmax equals the "
        "reference's; intervals: paired bootstrap over documents (95%).",
        "",
        f"| mechanism | perplexity | × `{reference}` | agreement | NLL per token − `{reference}` [95% CI] | "
        f"agreement − `{reference}` [95% CI] |",
        "| --- | ---: | ---: | ---: | --- | --- |",
    ]
    for name, row in summary.items():
        nll, agree = row["nll_per_token_minus_reference"], row["agreement_minus_reference"]
        lines.append(
            f"| `{name}` | {row['perplexity']:.3f} | {row['perplexity_ratio']:.4f} | {100 * row['agreement']:.2f}% | "
            f"{nll['mean']:+.4f} [{nll['low']:+.4f}, {nll['high']:+.4f}] | "
            f"{100 * agree['mean']:+.2f} [{100 * agree['low']:+.2f}, {100 * agree['high']:+.2f}] |")
    return "\n".join(lines) + "\n"


def _labelled(
    names: list[str], per_variant: dict[str, dict[str, Any]], shared: dict[str, Any], reference: str
) -> dict[str, tuple[str, dict[str, Any]]]:
    """``{label: (named setting, its own settings)}``: a mechanism's own settings are those of ``--setting
    VARIANT:NAME=VALUE`` beyond the shared ones, and its label is ``NAME@SETTING=VALUE,...`` (sorted) when it has any.

    Raises:
        ValueError: for settings of the reference's own (its scores are what every mechanism is compared with).
    """
    labelled = {}
    for name in names:
        own = {key: value for key, value in per_variant.get(name, {}).items()
               if key not in shared or shared[key] != value}
        if own and name == reference:
            raise ValueError(f"--setting {name}:...: the reference {name!r} takes no settings of its own; give them "
                             "to every mechanism (no prefix) or to the others.")
        label = name + ("@" + ",".join(f"{key}={own[key]}" for key in sorted(own)) if own else "")
        labelled[label] = (name, own)
    return labelled


def run(args) -> int:
    """Score the reference and every variant (resuming finished ones), then write the summary; returns 0.

    Raises:
        ValueError: a converted checkpoint (give the plain base), bad settings, or an output folder holding
            another run's scores (the CLI prints it and exits 2).
    """
    output = Path(args.output)
    output.mkdir(parents=True, exist_ok=True)
    settings = parse_shared_settings(args.setting)
    names = [args.reference] + [name for name in args.variants if name != args.reference]
    mechanisms = _labelled(names, parse_variant_settings(args.setting, names), settings, args.reference)
    run_config = {"checkpoint": str(args.checkpoint), "data": str(args.data), "split": args.split,
                  "split_by_id": args.split_by_id, "max_source_length": args.max_source_length,
                  "max_target_length": args.max_target_length, "source_prefix": args.source_prefix,
                  "segment_size": args.segment_size, "target_length": args.target_length, "settings": settings,
                  "max_examples": args.max_examples}
    path = output / "fidelity.json"
    payload: dict[str, Any] = json.loads(path.read_text()) if path.exists() else {"run": run_config, "documents": {}}
    if payload["run"] != run_config:
        raise ValueError(f"{path} holds scores of another run ({payload['run']}); give another --output.")
    pairs = load_data(args, default_split="test")
    if args.max_examples is not None:
        pairs = pairs[: args.max_examples]
    features: list[dict[str, list[int]]] | None = None  # the same for every mechanism: tokenized once
    for label, (name, own) in mechanisms.items():
        if label in payload["documents"]:
            continue
        model, tokenizer = load_summarizer(args.checkpoint)
        stored = srformer_config_of(model)
        if stored is not None and not keeps_own_attention(stored.variant):  # `full` is the plain model, windowed
            raise ValueError(f"--checkpoint {args.checkpoint} is already converted; give the plain base model, "
                             "which each mechanism is converted from.")
        convert(model, named_config(name, segment_size=args.segment_size, target_length=args.target_length,
                                    **settings, **own))
        if features is None:
            features, _ = encode_pairs(tokenizer, pairs, max_source_length=args.max_source_length,
                                       max_target_length=args.max_target_length, source_prefix=args.source_prefix)
        collator = DataCollatorForSeq2Seq(tokenizer, model=model, label_pad_token_id=-100)
        starts = range(0, len(features), args.batch_size)
        batches = (collator(features[start:start + args.batch_size]) for start in
                   tqdm(starts, desc=f"fidelity: {label}", disable=args.no_progress, unit="batch"))
        scored = teacher_forced(model.eval(), batches)
        payload["documents"][label] = [document.to_dict() for document in scored]
        _write(path, payload)
    held = [args.reference] + [label for label in payload["documents"] if label != args.reference]
    documents = {label: [DocumentFidelity.from_dict(record) for record in payload["documents"][label]]
                 for label in held}
    payload["summary"] = fidelity_summary(documents, args.reference)
    _write(path, payload)
    (output / "fidelity.md").write_text(fidelity_markdown(payload["summary"], args.reference, run_config))
    plot_fidelity(payload["summary"], args.reference, output / "fidelity.png")
    for name, row in payload["summary"].items():
        print(f"{name}: perplexity {row['perplexity']:.3f} ({row['perplexity_ratio']:.4f}x), "
              f"agreement {100 * row['agreement']:.2f}%")
    print(f"wrote {path}, {output / 'fidelity.md'} and {output / 'fidelity.png'}")
    return 0
