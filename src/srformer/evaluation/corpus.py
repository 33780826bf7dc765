"""Summaries of a corpus across processes and machines, written as they finish and resumable after a kill.

Under ``torchrun`` or ``accelerate launch`` (CPU processes over gloo, GPUs over NCCL) every process calls
:func:`generate_corpus` with the same documents. The batches are the ones a single process decodes
(:func:`~srformer.evaluation.generation.plan_batches`: length-sorted, ``batch_size`` documents each), dealt to the
processes round-robin by accelerate's ``BatchSamplerShard``; each round's summaries are gathered with accelerate's
``gather_object``, so every process ends with every summary, in input order, and the output does not depend on the
number of processes (each batch is decoded as one process decodes it).

Resume: the main process appends each round's batches to a *partial file* (JSON lines, flushed and fsynced), whose
first line records what decides the output: the model's config and weights, the tokenizer, the documents and the
decoding settings. A run started again with the same inputs skips the batches found there (a line cut by a kill is
dropped and its batch decoded again); different inputs are refused with an error that names what changed.
Only the main process reads and writes the partial file, so the processes need no shared file system.
"""

from __future__ import annotations

import hashlib
import json
import os
from collections.abc import Sequence
from pathlib import Path
from typing import Any

import torch
from accelerate.data_loader import BatchSamplerShard
from accelerate.utils import gather_object
from torch.utils.data import BatchSampler
from tqdm.auto import tqdm

from srformer.data.file_reading import complete_json_lines
from srformer.evaluation.generation import BatchDecoder, GenerationResult, check_generation_inputs, plan_batches
from srformer.training.distributed import from_main_process, process_state

__all__ = ["PARTIAL_FORMAT", "discard_partial", "generate_corpus", "run_fingerprint"]

#: The ``format`` value of a partial file's first line.
PARTIAL_FORMAT = "srformer-partial-summaries/1"

#: Config entries that do not change a model's outputs (where it was loaded from, the library version).
_VOLATILE_CONFIG_KEYS = ("_name_or_path", "transformers_version")


def _digest(payload: bytes | str) -> str:
    return hashlib.sha256(payload.encode() if isinstance(payload, str) else payload).hexdigest()[:16]


def _weights_digest(model: Any) -> str:
    """SHA-256 of every parameter and buffer (name, dtype, shape, bytes), in ``state_dict`` order."""
    sha = hashlib.sha256()
    for name, tensor in model.state_dict().items():
        data = tensor.detach().cpu().contiguous()
        sha.update(f"{name}:{data.dtype}:{tuple(data.shape)};".encode())
        sha.update(data.reshape(-1).view(torch.uint8).numpy().tobytes())
    return sha.hexdigest()[:16]


def _tokenizer_digest(tokenizer: Any) -> str:
    backend = getattr(tokenizer, "backend_tokenizer", None)
    if backend is not None:
        return _digest(backend.to_str())
    return _digest(json.dumps(sorted(tokenizer.get_vocab().items())))


def run_fingerprint(model: Any, tokenizer: Any, documents: Sequence[str], ids: Sequence[str | None] | None,
                    decoding: dict[str, Any]) -> dict[str, Any]:
    """What decides a corpus run's output, as a JSON-able dict compared on resume.

    Args:
        model: the model as it will decode (its config, with any SRformer runtime options, and its weights).
        tokenizer: its tokenizer.
        documents: the sources, in input order (source prefix included or not: it is a decoding setting).
        ids: the documents' ids (None: their positions).
        decoding: the decoding settings (JSON values), e.g. ``num_beams``, ``max_new_tokens``, ``batch_size``.

    Returns:
        ``{"model config": digest, "model weights": digest, "tokenizer": digest, "documents": digest,
        "num_documents": N, "decoding": decoding}`` (digests: the first 16 hex digits of SHA-256).
    """
    config = {key: value for key, value in model.config.to_dict().items() if key not in _VOLATILE_CONFIG_KEYS}
    return {
        "model config": _digest(json.dumps(config, sort_keys=True, default=str)),
        "model weights": _weights_digest(model),
        "tokenizer": _tokenizer_digest(tokenizer),
        "documents": _digest(json.dumps([list(ids) if ids is not None else None, list(documents)])),
        "num_documents": len(documents),
        "decoding": json.loads(json.dumps(decoding)),
    }


