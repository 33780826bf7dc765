"""Operator calls and host syncs of a decoding step: a device-independent measure of eager GPU cost.

On a GPU, an eager ``generate()`` step is launch-bound at the lengths and batch sizes users decode with: each aten
operator call costs a Python-to-dispatcher trip and, for a kernel, a launch (about 20 µs per call on an H200 for a
t5-small-shaped decoder in bf16, whatever the input length up to 1M tokens; ``docs/benchmarks.md``). A host sync
(``.item()``, ``bool(tensor)``, ``torch.equal``, a boolean index, ...) stalls the CPU until the GPU has caught up,
so the launches can no longer run ahead of the kernels. Both are counted here on any device, the CPU included,
through a :class:`~torch.utils._python_dispatch.TorchDispatchMode`: every call that reaches the dispatcher is
counted once, views included (they cost the dispatcher trip, not a launch). An operator registered by this
project (:mod:`srformer.attention.raf_scan`) counts once, whatever its CPU implementation runs inside.

Two quantities per model and input length (:func:`count_generation_operators`):

- **first step**: the first ``generate()`` step: every layer's cross-attention cache fill or state build, plus one
  decoder step;
- **per generated token**: the calls of one more token (the difference between two generations of different
  lengths, divided by the difference of their lengths).
"""

from __future__ import annotations

import contextlib
from collections import Counter
from collections.abc import Callable, Iterator, Sequence
from dataclasses import asdict, dataclass
from typing import Any

import torch
from torch.utils._python_dispatch import TorchDispatchMode
from transformers import PreTrainedModel
from transformers.modeling_outputs import BaseModelOutput

from srformer.attention import step_choice
from srformer.benchmarks.generation import generate_fixed, random_encoder_outputs
from srformer.benchmarks.long_input_variants import LONG_INPUT_VARIANTS
from srformer.benchmarks.suite_settings import MODEL_SHAPES
from srformer.benchmarks.variants import quiet_schedule_warnings, shape_model
from srformer.core import named_config
from srformer.models import cross_attention
from srformer.models.convert import convert

__all__ = [
    "SYNC_OPERATORS",
    "OperatorCount",
    "OperatorCounter",
    "count_calls",
    "count_generation_operators",
    "count_operators_from",
    "counted_route",
    "generation_inputs",
    "long_input_model",
]

#: Operators that copy a value to the host, or size their output from the data, so that the host waits for the
#: device: ``_local_scalar_dense`` (``.item()``, ``bool()``, ``int()``, ``.tolist()``), ``equal``, and the
#: data-dependent shapes (``nonzero``, ``masked_select``, ``unique``, and indexing with a boolean mask, which
#: :class:`OperatorCounter` names ``aten.index[bool]`` / ``aten.index_put[bool]``).
SYNC_OPERATORS: frozenset[str] = frozenset({
    "aten._local_scalar_dense", "aten.equal", "aten.nonzero", "aten.masked_select", "aten._unique2",
    "aten.unique_dim", "aten.unique_consecutive", "aten.index[bool]", "aten.index_put[bool]",
})

_INDEXING = frozenset({"aten.index", "aten.index_put", "aten.index_put_", "aten._index_put_impl_"})


def _boolean_index(args: Any) -> bool:
    """Whether an indexing call's indices (its second argument) hold a boolean mask."""
    indices = args[1] if len(args) > 1 else ()
    return any(isinstance(index, torch.Tensor) and index.dtype in (torch.bool, torch.uint8)
               for index in (indices if isinstance(indices, list | tuple) else ()))


class OperatorCounter(TorchDispatchMode):
    """Counts aten operator calls by name (``aten.mm``, ...) while active: ``with OperatorCounter() as c: ...``;
    an indexing call with a boolean mask is named ``aten.index[bool]`` (``aten.index_put[bool]``): it syncs.

    Attributes:
        calls: a ``Counter`` of operator names (the overload packet, e.g. ``aten.add``).
    """

    def __init__(self) -> None:
        super().__init__()
        self.calls: Counter[str] = Counter()

    def __torch_dispatch__(self, func: Any, types: Any, args: Any = (), kwargs: Any = None) -> Any:
        name = str(func.overloadpacket)
        if name in _INDEXING and _boolean_index(args):
            name = ("aten.index" if name == "aten.index" else "aten.index_put") + "[bool]"
        self.calls[name] += 1
        return func(*args, **(kwargs or {}))

    @property
    def total(self) -> int:
        """All calls counted."""
        return sum(self.calls.values())

    @property
    def syncs(self) -> int:
        """Calls of :data:`SYNC_OPERATORS`."""
        return int(_syncs(self.calls))


