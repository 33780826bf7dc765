"""Checks shared by the tests of the ``knn`` layouts that read the encoder output's rows (``rows``, ``loki``) and
its faiss index: one example padded left, right or not at all, generation through a layout against the exact
search, teacher forcing against generation, and ``knn_index="loki"``'s module, reference and tolerance (with and
without pages)."""

from __future__ import annotations

from collections.abc import Callable

import torch

import srformer
from srformer.attention.knn import KNNCrossAttention
from srformer.attention.naive import knn_attention
from srformer.attention.projection import HeadProjection
from srformer.config import SRformerConfig
from tests.models.conftest import padded_batch, plain_generation_config

BATCH, HEADS, LENGTH, HIDDEN, HEAD_DIM = 3, 2, 40, 8, 4


def rows_inputs(dtype: torch.dtype, seed: int = 0, tied: bool = False):
    """Hidden states (B, k, D) with left padding and an empty example, a per-head projection with biases, one
    decoder query per head, the real-position mask. ``tied``: the keys depend on the first hidden feature only,
    which takes three values, so that most scores tie while the values differ."""
    generator = torch.Generator().manual_seed(seed)
    hidden = torch.randn(BATCH, LENGTH, HIDDEN, generator=generator, dtype=dtype)
    valid = torch.ones(BATCH, LENGTH, dtype=torch.bool)
    valid[1, :7] = False  # left padding
    valid[2] = False  # an empty document
    key = torch.nn.Linear(HIDDEN, HEADS * HEAD_DIM, dtype=dtype)
    value = torch.nn.Linear(HIDDEN, HEADS * HEAD_DIM, dtype=dtype)
    if tied:
        hidden[..., 0] = torch.randint(-1, 2, (BATCH, LENGTH), generator=generator).to(dtype)
        with torch.no_grad():
            key.weight[:, 1:] = 0.0
            key.weight[:, 0] = torch.tensor([1.0, -1.0, 2.0, 0.5] * HEADS, dtype=dtype)
    projection = HeadProjection.from_linear(key, value, HEADS, HEAD_DIM)
    assert projection is not None
    queries = torch.randn(BATCH, HEADS, 1, HEAD_DIM, generator=generator, dtype=dtype)
    return hidden, valid, projection, queries


def loki_config(**settings) -> SRformerConfig:
    """``knn`` through ``knn_index="loki"`` at every length (segment size 4), with ``settings``."""
    return SRformerConfig("knn", segment_size=4, knn_index="loki", index_min_keys=1, **settings)


#: The attention scale of :func:`loki_module` (a state built for it holds it: ``loki_state(..., scale=SCALE)``).
SCALE = 0.5


def loki_module(**settings) -> KNNCrossAttention:
    """The ``knn`` module of :func:`loki_config` for :data:`HEAD_DIM`-wide heads, scale :data:`SCALE`."""
    return KNNCrossAttention(loki_config(**settings), HEAD_DIM, scale=SCALE)


def loki_tolerance(hidden: torch.Tensor, projection: HeadProjection) -> float:
    """Float64 rounding of the absorbed form against the reference's projected keys and values: a few dozen
    operations per output, each within one unit of the largest magnitude involved."""
    return 64 * torch.finfo(torch.float64).eps * float(hidden.abs().max()) * float(
        projection.value_weight.detach().abs().sum(-1).max() + 1)


def loki_reference(hidden: torch.Tensor, valid: torch.Tensor, projection: HeadProjection, queries: torch.Tensor,
                   **settings) -> torch.Tensor:
    """The float64 reference (:func:`~srformer.attention.naive.knn_attention`) of :func:`loki_config` on the
    projected keys and values of ``hidden``."""
    with torch.no_grad():
        keys, values = projection.project(hidden[:, None].expand(-1, HEADS, -1, -1))
    return knn_attention(queries, keys, values, valid, loki_config(**settings), scale=0.5)


def padded_outputs(hidden: torch.Tensor, step: Callable[[torch.Tensor, torch.Tensor | None], torch.Tensor],
                   pad: int = 10) -> list[torch.Tensor]:
    """``step(rows, key_valid)`` of the first example's first ``k - pad`` rows padded with ``pad`` zero rows on the
    left, on the right, and not at all (``key_valid`` None): three outputs that must be equal."""
    length = hidden.shape[1]
    real = hidden[:1, : length - pad]
    zeros = torch.zeros(1, pad, hidden.shape[2], dtype=hidden.dtype)
    cases = ((torch.cat([zeros, real], dim=1), (torch.arange(length) >= pad)[None]),
             (torch.cat([real, zeros], dim=1), (torch.arange(length) < length - pad)[None]),
             (real, None))
    with torch.no_grad():
        return [step(rows, valid) for rows, valid in cases]


def assert_generation_matches(model, ids: torch.Tensor, mask: torch.Tensor, *, reference: dict, through: dict,
                              tolerance: float, max_new_tokens: int = 6) -> list:
    """Greedy and beam search (3 beams) with the runtime options ``through`` give the tokens of those with
    ``reference``, and their scores within ``tolerance``. Returns the generations with ``through`` (1 and 3 beams)."""
    generations = []
    for beams in (1, 3):
        config = plain_generation_config(model, max_new_tokens=max_new_tokens, num_beams=beams, output_scores=True,
                                         return_dict_in_generate=True)
        with torch.no_grad():
            srformer.set_runtime_options(model, **reference)
            expected = model.generate(input_ids=ids, attention_mask=mask, generation_config=config)
            srformer.set_runtime_options(model, **through)
            generated = model.generate(input_ids=ids, attention_mask=mask, generation_config=config)
        assert torch.equal(generated.sequences, expected.sequences)
        for a, b in zip(generated.scores, expected.scores, strict=True):
            finite = torch.isfinite(b)
            assert torch.equal(torch.isfinite(a), finite)
            assert (a[finite] - b[finite]).abs().max().item() <= tolerance
        generations.append(generated)
    return generations


def assert_generation_equals_the_exact_search(model, ids: torch.Tensor, mask: torch.Tensor, **layout) -> list:
    """:func:`assert_generation_matches` against the exact ``knn`` search (``knn_index=None``), float64 models: scores
    within 1e-9 (a few float64 roundings of logits of order 1, well above them and far below a changed key's effect).
    """
    return assert_generation_matches(model, ids, mask, reference={"knn_index": None}, through=layout,
                                     tolerance=1e-9)


def assert_teacher_forcing_reads_what_generation_reads(model) -> None:
    """On :func:`~tests.models.conftest.padded_batch`: greedy generation's scores (5 new tokens) equal the
    teacher-forced forward pass's over the tokens it generated, within 1e-5 (the forced logits rounded to the scores'
    dtype first); beam search (3 beams) returns one sequence per input."""
    ids, mask = padded_batch(model)
    for beams in (1, 3):
        config = plain_generation_config(model, max_new_tokens=5, num_beams=beams, output_scores=True,
                                         return_dict_in_generate=True)
        with torch.no_grad():
            generated = model.generate(input_ids=ids, attention_mask=mask, generation_config=config)
        if beams > 1:
            assert generated.sequences.shape[0] == ids.shape[0]
            continue
        with torch.no_grad():
            forced = model(input_ids=ids, attention_mask=mask, decoder_input_ids=generated.sequences[:, :-1]).logits
        stepped = torch.stack(generated.scores, dim=1)
        torch.testing.assert_close(stepped.double(), forced.double().to(stepped.dtype).double(), rtol=0, atol=1e-5)
