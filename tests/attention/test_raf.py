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


# ---------------------------------------------------------------- beyond the paper: two-sided neuron, surrogate


def _sequence(two_sided: bool, slope: float | None, seed: int = 0):
    """Five firings of a 3x3 neuron on signed inputs large enough that some entries fire on either side."""
    torch.manual_seed(seed)
    raf = RecurrentAccumulateAndFire(3, leak_init=0.8, threshold_init=0.3, neuron="two_sided" if two_sided else "paper",
                                     surrogate_slope=slope).double()
    x = (0.4 * torch.randn(1, 1, 5, 3, 3, dtype=torch.float64)).requires_grad_(True)
    return raf, x


def _naive_scan(raf, x, two_sided, slope):
    leak, threshold = raf.leak, raf.threshold
    membrane = torch.zeros(3, 3, dtype=torch.float64)
    outputs = []
    for j in range(x.shape[2]):
        membrane, out = naive.raf_fire(membrane, x[0, 0, j], leak, threshold, two_sided=two_sided,
                                       surrogate_slope=slope)
        outputs.append(out)
    return torch.stack(outputs)


def test_two_sided_neuron_fires_on_either_sign_and_keeps_it():
    raf = RecurrentAccumulateAndFire(2, leak_init=1.0, threshold_init=0.5, neuron="two_sided").double()
    zeros = torch.zeros(2, 2, dtype=torch.float64)
    x = torch.tensor([[1.25, -1.25], [0.25, -0.25]], dtype=torch.float64)
    membrane, out = raf.fire(zeros, x)
    # p = x / 0.5 = (2.5, -2.5, 0.5, -0.5): the first two fire, out = sign(p) (|p| - 1), reset by -/+ 0.5
    assert torch.equal(out, torch.tensor([[1.5, -1.5], [0.0, 0.0]], dtype=torch.float64))
    assert torch.equal(membrane, torch.tensor([[0.75, -0.75], [0.25, -0.25]], dtype=torch.float64))
    paper = RecurrentAccumulateAndFire(2, leak_init=1.0, threshold_init=0.5).double()
    assert torch.equal(paper.fire(zeros, x)[1], torch.tensor([[1.5, 0.0], [0.0, 0.0]], dtype=torch.float64))


def test_scan_equals_the_float64_reference_for_both_neurons_with_and_without_surrogate():
    for two_sided in (False, True):
        for slope in (None, 2.0):
            raf, x = _sequence(two_sided, slope)
            zeros = torch.zeros(1, 1, 3, 3, dtype=torch.float64)
            outputs, _, _ = raf.scan(x, torch.ones(1, 5, dtype=torch.bool), zeros, zeros)
            expected = _naive_scan(raf, x, two_sided, slope)
            assert_exact(outputs[0, 0], expected, f"outputs two_sided={two_sided} slope={slope}")
            fired = (expected != 0).double().mean().item()
            assert 0 < fired < 1, fired  # the case exercises firing and silent entries
            weights = torch.randn_like(expected)
            grads = torch.autograd.grad((outputs[0, 0] * weights).sum(), (x, raf.leak, raf.threshold))
            ref = torch.autograd.grad((expected * weights).sum(), (x, raf.leak, raf.threshold))
            for name, got, want in zip(("x", "leak", "threshold"), grads, ref, strict=True):
                assert_exact(got, want, f"d/d{name} two_sided={two_sided} slope={slope}")


def test_the_surrogate_passes_gradient_where_the_true_derivative_is_zero():
    raf = RecurrentAccumulateAndFire(2, threshold_init=0.1, linear_init_scale=1e-3).double()
    surrogate = RecurrentAccumulateAndFire(2, threshold_init=0.1, linear_init_scale=1e-3, surrogate_slope=2.0).double()
    surrogate.load_state_dict(raf.state_dict())
    p = torch.randn(1, 1, 4, 2, 2, dtype=torch.float64)  # tiny W: nothing fires
    zeros = torch.zeros(1, 1, 2, 2, dtype=torch.float64)
    fires = torch.ones(1, 4, dtype=torch.bool)
    true_out, _, _ = raf.scan(raf.project(p), fires, zeros, zeros)
    surrogate_out, _, _ = surrogate.scan(surrogate.project(p), fires, zeros, zeros)
    assert torch.equal(true_out, surrogate_out) and not true_out.any()
    true_out.sum().backward()
    surrogate_out.sum().backward()
    assert not raf.linear.weight.grad.any() and not raf.threshold.grad.any()
    assert surrogate.linear.weight.grad.abs().sum() > 0 and surrogate.threshold.grad.abs() > 0


def test_neuron_settings_are_validated():
    import pytest

    from srformer.config import SRformerConfig

    with pytest.raises(ValueError, match="raf_neuron"):
        SRformerConfig(raf_neuron="sigmoid")
    with pytest.raises(ValueError, match="raf_surrogate_slope"):
        SRformerConfig(raf_surrogate_slope=0.0)
    with pytest.raises(ValueError, match="variant='srformer'"):
        SRformerConfig(variant="segmented", raf_neuron="two_sided")
    with pytest.raises(ValueError, match="neuron"):
        RecurrentAccumulateAndFire(2, neuron="other")
