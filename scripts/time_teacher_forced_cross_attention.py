"""Teacher-forced cross attention alone: one t5-small-sized layer, forward + backward, k=1024, q=128,
batch 1, seven paired repeats; prints each variant's time / full SDPA's (min / median / max) and, given a name
such as `srformer-16`, that variant's torch.profiler table.

    OMP_NUM_THREADS=1 python scripts/time_teacher_forced_cross_attention.py srformer-16
"""

from __future__ import annotations

import statistics
import sys
import time
import warnings

import torch
from torch.profiler import ProfilerActivity, profile

from srformer.benchmarks.variants import build_model, first_cross_attention

ENCODER_LENGTH, QUERIES, REPEATS = 1024, 128, 7
CELLS = [("full-sdpa", None), ("segmented", 16), ("srformer", 16), ("segmented", 64), ("srformer", 64)]


def main() -> None:
    warnings.filterwarnings("ignore")
    torch.manual_seed(0)
    encoder_states = torch.randn(1, ENCODER_LENGTH, 512)
    hidden = torch.randn(1, QUERIES, 512)
    modules = {}
    for variant, segment_size in CELLS:
        model = build_model("t5-small", variant, segment_size=segment_size or 16, target_length=128).train()
        modules[f"{variant}-{segment_size}"] = first_cross_attention(model)

    def step(module) -> float:
        started = time.perf_counter()
        states = hidden.clone().requires_grad_(True)
        output = module(states, None, key_value_states=encoder_states)[0]
        output.square().mean().backward()
        return time.perf_counter() - started

    for module in modules.values():
        step(module)  # warm-up
    samples: dict[str, list[float]] = {name: [] for name in modules}
    for _ in range(REPEATS):  # paired: every variant once per round
        for name, module in modules.items():
            samples[name].append(step(module))
    full = samples["full-sdpa-None"]
    for name, times in samples.items():
        ratios = sorted(a / b for a, b in zip(times, full, strict=True))
        print(f"{name}: median {statistics.median(times) * 1e3:.1f} ms; time / full's: min {ratios[0]:.2f} "
              f"median {statistics.median(ratios):.2f} max {ratios[-1]:.2f}")
    if len(sys.argv) > 1:
        with profile(activities=[ProfilerActivity.CPU]) as profiled:
            step(modules[sys.argv[1]])
        print(profiled.key_averages().table(sort_by="self_cpu_time_total", row_limit=18))


if __name__ == "__main__":
    main()
