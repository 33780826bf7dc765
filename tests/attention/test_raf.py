"""The RAF neuron of Appendix A.2 (float64 modules: exactness, see tests/tolerance.py)."""

import torch

from srformer.attention import naive
from srformer.attention.raf import RecurrentAccumulateAndFire
from tests.tolerance import assert_exact


def test_fire_matches_the_appendix_pseudo_code():
    raf = RecurrentAccumulateAndFire(2, leak_init=0.5, threshold_init=0.2).double()
    mem = torch.tensor([[0.1, -0.3], [0.0, 0.4]], dtype=torch.float64)
    x = torch.tensor([[0.3, 0.1], [-0.1, 0.05]], dtype=torch.float64)
    new_mem, out = raf.fire(mem, x)
    leak, threshold = raf.leak.detach(), raf.threshold.detach()  # 0.5 and 0.2 rounded to float32, then widened
    expected_mem, expected_out = naive.raf_fire(mem, x, leak, threshold)
    assert_exact(out, expected_out, "output")
    assert_exact(new_mem, expected_mem, "membrane")


def test_project_is_a_bias_free_linear_on_the_last_axis():
    raf = RecurrentAccumulateAndFire(3).double()
    p = torch.randn(2, 3, 3, dtype=torch.float64)
    assert raf.linear.bias is None
    assert_exact(raf.project(p), p @ raf.linear.weight.T, "W P")


def test_scan_only_fires_where_asked_and_carries_state_elsewhere():
    torch.manual_seed(0)
    raf = RecurrentAccumulateAndFire(2)
    x = torch.randn(1, 1, 3, 2, 2)
    fires = torch.tensor([[True, False, True]])
    zeros = torch.zeros(1, 1, 2, 2)
    outputs, mem, out = raf.scan(x, fires, zeros, zeros)
    m0, o0 = raf.fire(zeros, x[:, :, 0])
    m2, o2 = raf.fire(m0, x[:, :, 2])
    assert torch.equal(outputs[:, :, 0], o0) and torch.equal(outputs[:, :, 1], o0)  # the same fire() calls
    assert torch.equal(outputs[:, :, 2], o2) and torch.equal(mem, m2) and torch.equal(out, o2)


def test_gradients_reach_leak_threshold_and_linear():
    torch.manual_seed(0)
    raf = RecurrentAccumulateAndFire(4)
    x = raf.project(torch.randn(2, 1, 3, 4, 4))
    outputs, _, _ = raf.scan(x, torch.ones(2, 3, dtype=torch.bool), torch.zeros(2, 1, 4, 4), torch.zeros(2, 1, 4, 4))
    outputs.sum().backward()
    for p in (raf.leak, raf.threshold, raf.linear.weight):
        assert p.grad is not None and p.grad.abs().sum() > 0


def test_linear_init_scale_multiplies_the_default_initialisation():
    torch.manual_seed(0)
    full = RecurrentAccumulateAndFire(8).linear.weight
    torch.manual_seed(0)
    small = RecurrentAccumulateAndFire(8, linear_init_scale=1e-3).linear.weight
    # Both are one uniform draw u of the same generator state, mapped to -b + 2 b u in float32 with the bound b
    # = 1/sqrt(8) and 1e-3/sqrt(8): each mapping (and the product full * 1e-3) rounds a few times at magnitude
    # <= 2b, so they agree to well within 16 float32 unit roundoffs of the small bound.
    bound = 1e-3 / 8**0.5
    assert small.abs().max() <= bound
    assert (small - full * 1e-3).abs().max() <= 16 * 2.0**-24 * bound


def test_reset_parameters_restores_the_initial_values_after_meta_construction():
    """Built on the meta device (no storage), then given memory with to_empty(): reset_parameters of the
    neuron and of W restore the eager initial values (leak, threshold exactly; W inside its bound)."""
    eager = RecurrentAccumulateAndFire(8, leak_init=0.7, threshold_init=0.2, linear_init_scale=1e-3)
    with torch.device("meta"):
        raf = RecurrentAccumulateAndFire(8, leak_init=0.7, threshold_init=0.2, linear_init_scale=1e-3)
    raf.to_empty(device="cpu")
    raf.reset_parameters()
    raf.linear.reset_parameters()
    assert torch.equal(raf.leak, eager.leak) and torch.equal(raf.threshold, eager.threshold)
    assert raf.linear.weight.abs().max() <= 1e-3 / 8**0.5
