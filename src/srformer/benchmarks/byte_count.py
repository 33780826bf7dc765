"""Bytes a decoding step moves: a device-independent measure of compiled GPU cost at long inputs.

Compiled (static cache, CUDA graphs), a long-input decoder step no longer pays a launch per operator call
(:mod:`srformer.benchmarks.operator_count`); once the encoder's keys and values outweigh the decoder, it costs the
bytes it moves through the GPU's memory. Counted here on any device through a
:class:`~torch.utils._python_dispatch.TorchDispatchMode`, two measures per step:

- **eager bytes**: for every aten call that is not a view, the distinct bytes of its tensor inputs and outputs (a
  broadcast view counts once); an indexing call (``index``, ``gather``, ``index_select``, ``embedding``,
  ``take_along_dim``) counts what it picks, read and written, and its indices; a call that takes only its input's
  shape (``zeros_like``, ``new_empty``, ...) counts what it writes, not its input; an ``embedding_bag`` the rows it
  reads (one per index), its output and its other arguments; an operator that fuses its pick into a product
  (:mod:`srformer.attention.gathered`) the rows or entries it picks
  (:data:`~srformer.attention.gathered.PICKED_BYTES`), its output and its other arguments. Intermediates included:
  what the eager step moves.
- **persistent bytes**: the part of the inputs that existed before the step began: weights, the encoder output and
  the cross-attention state (and the decoder's own cache), which a fused kernel must read whatever it fuses; an
  indexing call or a bag of such a tensor counts the rows it reads. Counted per call: a tensor read by two calls
  counts twice.

A step begins at each call of the decoder (a forward pre-hook), so the state a first step builds is persistent for
the steps after it. Two quantities per model and input length (:func:`count_generation_bytes`), as for the calls:
the first step (every layer's cache fill or state build, then one step) and each further generated token.
"""

from __future__ import annotations

from collections import Counter
from collections.abc import Callable, Sequence
from dataclasses import asdict, dataclass
from typing import Any

import torch
from torch.utils._python_dispatch import TorchDispatchMode
from torch.utils._pytree import tree_flatten
from transformers import PreTrainedModel

from srformer.attention import step_choice
from srformer.attention.gathered import PICKED_BYTES
from srformer.benchmarks.generation import generate_fixed
from srformer.benchmarks.operator_count import counted_route, generation_inputs

__all__ = ["ByteCount", "ByteCounter", "count_generation_bytes"]

#: Calls that make a view (no bytes moved).
VIEW_OPERATORS: frozenset[str] = frozenset({
    "view", "_unsafe_view", "expand", "slice", "select", "t", "transpose", "permute", "unsqueeze", "squeeze",
    "as_strided", "alias", "detach", "lift_fresh", "unbind", "split", "split_with_sizes", "chunk", "narrow",
    "reshape", "view_as", "expand_as", "_reshape_alias", "diagonal", "movedim", "unfold", "flatten",
})
#: Calls that read only the rows they pick of their first argument, and write them.
PICKING_OPERATORS: frozenset[str] = frozenset({"gather", "index", "index_select", "embedding", "take_along_dim"})
#: Calls that take their tensor inputs' shape, dtype and device only: they read none of their data. Those that fill
#: their output write it; ``empty_like`` and ``new_empty`` write nothing.
SHAPE_ONLY_OPERATORS: frozenset[str] = frozenset({
    "empty_like", "zeros_like", "ones_like", "full_like", "rand_like", "randn_like", "randint_like", "new_empty",
    "new_empty_strided", "new_zeros", "new_ones", "new_full",
})
#: Of those, the calls that leave their output unwritten.
UNWRITTEN_OPERATORS: frozenset[str] = frozenset({"empty_like", "new_empty", "new_empty_strided"})
#: Calls that read the rows their second argument names of their first argument and write a sum of them (a bag):
#: the rows read are counted, not the (smaller) output.
BAG_OPERATORS: frozenset[str] = frozenset({
    "embedding_bag", "_embedding_bag", "_embedding_bag_forward_only",
})


