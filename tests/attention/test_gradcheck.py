"""Float64 gradients of every segment-based variant and ``linear`` pass ``torch.autograd.gradcheck``:
the state follows a float64 module (float32 is only the floor under reduced precision), so central
finite differences at eps=1e-6 match the analytical backward of the parallel path, with respect to
queries, keys, values and the variant's own parameters (RAF ``W``, leak, threshold; the Eq. 10 mix)."""

from __future__ import annotations

import pytest
import torch
from torch.func import functional_call

from tests.attention.test_srformer import _inputs
from tests.attention.test_variants import NAMES, _module

#: Settings that keep a variant's learned tensors small enough for a dense finite-difference Jacobian
#: (linformer's default E, F are 2 x 256 x 4096 numbers; only the first 8 columns are read here).
SMALL_SETTINGS = {"linformer": dict(projected_length=3, max_source_length=9)}


@pytest.mark.filterwarnings("ignore:An encoder input has")
# xl and compressive are left out by design: their memory segment (and compressive's compressed memory) is a
# stop-gradient copy (Transformer-XL), so their analytical key/value gradients differ from finite differences
# there (tested in test_variants and test_sparse).
@pytest.mark.parametrize("name", [name for name in NAMES if name not in ("xl", "compressive")])
def test_float64_parallel_path_passes_gradcheck(name):
    # adaptive: a span z = 0.45 * 6 = 2.7 keeps the mask's kinks (x = z, x = z + R) off the integer distances,
    # where finite differences and the one-sided derivative of the clamp would disagree
    extra = {"span_init": 0.45} if name == "adaptive" else SMALL_SETTINGS.get(name, {})
    if name in ("srformer-surrogate", "srformer-two-sided"):
        # a surrogate derivative is by definition not the finite-difference one: check the true derivative of the
        # same forward here; the surrogate's backward is checked against its float64 reference in test_raf.py
        extra = {**extra, "raf_surrogate_slope": None}
    module = _module(name, segment_size=3, target_length=5, scale=0.5, **extra)
    queries, keys, values, valid = _inputs(2, 2, 8, 5, 4, [8, 5], seed=3)
    parameters = dict(module.named_parameters())
    names = list(parameters)

    def output(q, k, v, *params):
        state = module.init_state(k, v, valid)
        return functional_call(module, dict(zip(names, params, strict=True)), (q, state))[0]

    inputs = [t.clone().requires_grad_(True) for t in (queries, keys, values)]
    inputs += [p.detach().clone().requires_grad_(True) for p in parameters.values()]
    assert all(t.dtype == torch.float64 for t in inputs)
    assert output(*inputs).dtype == torch.float64
    assert torch.autograd.gradcheck(output, tuple(inputs), eps=1e-6, atol=1e-6, rtol=1e-4)
