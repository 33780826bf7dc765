"""Child process of :func:`srformer.benchmarks.long_input.run_long_input`: one input length, every variant.

Reads one JSON job on standard input (:meth:`srformer.benchmarks.long_input.LongInputSettings.job`) and prints one
JSON line per measurement as it finishes:

- ``{"kind": "encode", ...}``: the input encoded once, in windows, by the model's own chunked encoder (seconds, peak
  resident memory above the level before, the encoder output's bytes);
- ``{"kind": "decode", "variant": ...}``: greedy ``generate()`` of ``new_tokens`` tokens from that encoder output,
  for each variant (time to the first token, which builds the cross-attention states, then seconds per token; peak
  resident memory above the level before, which holds the weights and the encoder output; the cache's
  cross-attention bytes), or ``"refused"`` with the estimate when the state would not fit in the memory budget;
- ``{"kind": "end_to_end", "variant": ...}``: ``generate(input_ids=...)`` from the raw tokens for the variants asked
  for (the encoder runs inside generate(); total seconds and peak memory).

- ``{"kind": "max_batch", "variant": ...}``: with ``max_batch``, the largest batch that fits: on CUDA, measured
  (two tokens at each batch tried, doubling then bisecting, out-of-memory caught); on the CPU, estimated
  (:func:`~srformer.models.memory_estimate.estimate_decode_memory` against the memory budget).
- ``{"kind": "operators", "variant": ...}``: with ``operators``, the aten operator calls of the first step and of
  each further token, counted on the same encoder output after the timed generation
  (:func:`~srformer.benchmarks.operator_count.count_operators_from`): as an accelerator runs the step
  (``calls_per_token``, ...) and as this device does (``device_calls_per_token``, ...).

The model is the job's shape's family (:func:`~srformer.benchmarks.variants.shape_model`: T5, LED or LongT5); its
encoder reads the input in windows of ``encoder_window`` tokens, or, with ``encoder_window`` None, as srformer's
conversion leaves it by default (LED: whole up to its positions; LongT5: whole).

The job names the device, dtype (the model and its encoder output), batch size (copies of the one encoded input)
and whether decoding is compiled (a static cache and transformers' compiled step; one untimed call compiles first).
Run as ``python -m srformer.benchmarks.long_input_probe``. The child runs under the C library's default allocator,
as a user's process does, so the times include what that allocator costs (a pinned mmap threshold, as
:mod:`srformer.benchmarks.memory` uses, maps and faults in every large temporary again at each step: it doubled
``quest-tree``'s time per token at 16,384 tokens). Peak memory on the CPU is read as in
:mod:`srformer.benchmarks.memory_probe` (``VmHWM`` after a reset), each baseline taken after the memory ``malloc``
holds free is given back (:func:`~srformer.benchmarks.memory_probe.return_free_memory`), so that what an earlier
step freed does not hide a later one's peak; memory the allocator keeps within one measurement counts, as it does
in a user's process. On CUDA it is the allocator's peak (``max_memory_allocated``) above the level before.
"""

from __future__ import annotations

import copy
import gc
import json
import sys
import time
from collections.abc import Callable
from typing import Any

import torch
from transformers import StoppingCriteria, StoppingCriteriaList
from transformers.modeling_outputs import BaseModelOutput

from srformer.benchmarks.generation import compiled_generation_options, cross_attention_cache_bytes
from srformer.benchmarks.memory_probe import reset_peak, return_free_memory, status_bytes
from srformer.benchmarks.operator_count import count_operators_from
from srformer.benchmarks.variants import quiet_schedule_warnings, shape_model
from srformer.core import SRformerConfig
from srformer.models.convert import convert
from srformer.models.memory_estimate import available_memory, estimate_decode_memory


class StepClock(StoppingCriteria):
    """Records the time after each generated token (generate() calls its stopping criteria once per step), in
    :attr:`times` (``time.perf_counter()`` seconds); never stops generation."""

    def __init__(self) -> None:
        self.times: list[float] = []

    def __call__(self, input_ids: torch.Tensor, scores: torch.Tensor, **kwargs: Any) -> torch.Tensor:
        self.times.append(time.perf_counter())
        return torch.zeros(input_ids.shape[0], dtype=torch.bool, device=input_ids.device)


