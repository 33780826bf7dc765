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

Run as ``python -m srformer.benchmarks.long_input_probe``. Peak memory is read as in
:mod:`srformer.benchmarks.memory_probe` (``VmHWM`` after a reset; ``MALLOC_MMAP_THRESHOLD_`` pinned by the parent).
"""

from __future__ import annotations

import copy
import gc
import json
import sys
import time
from typing import Any

import torch
from transformers import StoppingCriteria, StoppingCriteriaList, T5ForConditionalGeneration
from transformers.modeling_outputs import BaseModelOutput

from srformer.benchmarks.generation import cross_attention_cache_bytes
from srformer.benchmarks.memory_probe import reset_peak, status_bytes
from srformer.benchmarks.variants import quiet_schedule_warnings, t5_config
from srformer.core import SRformerConfig
from srformer.models.convert import convert
from srformer.models.memory_estimate import estimate_decode_memory


class _StepClock(StoppingCriteria):
    """Records the time after each generated token (generate() calls its stopping criteria once per step)."""

    def __init__(self) -> None:
        self.times: list[float] = []

    def __call__(self, input_ids: torch.Tensor, scores: torch.Tensor, **kwargs: Any) -> torch.Tensor:
        self.times.append(time.perf_counter())
        return torch.zeros(input_ids.shape[0], dtype=torch.bool, device=input_ids.device)


def _peak_since(before: int) -> int:
    return max(0, status_bytes("VmHWM") - before)


def _baseline() -> int:
    gc.collect()
    if not reset_peak():
        raise RuntimeError("The long-input benchmark reads peak memory from /proc/self (Linux >= 4.0).")
    return status_bytes("VmRSS")


def _emit(record: dict) -> None:
    print(json.dumps(record), flush=True)


def main() -> int:
    """Run the job read from standard input; print one JSON line per measurement."""
    job = json.loads(sys.stdin.read())
    torch.manual_seed(job["seed"])
    base = T5ForConditionalGeneration(t5_config(job["shape"])).eval()
    length, new_tokens = job["length"], job["new_tokens"]
    ids = torch.randint(2, base.config.vocab_size, (1, length), generator=torch.Generator().manual_seed(job["seed"]))
    windows = job["windows"]

    def converted(options: dict) -> Any:
        config = SRformerConfig(**options, **windows)
        return convert(copy.deepcopy(base), config)

    with quiet_schedule_warnings(), torch.no_grad():
        # the encoder is the same for every variant; one with a fixed-size state, so that the memory check made
        # before encoding (srformer.models.memory_estimate) does not refuse it for the decode states of others
        encoder_model = converted({"variant": "linear"})
        before = _baseline()
        started = time.perf_counter()
        encoded = encoder_model.get_encoder()(input_ids=ids).last_hidden_state
        seconds = time.perf_counter() - started
        _emit({"kind": "encode", "length": length, "seconds": seconds, "peak_bytes": _peak_since(before),
               "output_bytes": encoded.numel() * encoded.element_size()})
        del encoder_model
        for name in job["variants"]:
            options = job["options"][name]
            config = SRformerConfig(**options, **windows)
            estimate = estimate_decode_memory(config, base.config, 1, length, torch.float32)
            record: dict[str, Any] = {"kind": "decode", "variant": name, "length": length,
                                      "estimated_bytes": estimate.total - estimate.encoder_output}
            if estimate.total > job["memory_budget"]:
                _emit({**record, "refused": True})
                continue
            model = converted(options)
            clock = _StepClock()
            before = _baseline()
            started = time.perf_counter()
            output = model.generate(
                encoder_outputs=BaseModelOutput(last_hidden_state=encoded), max_new_tokens=new_tokens,
                min_new_tokens=new_tokens, do_sample=False, num_beams=1, use_cache=True,
                return_dict_in_generate=True, stopping_criteria=StoppingCriteriaList([clock]),
            )
            peak = _peak_since(before)
            first = clock.times[0] - started
            per_token = (clock.times[-1] - clock.times[0]) / max(1, len(clock.times) - 1)
            state = cross_attention_cache_bytes(output.past_key_values, encoded)
            _emit({**record, "refused": False, "first_token_seconds": first, "seconds_per_token": per_token,
                   "peak_bytes": peak, "state_bytes": state, "tokens": int(output.sequences.shape[1] - 1)})
            del model, output
        for name in job["end_to_end"]:
            model = converted(job["options"][name])
            before = _baseline()
            started = time.perf_counter()
            sequences = model.generate(input_ids=ids, max_new_tokens=new_tokens, min_new_tokens=new_tokens,
                                       do_sample=False, num_beams=1)
            _emit({"kind": "end_to_end", "variant": name, "length": length,
                   "seconds": time.perf_counter() - started, "peak_bytes": _peak_since(before),
                   "tokens": int(sequences.shape[1] - 1)})
            del model
    return 0


if __name__ == "__main__":
    sys.exit(main())