def distinct_bytes(value: Any) -> int:
    """Bytes of the distinct elements a tensor addresses (a broadcast axis, stride 0, counts once); 0 for anything
    else."""
    if not isinstance(value, torch.Tensor):
        return 0
    count = 1
    for size, stride in zip(value.shape, value.stride(), strict=True):
        if stride != 0:
            count *= size
    return count * value.element_size()


def _storage(value: torch.Tensor) -> int:
    return value.untyped_storage().data_ptr()


class ByteCounter(TorchDispatchMode):
    """Counts eager and persistent bytes by operator name while active (module docstring):
    ``with ByteCounter(decoder) as c: ...``.

    Args:
        decoder: the module whose every call begins a step (a pre-hook is registered while the counter is active),
            or None: one step, begun when the counter is entered.

    Attributes:
        eager: ``Counter`` of operator name (``aten.mm``, ...) -> bytes its calls moved.
        persistent: ``Counter`` of operator name -> bytes its calls read from tensors made before the step.
    """

    def __init__(self, decoder: torch.nn.Module | None = None) -> None:
        super().__init__()
        self.eager: Counter[str] = Counter()
        self.persistent: Counter[str] = Counter()
        self._produced: set[int] = set()
        self._decoder = decoder
        self._hook: Any = None

    def __enter__(self) -> ByteCounter:
        self._produced = set()
        if self._decoder is not None:
            self._hook = self._decoder.register_forward_pre_hook(lambda *_: self._produced.clear())
        super().__enter__()
        return self

    def __exit__(self, *exc: Any) -> None:
        super().__exit__(*exc)
        if self._hook is not None:
            self._hook.remove()
            self._hook = None

    def __torch_dispatch__(self, func: Any, types: Any, args: Any = (), kwargs: Any = None) -> Any:
        kwargs = kwargs or {}
        name = str(func.overloadpacket)
        short = name.split(".")[-1]
        if short in VIEW_OPERATORS:  # moves nothing: no bookkeeping either
            return func(*args, **kwargs)
        persistent = [t for t in tree_flatten((args, kwargs))[0]
                      if isinstance(t, torch.Tensor) and _storage(t) not in self._produced]
        out = func(*args, **kwargs)
        outputs = [t for t in tree_flatten(out)[0] if isinstance(t, torch.Tensor)]
        written = sum(distinct_bytes(t) for t in outputs)
        fused = PICKED_BYTES.get(name)
        if (fused is not None or short in BAG_OPERATORS) and len(args) > 1 and isinstance(args[0], torch.Tensor):
            table, rest = args[0], tree_flatten((args[1:], kwargs))[0]
            if fused is not None:
                read = fused(args)
            else:
                read = args[1].numel() * distinct_bytes(table[0]) if table.dim() > 0 and table.shape[0] else 0
            self.eager[name] += read + written + sum(distinct_bytes(t) for t in rest)
            self.persistent[name] += (read if any(t is table for t in persistent) else 0) + sum(
                distinct_bytes(t) for t in rest if any(t is p for p in persistent))
        elif short in SHAPE_ONLY_OPERATORS:  # reads no input: writes its output (or nothing)
            self.eager[name] += 0 if short in UNWRITTEN_OPERATORS else written
            self.persistent[name] += 0  # listed, as every call, with its (nil) persistent bytes
        elif short in PICKING_OPERATORS and args and isinstance(args[0], torch.Tensor):
            source = args[0]
            indices = tree_flatten((args[1:], kwargs))[0]
            self.eager[name] += 2 * written + sum(distinct_bytes(t) for t in indices)
            self.persistent[name] += (written if any(t is source for t in persistent) else 0) + sum(
                distinct_bytes(t) for t in indices if any(t is p for p in persistent))
        else:
            self.eager[name] += written + sum(distinct_bytes(t) for t in tree_flatten((args, kwargs))[0])
            self.persistent[name] += sum(distinct_bytes(t) for t in persistent)
        self._produced.update(_storage(t) for t in outputs)
        return out

    @property
    def eager_total(self) -> int:
        """All eager bytes counted."""
        return sum(self.eager.values())

    @property
    def persistent_total(self) -> int:
        """All persistent bytes counted."""
        return sum(self.persistent.values())


