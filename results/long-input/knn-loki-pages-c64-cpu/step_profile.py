"""Where one layer's knn-loki step (``loki_step``) spends its time on a CPU: t5-small shape, random weights, one
random encoder output, one thread. The six layers' steps of one greedy decode position are captured, then run in
turn (each layer's tables out of cache when its turn comes, as in a decode) 20 times for the median and 10 more
under the profiler: each operator's time per layer and step (µs), summed over its calls, then by input shape.

    OMP_NUM_THREADS=1 python step_profile.py 262144 knn-loki-pages-c64
"""

import copy
import statistics
import sys
import time

import torch
from torch.profiler import ProfilerActivity, profile
from transformers.modeling_outputs import BaseModelOutput

import srformer.attention.knn as knn
import srformer.attention.knn_loki as knn_loki
from srformer.benchmarks.long_input_variants import LONG_INPUT_VARIANTS
from srformer.benchmarks.variants import quiet_schedule_warnings, shape_model
from srformer.core import SRformerConfig
from srformer.models.convert import convert

torch.set_num_threads(1)
length, name = int(sys.argv[1]), sys.argv[2]
base = shape_model("t5-small")
encoded = torch.randn(1, length, base.config.d_model, generator=torch.Generator().manual_seed(0))
model = convert(copy.deepcopy(base), SRformerConfig(**LONG_INPUT_VARIANTS[name]))
step, captured = knn_loki.loki_step, []


def capture(*args, **kwargs):
    captured.append((args, kwargs))
    return step(*args, **kwargs)


knn.loki_step = capture
with quiet_schedule_warnings(), torch.no_grad():
    model.generate(encoder_outputs=BaseModelOutput(last_hidden_state=encoded), max_new_tokens=3, min_new_tokens=3,
                   do_sample=False, num_beams=1, use_cache=True)
    layers = captured[-6:]  # the last position's six layers

    def every_layer() -> None:
        for args, kwargs in layers:
            step(*args, **kwargs)

    for _ in range(3):
        every_layer()
    seconds = []
    for _ in range(20):
        start = time.perf_counter()
        every_layer()
        seconds.append((time.perf_counter() - start) / len(layers))
    with profile(activities=[ProfilerActivity.CPU], record_shapes=True) as profiler:
        for _ in range(10):
            every_layer()
steps = 10 * len(layers)
print(f"{name} at {length:,} tokens: one layer's step, median {statistics.median(seconds) * 1e6:.0f} us")
for event in sorted(profiler.key_averages(), key=lambda event: -event.self_cpu_time_total)[:8]:
    print(f"{event.self_cpu_time_total / steps:8.0f} us  {event.count / steps:4.1f} calls  {event.key}")
rows = sorted(profiler.key_averages(group_by_input_shape=True), key=lambda event: -event.self_cpu_time_total)
for event in rows[:12]:
    print(f"{event.self_cpu_time_total / steps:8.0f} us  {event.count // steps:2d} calls  {event.key:34s} "
          f"{str(event.input_shapes)[:90]}")