def _differences(saved: dict[str, Any], wanted: dict[str, Any]) -> list[str]:
    """Human-readable names of what differs between two fingerprints."""
    explained = {"model config": "model config (another checkpoint, or other runtime options such as --encoder-window)",
                 "model weights": "model weights (another checkpoint)", "tokenizer": "tokenizer"}
    changed = [text for name, text in explained.items() if saved.get(name) != wanted[name]]
    if saved.get("documents") != wanted["documents"] or saved.get("num_documents") != wanted["num_documents"]:
        changed.append(f"documents ({saved.get('num_documents')} then, {wanted['num_documents']} now, or other "
                       "texts or ids: another data file, split or --max-examples)")
    before, now = saved.get("decoding", {}), wanted["decoding"]
    for key in sorted(set(before) | set(now)):
        if before.get(key) != now.get(key):
            changed.append(f"decoding setting {key} ({before.get(key)!r} then, {now.get(key)!r} now)")
    return changed


def _read_partial(path: Path, fingerprint: dict[str, Any]) -> tuple[list[dict[str, Any]], int]:
    """The finished batches of a partial file, and the length in bytes of its readable part.

    Raises:
        ValueError: naming ``path`` and what changed, when it was written for other inputs, or is not a partial file.
    """
    lines, good = complete_json_lines(path.read_bytes())
    if not lines:
        return [], 0
    header, records = lines[0], lines[1:]
    if not isinstance(header, dict) or header.get("format") != PARTIAL_FORMAT:
        raise ValueError(f"{path} is not a partial file of srformer summaries; move it away or choose "
                         "another output path.")
    changed = _differences(header.get("fingerprint", {}), fingerprint)
    if changed:
        raise ValueError(
            f"{path} holds an interrupted run with other inputs; changed: {'; '.join(changed)}. Run the same command "
            f"to resume it, or delete {path} (or choose another output path) to start again."
        )
    return records, good


def _open_partial(path: Path, fingerprint: dict[str, Any]) -> tuple[list[dict[str, Any]], Any]:
    """Read ``path`` (when it exists) and open it for appending after its readable part; a new file gets the header."""
    records, good = _read_partial(path, fingerprint) if path.is_file() else ([], 0)
    path.parent.mkdir(parents=True, exist_ok=True)
    handle = open(path, "r+b" if path.is_file() else "wb")  # noqa: SIM115 - closed by generate_corpus
    handle.truncate(good)
    handle.seek(good)
    if good == 0:
        _append(handle, [{"format": PARTIAL_FORMAT, "fingerprint": fingerprint}])
    return records, handle


def _append(handle: Any, records: Sequence[dict[str, Any]]) -> None:
    handle.write("".join(json.dumps(record) + "\n" for record in records).encode())
    handle.flush()
    os.fsync(handle.fileno())


def discard_partial(partial_file: str | os.PathLike | None) -> None:
    """Delete a finished run's partial file (main process only; every process waits for it), once its outputs are
    written."""
    state = process_state()
    if partial_file is not None and state.is_main_process:
        Path(partial_file).unlink(missing_ok=True)
    state.wait_for_everyone()