class _Memory:
    """Peak memory above a baseline on the job's device: CUDA's allocator (``max_memory_allocated``) on a GPU, the
    process's resident set (``VmHWM`` after a reset) on the CPU."""

    def __init__(self, device: torch.device) -> None:
        self.device = device

    def baseline(self) -> int:
        gc.collect()
        if self.device.type == "cuda":
            torch.cuda.synchronize(self.device)
            torch.cuda.empty_cache()
            torch.cuda.reset_peak_memory_stats(self.device)
            return torch.cuda.memory_allocated(self.device)
        return_free_memory()
        if not reset_peak():
            raise RuntimeError("The long-input benchmark reads peak memory from /proc/self (Linux >= 4.0).")
        return status_bytes("VmRSS")

    def peak_since(self, before: int) -> int:
        if self.device.type == "cuda":
            torch.cuda.synchronize(self.device)
            return max(0, torch.cuda.max_memory_allocated(self.device) - before)
        return max(0, status_bytes("VmHWM") - before)


def _emit(record: dict) -> None:
    print(json.dumps(record), flush=True)


def _generate(model: Any, encoded: torch.Tensor, new_tokens: int, compiled: bool, clock: StepClock | None = None):
    return model.generate(
        encoder_outputs=BaseModelOutput(last_hidden_state=encoded), max_new_tokens=new_tokens,
        min_new_tokens=new_tokens, do_sample=False, num_beams=1, use_cache=True, return_dict_in_generate=True,
        stopping_criteria=StoppingCriteriaList([clock] if clock is not None else []),
        **compiled_generation_options(encoded.device, compiled),
    )


def _fits(model: Any, encoded: torch.Tensor, batch: int, compiled: bool) -> bool:
    """Whether two tokens of generation at ``batch`` run without running out of CUDA memory."""
    try:
        _generate(model, encoded[:1].expand(batch, -1, -1).contiguous(), 2, compiled)
        return True
    except torch.OutOfMemoryError:
        return False
    finally:
        gc.collect()
        torch.cuda.empty_cache()


def _largest_batch(fits: Callable[[int], bool], start: int, cap: int) -> int:
    """The largest batch in ``[1, cap]`` for which ``fits`` holds (doubling from ``start``, then bisection),
    assuming it holds for every smaller batch; 0 when it holds for none."""
    low, batch = 0, max(1, min(start, cap))
    while batch <= cap and fits(batch):
        low, batch = batch, batch * 2
    high = min(batch, cap + 1)  # the first batch that failed, or past the cap
    while high - low > 1:
        middle = (low + high) // 2
        if fits(middle):
            low = middle
        else:
            high = middle
    return low


def _max_batch(
    model: Any, encoded: torch.Tensor, compiled: bool, config: SRformerConfig, model_config: Any, start: int,
    dtype: torch.dtype, budget: int,
) -> tuple[int, str]:
    """The largest batch that fits, and how it was found: tried on CUDA (:func:`_fits`), estimated on the CPU."""
    if encoded.device.type == "cuda":
        largest = _largest_batch(lambda n: _fits(model, encoded, n, compiled), start, MAX_BATCH_CAP)
        return largest, "measured: two tokens at each tried batch, the largest that ran"
    length = encoded.shape[1]

    def fits(n: int) -> bool:
        return estimate_decode_memory(config, model_config, n, length, dtype).total <= budget

    return _largest_batch(fits, start, MAX_BATCH_CAP), "estimated: srformer.models.memory_estimate against the budget"


#: The largest batch the ``max_batch`` search tries.
MAX_BATCH_CAP = 4096

#: Generation lengths of the operator count: the first step, and ``n`` tokens for the calls per token.
OPERATOR_TOKENS = (1, 4)


def _operators(model: Any, encoded: torch.Tensor) -> dict[str, Any]:
    """The operator calls of generating from ``encoded`` (B, k, d_model): first step and per token, as an accelerator
    runs the step and (``device_...``) as this device does (:func:`count_operators_from`)."""
    outputs = BaseModelOutput(last_hidden_state=encoded)
    mask = torch.ones(encoded.shape[:2], dtype=torch.long, device=encoded.device)
    record: dict[str, Any] = {"tokens_counted": list(OPERATOR_TOKENS)}
    for prefix, accelerator in (("", True), ("device_", False)):
        count = count_operators_from(model, outputs, mask, tokens=OPERATOR_TOKENS, as_on_accelerator=accelerator)
        record.update({prefix + key: count.summary()[key] for key in (
            "first_step_calls", "first_step_syncs", "calls_per_token", "syncs_per_token")})
    return record


