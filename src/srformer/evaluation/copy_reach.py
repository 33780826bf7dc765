"""Copy reach: can a model go on copying a passage that starts anywhere in its input?

A summarizer that chooses sentences must, once it has begun one, copy the rest of it from wherever it lies. A base
that learned to copy by position (output token ``t`` from input position ``t``) copies from the top of its input
only. Read in windows (chunked encoding, :mod:`srformer.models.chunked_encoding`), every window restarts the
positions, so the same position occurs once per window and such a base cannot tell the windows apart.

:func:`copy_reach` measures this with teacher forcing. For each start ``a`` and each document of at least
``a + span`` tokens, the target is the document's tokens ``a .. a + span - 1``; the decoder is given the target's
previous tokens (its start token first), so after the first ``cue`` tokens it knows where the passage is, by its
content. The accuracy at ``a`` is the share of the ``span - cue`` tokens after the cue that the model predicts right
(arg-max). A model that finds a passage by its content scores the same at every start; one that copies by position
scores high at ``a = 0`` (and, in windows, at window starts) and near chance elsewhere.
"""

from __future__ import annotations

from collections.abc import Sequence
from typing import Any

import torch
from transformers import PreTrainedModel
from transformers.modeling_outputs import BaseModelOutput

__all__ = ["copy_reach", "reach_starts"]


def reach_starts(length: int, span: int, stride: int) -> list[int]:
    """The starts ``0, stride, 2·stride, ...`` (tokens) of passages of ``span`` tokens inside ``length`` tokens.

    Raises:
        ValueError: ``span`` or ``stride`` below 1, or ``length < span`` (not one passage fits).
    """
    if span < 1 or stride < 1:
        raise ValueError(f"`span` and `stride` must be at least 1 token, got {span} and {stride}.")
    if length < span:
        raise ValueError(f"A passage of `span` {span} tokens does not fit `length` {length} tokens.")
    return list(range(0, length - span + 1, stride))


@torch.no_grad()
def copy_reach(model: PreTrainedModel, sequences: Sequence[Sequence[int]], starts: Sequence[int], *, span: int = 64,
               cue: int = 8, pad_id: int, batch_size: int = 8) -> list[dict[str, Any]]:
    """Teacher-forced accuracy of continuing a copied passage, per passage start (module docstring).

    Args:
        model: a seq2seq model with ``get_encoder()`` (each batch of documents is encoded once, for every start)
            taking ``encoder_outputs``, ``attention_mask`` and ``decoder_input_ids`` (-> ``logits``), whose config
            has ``decoder_start_token_id``; evaluated in eval mode and put back in the mode it was in.
        sequences: each document's input token ids (the source the model reads, as given: special tokens
            included when the caller includes them).
        starts: passage starts in tokens (>= 0).
        span: passage length in tokens (> ``cue``).
        cue: leading tokens of each passage given but not scored.
        pad_id: the inputs' padding id.
        batch_size: documents per forward pass.

    Returns:
        One dict per start, in the order given: ``{"start": tokens, "documents": documents long enough,
        "tokens": scored tokens, "accuracy": 0-1 or None when no document is long enough}``.

    Raises:
        ValueError: ``cue < 0``, ``span <= cue``, a negative start, ``batch_size < 1``, no sequences, or a model
            without ``decoder_start_token_id``.
    """
    if cue < 0 or span <= cue:
        raise ValueError(f"`span` ({span}) must be larger than `cue` ({cue}) and `cue` at least 0 tokens.")
    if any(start < 0 for start in starts):
        raise ValueError(f"Passage `starts` must be >= 0 tokens, got {list(starts)}.")
    if batch_size < 1:
        raise ValueError(f"`batch_size` must be at least 1, got {batch_size}.")
    if not sequences:
        raise ValueError("copy_reach needs at least one sequence.")
    decoder_start = getattr(model.config, "decoder_start_token_id", None)
    if decoder_start is None:
        raise ValueError("The model's config has no decoder_start_token_id; set it (T5: the pad id, BART: </s>).")
    was_training = model.training
    model.eval()
    device = model.device
    encoder = model.get_encoder()
    correct, documents = [0] * len(starts), [0] * len(starts)
    try:
        for first in range(0, len(sequences), batch_size):  # each batch encoded once, for every start
            batch = [list(tokens) for tokens in sequences[first:first + batch_size]]
            width = max(len(ids) for ids in batch)
            input_ids = torch.full((len(batch), width), pad_id, dtype=torch.long)
            mask = torch.zeros((len(batch), width), dtype=torch.long)
            for row, ids in enumerate(batch):
                input_ids[row, :len(ids)] = torch.tensor(ids)
                mask[row, :len(ids)] = 1
            mask = mask.to(device)
            hidden = encoder(input_ids=input_ids.to(device), attention_mask=mask).last_hidden_state
            for which, start in enumerate(starts):
                rows = [row for row, ids in enumerate(batch) if len(ids) >= start + span]
                if not rows:
                    continue
                index = torch.tensor(rows, device=device)
                targets = torch.tensor([batch[row][start:start + span] for row in rows])
                decoder_input_ids = torch.cat([torch.full((len(rows), 1), decoder_start), targets[:, :-1]], dim=1)
                logits = model(encoder_outputs=BaseModelOutput(last_hidden_state=hidden.index_select(0, index)),
                               attention_mask=mask.index_select(0, index),
                               decoder_input_ids=decoder_input_ids.to(device)).logits
                predicted = logits.argmax(-1).cpu()
                correct[which] += int((predicted[:, cue:] == targets[:, cue:]).sum())
                documents[which] += len(rows)
        results = []
        for start, right, count in zip(starts, correct, documents, strict=True):
            scored = count * (span - cue)
            results.append({"start": start, "documents": count, "tokens": scored,
                            "accuracy": right / scored if scored else None})
    finally:
        model.train(was_training)
    return results
