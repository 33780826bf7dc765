"""Development script (outside the package): greedy generate() of 64 tokens and of 1 token (the first step:
K/V projection or state build) from random encoder outputs, t5-small shape, k=4096, s=64, T=64, batch 8; best
of 2 each. Run it with PYTHONPATH pointing at two checkouts to compare them."""
import sys, time, torch
from srformer.benchmarks.variants import build_model, MODEL_SHAPES
from srformer.benchmarks.generation import random_encoder_outputs, generate_fixed
k, B, n = 4096, 8, 64
variants = sys.argv[1].split(",")
enc, mask = random_encoder_outputs(B, k, MODEL_SHAPES["t5-small"]["d_model"])
for v in variants:
    model = build_model("t5-small", v, segment_size=64, target_length=64)
    with torch.no_grad():
        generate_fixed(model, enc, mask, 2)
        ts = []
        for _ in range(2):
            t0 = time.perf_counter(); generate_fixed(model, enc, mask, n); ts.append(time.perf_counter() - t0)
        t1 = []
        for _ in range(2):
            t0 = time.perf_counter(); generate_fixed(model, enc, mask, 1); t1.append(time.perf_counter() - t0)
    print(f"{v:14s} gen{n} {min(ts):6.2f} s  first-step {min(t1):6.2f} s", flush=True)
    del model