def count_calls(function: Callable[[], Any]) -> tuple[Any, Counter[str]]:
    """Run ``function()`` without autograd and count its aten calls.

    Returns:
        ``(result, calls)``: what ``function`` returned and a ``Counter`` of operator names.
    """
    with torch.no_grad(), OperatorCounter() as counter:
        result = function()
    return result, counter.calls


@dataclass(frozen=True)
class OperatorCount:
    """Operator calls of greedy ``generate()`` from one input (:func:`count_generation_operators`).

    Attributes:
        encoder_length: ``k``, the input length in tokens.
        batch_size: sequences decoded together.
        first_step_calls: aten calls of the first step (every layer's cache fill or state build, one step).
        first_step_syncs: host syncs among them (:data:`SYNC_OPERATORS`).
        calls_per_token: aten calls of one more generated token (all sequences of the batch).
        syncs_per_token: host syncs among them.
        first_step_by_operator: the first step's calls per operator name.
        per_token_by_operator: one token's calls per operator name.
    """

    encoder_length: int
    batch_size: int
    first_step_calls: int
    first_step_syncs: int
    calls_per_token: float
    syncs_per_token: float
    first_step_by_operator: dict[str, int]
    per_token_by_operator: dict[str, float]

    def summary(self) -> dict[str, Any]:
        """The record without the per-operator detail (for tables)."""
        record = asdict(self)
        record.pop("first_step_by_operator")
        record.pop("per_token_by_operator")
        return record


def _syncs(calls: Counter[str] | dict[str, float]) -> float:
    return sum(n for name, n in calls.items() if name in SYNC_OPERATORS)


def generation_inputs(
    model: PreTrainedModel, encoder_length: int, batch_size: int, tokens: Sequence[int], seed: int
) -> tuple[Any, torch.Tensor]:
    """The random encoder output (and its mask) a count generates from, after checking the count's arguments.

    Raises:
        ValueError: for ``tokens`` that are not two lengths ``(1, n)``, ``n > 1``, or an ``encoder_length``/
            ``batch_size`` below 1.
    """
    if len(tokens) != 2 or tokens[0] != 1 or tokens[1] <= 1:
        raise ValueError(f"`tokens` must be (1, n) with n > 1, got {tuple(tokens)!r}.")
    if encoder_length < 1 or batch_size < 1:
        raise ValueError(f"`encoder_length` and `batch_size` must be >= 1, got {encoder_length} and {batch_size}.")
    return random_encoder_outputs(batch_size, encoder_length, model.config.d_model, device=model.device, seed=seed)


@contextlib.contextmanager
def counted_route(as_on_accelerator: bool) -> Iterator[None]:
    """With ``as_on_accelerator``, run what an accelerator runs whatever the device (the deferred NaN/inf check,
    the accelerator steps), restoring both switches after; otherwise change nothing."""
    override, step_override = cross_attention.FINITE_CHECK_OVERRIDE, step_choice.STEP_OVERRIDE
    if as_on_accelerator:
        cross_attention.FINITE_CHECK_OVERRIDE = "deferred"
        step_choice.STEP_OVERRIDE = "accelerator"
    try:
        yield
    finally:
        cross_attention.FINITE_CHECK_OVERRIDE, step_choice.STEP_OVERRIDE = override, step_override


