"""Median time of one layer's knn-loki step (``loki_step``) in a greedy decode: t5-small shape, random weights, one
random encoder output, one CPU thread. Run it once per checkout to compare two versions of the step, alternating:

    OMP_NUM_THREADS=1 PYTHONPATH=OTHER_CHECKOUT/src python step_time.py 262144 knn-loki-pages before
    OMP_NUM_THREADS=1 python step_time.py 262144 knn-loki-pages after
"""

import copy
import statistics
import sys
import time

import torch
from transformers.modeling_outputs import BaseModelOutput

import srformer.attention.knn as knn
import srformer.attention.knn_loki as knn_loki
from srformer.benchmarks.long_input_variants import LONG_INPUT_VARIANTS
from srformer.benchmarks.variants import quiet_schedule_warnings, shape_model
from srformer.core import SRformerConfig
from srformer.models.convert import convert

torch.set_num_threads(1)
length, name, tag = int(sys.argv[1]), sys.argv[2], sys.argv[3]
base = shape_model("t5-small")
encoded = torch.randn(1, length, base.config.d_model, generator=torch.Generator().manual_seed(0))
model = convert(copy.deepcopy(base), SRformerConfig(**LONG_INPUT_VARIANTS[name]))
step, seconds = knn_loki.loki_step, []


def timed(*args, **kwargs):
    start = time.perf_counter()
    output = step(*args, **kwargs)
    seconds.append(time.perf_counter() - start)
    return output


knn.loki_step = timed


def generate(tokens: int) -> float:
    start = time.perf_counter()
    model.generate(encoder_outputs=BaseModelOutput(last_hidden_state=encoded), max_new_tokens=tokens,
                   min_new_tokens=tokens, do_sample=False, num_beams=1, use_cache=True)
    return time.perf_counter() - start


with quiet_schedule_warnings(), torch.no_grad():
    first = generate(1)  # the build and the first token
    seconds.clear()
    for _ in range(3):
        generate(17)
print(f"{tag} {name} {length}: one layer's step, median {statistics.median(seconds) * 1e6:.0f} us; "
      f"first token {first:.1f} s")