def generate_corpus(
    model: Any,
    tokenizer: Any,
    documents: Sequence[str],
    *,
    ids: Sequence[str | None] | None = None,
    partial_file: str | os.PathLike | None = None,
    max_source_length: int = 512,
    max_new_tokens: int = 128,
    batch_size: int = 8,
    num_beams: int = 1,
    do_sample: bool = False,
    seed: int = 0,
    source_prefix: str = "",
    progress: bool = True,
    **generate_kwargs: Any,
) -> GenerationResult:
    """Summarize ``documents`` with every process of the launch (one process when not launched), resumably.

    Every process must call it with the same arguments (a collective call). The batches are those of
    :func:`~srformer.evaluation.generation.generate_summaries` (same documents, same order, same padding), dealt
    round-robin to the processes; with ``do_sample`` each batch is sampled after ``torch.manual_seed(seed + b)``, b
    its number in that plan, so samples do not depend on the number of processes either. Processes advance in
    rounds of one batch each; after a round the main process appends its batches to ``partial_file`` and advances
    one progress bar over the documents.

    Args:
        model: a generation model on this process's device (e.g. ``process_state().device``).
        tokenizer: its tokenizer.
        documents: the sources, in input order (non-empty strings).
        ids: the documents' ids, recorded in the fingerprint (None: positions).
        partial_file: where finished batches are kept for a resume (None: not kept). A file of another run's inputs
            is refused (see Raises); delete it with :func:`discard_partial` once the outputs are written.
        max_source_length, max_new_tokens, batch_size, num_beams, do_sample, source_prefix, progress,
        **generate_kwargs: as for :func:`~srformer.evaluation.generation.generate_summaries`.
        seed: base seed of the sampled batches (only used with ``do_sample``).

    Returns:
        On every process, a :class:`~srformer.evaluation.generation.GenerationResult` of all documents in input
        order; ``seconds`` and ``num_new_tokens`` sum over processes and over the batches of a resumed run
        (seconds inside ``generate``: process-seconds, not wall time).

    Raises:
        ValueError: the checks of :func:`~srformer.evaluation.generation.generate_summaries`; ``partial_file``
            holds a run of another model, tokenizer, documents or decoding settings (the message names each
            change), or is not a partial file. Raised on every process.
    """
    check_generation_inputs(documents, batch_size=batch_size, max_source_length=max_source_length,
                            max_new_tokens=max_new_tokens, num_beams=num_beams, generate_kwargs=generate_kwargs)
    state = process_state()
    sources = [source_prefix + document for document in documents]
    batches = plan_batches(tokenizer, sources, max_source_length=max_source_length, batch_size=batch_size)
    batch_number = {batch[0]: number for number, batch in enumerate(batches)}

    handle = None
    done: list[dict[str, Any]] | str = []
    if state.is_main_process and partial_file is not None:
        decoding = {"max_source_length": max_source_length, "max_new_tokens": max_new_tokens,
                    "batch_size": batch_size, "num_beams": num_beams, "do_sample": do_sample,
                    "seed": seed if do_sample else None, "source_prefix": source_prefix, **generate_kwargs}
        fingerprint = run_fingerprint(model, tokenizer, documents, ids, decoding)
        try:
            done, handle = _open_partial(Path(partial_file), fingerprint)
        except ValueError as error:
            done = str(error)
    done = from_main_process(done)
    if isinstance(done, str):
        raise ValueError(done)

    summaries: list[str | None] = [None] * len(sources)
    seconds, num_new_tokens = 0.0, 0

    def keep(records: Sequence[dict[str, Any]]) -> int:
        nonlocal seconds, num_new_tokens
        count = 0
        for record in records:
            indices = batches[record["batch"]]
            for index, text in zip(indices, record["summaries"], strict=True):
                summaries[index] = text
            seconds += record["seconds"]
            num_new_tokens += record["new_tokens"]
            count += len(indices)
        return count

    finished = keep(done)
    remaining = [index for batch in batches if summaries[batch[0]] is None for index in batch]
    plan = BatchSampler(remaining, batch_size=batch_size, drop_last=False)  # the same batches, finished ones left out
    mine = list(BatchSamplerShard(plan, num_processes=state.num_processes, process_index=state.process_index,
                                  even_batches=False))
    rounds = -(-len(plan) // state.num_processes)
    decode = BatchDecoder(model, tokenizer, max_source_length=max_source_length, max_new_tokens=max_new_tokens,
                          num_beams=num_beams, do_sample=do_sample, **generate_kwargs)
    bar = tqdm(total=len(sources), initial=finished, desc="Summarizing", unit="doc",
               disable=not (progress and state.is_main_process))
    was_training = bool(getattr(model, "training", False))
    model.eval()
    try:
        for round_index in range(rounds):
            new: list[dict[str, Any]] = []
            if round_index < len(mine):
                indices = list(mine[round_index])
                number = batch_number[indices[0]]
                if do_sample:
                    torch.manual_seed(seed + number)
                texts, batch_seconds, batch_tokens = decode([sources[i] for i in indices])
                new.append({"batch": number, "summaries": texts, "seconds": batch_seconds, "new_tokens": batch_tokens})
            gathered = gather_object(new) if state.num_processes > 1 else new
            if handle is not None:
                _append(handle, gathered)
            bar.update(keep(gathered))
    finally:
        model.train(was_training)
        bar.close()
        if handle is not None:
            handle.close()
    return GenerationResult(summaries=[text or "" for text in summaries], seconds=seconds,
                            num_new_tokens=num_new_tokens)