def count_generation_operators(
    model: PreTrainedModel, encoder_length: int, *, batch_size: int = 1, tokens: Sequence[int] = (1, 5),
    seed: int = 0, as_on_accelerator: bool = True,
) -> OperatorCount:
    """Count the aten calls of greedy ``generate()`` from a random encoder output of ``encoder_length`` tokens
    (encoder excluded, as in :func:`~srformer.benchmarks.generation.generate_fixed`).

    The first step is counted on the model as it comes, so it includes what a module makes once and keeps (the
    accelerator steps' index tables, per batch size or input length). The calls per token are counted after
    that generation, between two generations that find those tables made: the steady cost of a token (counted
    on the first generations instead, one generation's tables would be subtracted from the tokens' calls).

    Args:
        model: a T5- or BART-style seq2seq model, converted or not, in eval mode, on any device.
        encoder_length: ``k`` in tokens.
        batch_size: sequences per call.
        tokens: two generation lengths ``(1, n)``, ``n > 1``: the first gives the first step; the difference of
            the two, generated after it, the calls per token.
        seed: seed of the random encoder output.
        as_on_accelerator: count what an accelerator runs whatever the device: the NaN/inf check of a new state
            deferred to the next step (:func:`srformer.models.cross_attention.finite_check_mode`), which a CPU
            reads at once (one host read per layer, free there), and the accelerator steps of ``knn`` and
            ``block-topk`` (:mod:`srformer.attention.step_choice`), where a CPU runs steps with fewer
            microseconds but more calls. False: what this device runs.

    Returns:
        An :class:`OperatorCount`.

    Raises:
        ValueError: for ``tokens`` that are not two lengths ``1 < n``, or an ``encoder_length``/``batch_size``
            below 1.
    """
    encoder_outputs, mask = generation_inputs(model, encoder_length, batch_size, tokens, seed)
    return count_operators_from(model, encoder_outputs, mask, tokens=tokens, as_on_accelerator=as_on_accelerator)


def count_operators_from(
    model: PreTrainedModel, encoder_outputs: BaseModelOutput, attention_mask: torch.Tensor, *,
    tokens: Sequence[int] = (1, 5), as_on_accelerator: bool = True,
) -> OperatorCount:
    """:func:`count_generation_operators` from a given encoder output (``last_hidden_state`` (B, k, d_model), in the
    model's dtype and on its device) and its (B, k) attention mask: ``srformer long-bench`` counts on the encoding it
    times. ``tokens`` and ``as_on_accelerator`` as there.

    Raises:
        ValueError: for ``tokens`` that are not two lengths ``(1, n)``, ``n > 1``.
    """
    if len(tokens) != 2 or tokens[0] != 1 or tokens[1] <= 1:
        raise ValueError(f"`tokens` must be (1, n) with n > 1, got {tuple(tokens)!r}.")
    batch_size, encoder_length = attention_mask.shape
    with counted_route(as_on_accelerator):
        _, first = count_calls(lambda: generate_fixed(model, encoder_outputs, attention_mask, 1))
        _, shorter = count_calls(lambda: generate_fixed(model, encoder_outputs, attention_mask, 1))
        _, longer = count_calls(lambda: generate_fixed(model, encoder_outputs, attention_mask, tokens[1]))
    extra = tokens[1] - 1
    per_token = {name: (longer[name] - shorter[name]) / extra for name in longer | shorter}
    per_token = {name: n for name, n in per_token.items() if n}
    return OperatorCount(
        encoder_length=int(encoder_length),
        batch_size=int(batch_size),
        first_step_calls=sum(first.values()),
        first_step_syncs=int(_syncs(first)),
        calls_per_token=sum(per_token.values()),
        syncs_per_token=_syncs(per_token),
        first_step_by_operator=dict(sorted(first.items())),
        per_token_by_operator=dict(sorted(per_token.items())),
    )


def long_input_model(
    name: str, *, shape: str = "t5-small", segment_size: int = 64, target_length: int = 128, seed: int = 0
) -> PreTrainedModel:
    """A randomly initialised model of ``shape`` (its family's class: :func:`~srformer.benchmarks.variants.shape_model`)
    with the cross attention of long-input variant ``name``
    (:data:`~srformer.benchmarks.long_input_variants.LONG_INPUT_VARIANTS`; ``full`` is the unmodified model), in
    eval mode on the CPU: the models whose calls :func:`count_generation_operators` counts in ``srformer bench``.

    Raises:
        ValueError: for an unknown variant or shape.
    """
    if name not in LONG_INPUT_VARIANTS:
        raise ValueError(f"Unknown long-input variant {name!r}; choose from {', '.join(LONG_INPUT_VARIANTS)}.")
    if shape not in MODEL_SHAPES:
        raise ValueError(f"Unknown model shape {shape!r}; known shapes are {', '.join(MODEL_SHAPES)}.")
    torch.manual_seed(seed)
    model = shape_model(shape)
    options = dict(LONG_INPUT_VARIANTS[name])
    variant = options.pop("variant")
    if variant != "full":
        with quiet_schedule_warnings():
            convert(model, named_config(variant, **{"segment_size": segment_size, "target_length": target_length,
                                                    **options}))
    return model.eval()
