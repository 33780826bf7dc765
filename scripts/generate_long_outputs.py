"""generate() of many new tokens at k=4096, s=64, batch 8: best and worst of two timed calls
(t5-small shape, random weights and encoder outputs).

    OMP_NUM_THREADS=1 python scripts/generate_long_outputs.py TARGET_LENGTH NEW_TOKENS VARIANT[,VARIANT...]
"""

from __future__ import annotations

import sys
import time
import warnings

from srformer.benchmarks.generation import generate_fixed, random_encoder_outputs
from srformer.benchmarks.variants import build_model

ENCODER_LENGTH, SEGMENT_SIZE, BATCH = 4096, 64, 8


def main() -> None:
    if len(sys.argv) != 4:
        sys.exit(__doc__)
    warnings.filterwarnings("ignore")
    target_length, new_tokens, variants = int(sys.argv[1]), int(sys.argv[2]), sys.argv[3].split(",")
    encoder_outputs, mask = random_encoder_outputs(BATCH, ENCODER_LENGTH, 512)
    for variant in variants:
        model = build_model("t5-small", variant, segment_size=SEGMENT_SIZE, target_length=target_length)
        generate_fixed(model, encoder_outputs, mask, 2)  # warm-up
        seconds = []
        for _ in range(2):
            started = time.perf_counter()
            generate_fixed(model, encoder_outputs, mask, new_tokens)
            seconds.append(time.perf_counter() - started)
        print(f"{variant} T={target_length} {new_tokens} tokens: {min(seconds):.2f} / {max(seconds):.2f} s -> "
              f"{BATCH * new_tokens / min(seconds):.1f} new tokens/s (best)", flush=True)


if __name__ == "__main__":
    main()