@dataclass(frozen=True)
class ByteCount:
    """Bytes of greedy ``generate()`` from one input (:func:`count_generation_bytes`), in bytes.

    Attributes:
        encoder_length: ``k``, the input length in tokens.
        batch_size: sequences decoded together.
        route: ``"accelerator"`` or ``"cpu"`` (:mod:`srformer.attention.step_choice`).
        first_step_bytes: eager bytes of the first step (every layer's cache fill or state build, one step).
        first_step_persistent_bytes: persistent bytes among them (weights and the encoder output).
        bytes_per_token: eager bytes of one more generated token.
        persistent_bytes_per_token: persistent bytes among them (weights, encoder output, states, caches).
        per_token_by_operator: operator name -> (eager, persistent) bytes of one token.
        first_step_by_operator: operator name -> (eager, persistent) bytes of the first step.
    """

    encoder_length: int
    batch_size: int
    route: str
    first_step_bytes: int
    first_step_persistent_bytes: int
    bytes_per_token: float
    persistent_bytes_per_token: float
    per_token_by_operator: dict[str, tuple[float, float]]
    first_step_by_operator: dict[str, tuple[int, int]]

    def summary(self) -> dict[str, Any]:
        """The record without the per-operator detail (for tables)."""
        record = asdict(self)
        record.pop("per_token_by_operator")
        record.pop("first_step_by_operator")
        return record


def _counted(model: PreTrainedModel, run: Callable[[], Any]) -> ByteCounter:
    with torch.no_grad(), ByteCounter(model.get_decoder()) as counter:
        run()
    return counter


def count_generation_bytes(
    model: PreTrainedModel, encoder_length: int, *, batch_size: int = 1, tokens: Sequence[int] = (1, 5),
    seed: int = 0, as_on_accelerator: bool = True,
) -> ByteCount:
    """Count the bytes of greedy ``generate()`` from a random encoder output of ``encoder_length`` tokens (encoder
    excluded, as :func:`~srformer.benchmarks.operator_count.count_generation_operators` counts calls): the first step
    on the model as it comes; per token, the difference of two later generations of ``tokens`` lengths.

    Args:
        model: a T5- or BART-style seq2seq model, converted or not, in eval mode, on any device.
        encoder_length: ``k`` in tokens.
        batch_size: sequences per call.
        tokens: two generation lengths ``(1, n)``, ``n > 1``.
        seed: seed of the random encoder output.
        as_on_accelerator: count the route an accelerator runs (its steps, the deferred NaN/inf check) whatever the
            device; False: the route of the model's device.

    Returns:
        A :class:`ByteCount`.

    Raises:
        ValueError: for ``tokens`` that are not ``(1, n)`` with ``n > 1``, or an ``encoder_length``/``batch_size``
            below 1.
    """
    encoder_outputs, mask = generation_inputs(model, encoder_length, batch_size, tokens, seed)
    with counted_route(as_on_accelerator):
        first = _counted(model, lambda: generate_fixed(model, encoder_outputs, mask, 1))
        shorter = _counted(model, lambda: generate_fixed(model, encoder_outputs, mask, 1))
        longer = _counted(model, lambda: generate_fixed(model, encoder_outputs, mask, tokens[1]))
    extra = tokens[1] - 1
    per_token = {
        name: ((longer.eager[name] - shorter.eager[name]) / extra,
               (longer.persistent[name] - shorter.persistent[name]) / extra)
        for name in longer.eager | shorter.eager
    }
    return ByteCount(
        encoder_length=encoder_length,
        batch_size=batch_size,
        route="accelerator" if as_on_accelerator else step_choice.step_kind(model.device),
        first_step_bytes=first.eager_total,
        first_step_persistent_bytes=first.persistent_total,
        bytes_per_token=sum(eager for eager, _ in per_token.values()),
        persistent_bytes_per_token=sum(persistent for _, persistent in per_token.values()),
        per_token_by_operator={name: value for name, value in sorted(per_token.items()) if any(value)},
        first_step_by_operator={name: (first.eager[name], first.persistent[name]) for name in sorted(first.eager)},
    )