def main() -> int:
    """Run the job read from standard input; print one JSON line per measurement."""
    job = json.loads(sys.stdin.read())
    device = torch.device(job.get("device", "cpu"))
    dtype = getattr(torch, job.get("dtype", "float32"))
    batch, compiled = int(job.get("batch_size", 1)), bool(job.get("compiled", False))
    memory = _Memory(device)
    torch.manual_seed(job["seed"])
    base = shape_model(job["shape"])
    length, new_tokens = job["length"], job["new_tokens"]
    ids = torch.randint(2, base.config.vocab_size, (1, length), generator=torch.Generator().manual_seed(job["seed"]))
    windows = job["windows"]

    def converted(options: dict) -> Any:
        config = SRformerConfig(**options, **windows)
        model: Any = convert(copy.deepcopy(base), config)  # PreTrainedModel.to is typed with an unbound self
        return model.to(device=device, dtype=dtype)

    with quiet_schedule_warnings(), torch.no_grad():
        # the encoder is the same for every variant; one with a fixed-size state, so that the memory check made
        # before encoding (srformer.models.memory_estimate) does not refuse it for the decode states of others
        encoder_model = converted({"variant": "linear"})
        before = memory.baseline()
        started = time.perf_counter()
        encoded = encoder_model.get_encoder()(input_ids=ids.to(device)).last_hidden_state
        if device.type == "cuda":
            torch.cuda.synchronize(device)
        seconds = time.perf_counter() - started
        _emit({"kind": "encode", "length": length, "seconds": seconds, "peak_bytes": memory.peak_since(before),
               "output_bytes": encoded.numel() * encoded.element_size()})
        del encoder_model
        encoded = encoded.expand(batch, -1, -1).contiguous()  # the batch: copies of one encoded input
        budget = job["memory_budget"]
        if budget is None:
            budget = available_memory(device) or 2**62
        for name in job["variants"]:
            options = job["options"][name]
            config = SRformerConfig(**options, **windows)
            estimate = estimate_decode_memory(config, base.config, batch, length, dtype)
            record: dict[str, Any] = {"kind": "decode", "variant": name, "length": length,
                                      "estimated_bytes": estimate.total - estimate.encoder_output}
            if estimate.total > budget:
                _emit({**record, "refused": True})
                continue
            model = converted(options)
            if compiled:  # the first call compiles (not timed); the timed one reuses its graphs
                _generate(model, encoded, new_tokens, compiled)
            clock = StepClock()
            before = memory.baseline()
            started = time.perf_counter()
            output = _generate(model, encoded, new_tokens, compiled, clock)
            peak = memory.peak_since(before)
            first = clock.times[0] - started
            per_token = (clock.times[-1] - clock.times[0]) / max(1, len(clock.times) - 1)
            state = cross_attention_cache_bytes(output.past_key_values, encoded)
            _emit({**record, "refused": False, "first_token_seconds": first, "seconds_per_token": per_token,
                   "peak_bytes": peak, "state_bytes": state, "tokens": int(output.sequences.shape[1] - 1)})
            del output
            if job.get("max_batch"):
                largest, how = _max_batch(model, encoded, compiled, config, base.config, batch, dtype, budget)
                _emit({"kind": "max_batch", "variant": name, "length": length, "max_batch": largest, "how": how})
            if job.get("operators"):
                _emit({"kind": "operators", "variant": name, "length": length, **_operators(model, encoded)})
            del model
        for name in job["end_to_end"]:
            model = converted(job["options"][name])
            before = memory.baseline()
            started = time.perf_counter()
            sequences = model.generate(input_ids=ids.to(device), max_new_tokens=new_tokens,
                                       min_new_tokens=new_tokens, do_sample=False, num_beams=1)
            _emit({"kind": "end_to_end", "variant": name, "length": length,
                   "seconds": time.perf_counter() - started, "peak_bytes": memory.peak_since(before),
                   "tokens": int(sequences.shape[1] - 1)})
            del model
    return 0


if __name__ == "__main__":
    sys.exit(main())
