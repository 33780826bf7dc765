"""The RAF recurrence as one operator (``srformer::raf_scan_``): the loop against the neuron's own scan
(:meth:`RecurrentAccumulateAndFire.scan`, the training path) in float64 (the Triton kernel against the loop under
Triton's interpreter: ``test_triton_kernels.py``)."""

from __future__ import annotations

import pytest
import torch

from srformer.attention.raf import RecurrentAccumulateAndFire
from srformer.attention.raf_scan import raf_scan_, raf_scan_loop
from srformer.benchmarks.operator_count import OperatorCounter
from tests.tolerance import assert_exact


def _case(two_sided: bool, skip: bool, seed: int = 0):
    """Inputs (B=3, M=7, H=2, d=4) in float64 large enough to fire often; every example visits its first m_b
    segments (m = 7, 4, 1), or with ``skip`` an irregular pattern (a schedule that skips segments)."""
    generator = torch.Generator().manual_seed(seed)
    inputs = torch.randn(3, 7, 2, 4, 4, generator=generator, dtype=torch.float64) * 2.0
    if skip:
        visited = torch.rand(3, 7, generator=generator) > 0.4
    else:
        visited = torch.arange(7)[None, :] < torch.tensor([7, 4, 1])[:, None]
    factor = torch.rand(3, 2, 1, 4, generator=generator, dtype=torch.float64) + 0.5
    raf = RecurrentAccumulateAndFire(4, 0.7, 0.9, 1.0, "two_sided" if two_sided else "paper").double()
    return inputs, visited, factor, raf


def _expected(inputs, visited, factor, raf):
    zeros = inputs.new_zeros(inputs.shape[0], *inputs.shape[2:])
    with torch.no_grad():
        outputs, _, _ = raf.scan(inputs, visited, zeros, zeros, axis=1)
    return outputs * factor[:, None] * visited[:, :, None, None, None]


@pytest.mark.parametrize("two_sided", [False, True])
@pytest.mark.parametrize("skip", [False, True])
def test_the_operator_equals_the_neurons_scan(two_sided, skip):
    """Readouts RAF_out_j * factor at visited segments and 0 elsewhere, the neuron's state carried over the
    segments an example skips; the result is written over the inputs."""
    inputs, visited, factor, raf = _case(two_sided, skip)
    expected = _expected(inputs, visited, factor, raf)
    written = inputs.clone()
    result = raf_scan_(written, visited, factor, raf.leak, raf.threshold, raf.two_sided)
    assert result.data_ptr() == written.data_ptr()
    assert_exact(result, expected, "readouts")
    assert expected.abs().max() > 0  # the neuron fired


@pytest.mark.parametrize("two_sided", [False, True])
@pytest.mark.parametrize("skip", [False, True])
def test_inputs_formed_in_the_loop_equal_ready_inputs(two_sided, skip):
    """Given the products K_j^T V_j with W and W K^T V, the loop forms x_j = W K^T V - W K_j^T V_j itself (the CPU
    build's form): the readouts of the ready inputs x_j, in float64."""
    products, visited, factor, raf = _case(two_sided, skip, seed=1)
    weight = raf.linear.weight.detach()
    total = products.sum(dim=1) @ weight.T  # W on the last axis
    inputs = total[:, None] - products @ weight.T
    expected = _expected(inputs, visited, factor, raf)
    written = products.clone()
    result = raf_scan_(written, visited, factor, raf.leak, raf.threshold, raf.two_sided, weight=raf.linear.weight,
                       total=total)
    assert result.data_ptr() == written.data_ptr()
    assert_exact(result, expected, "readouts")
    assert expected.abs().max() > 0


@pytest.mark.parametrize("bad", ["weight alone", "total alone", "weight", "total"])
def test_a_bad_weight_or_total_is_refused_with_the_argument_named(bad):
    inputs, visited, factor, raf = _case(False, False)
    weight, total = raf.linear.weight, inputs.sum(dim=1)
    if bad == "weight alone":
        total = None
    elif bad == "total alone":
        weight = None
    elif bad == "weight":
        weight = weight[:, :3]
    else:
        total = total[:, :1]
    with pytest.raises(ValueError, match="`weight`" if bad != "total" else "`total`"):
        raf_scan_(inputs, visited, factor, raf.leak, raf.threshold, weight=weight, total=total)


def test_the_operator_is_one_call_whatever_the_number_of_segments():
    counts = []
    for segments in (3, 40):
        inputs = torch.randn(1, segments, 2, 4, 4)
        visited = torch.ones(1, segments, dtype=torch.bool)
        raf = RecurrentAccumulateAndFire(4, 0.7, 0.9, 1.0, "paper")
        with torch.no_grad(), OperatorCounter() as counter:
            raf_scan_(inputs, visited, torch.ones(1, 2, 1, 4), raf.leak, raf.threshold)
        counts.append(counter.calls["srformer.raf_scan_"])
        assert counter.total < 10, counter.calls
    assert counts == [1, 1]


def test_the_operator_compiles_into_one_graph():
    inputs, visited, factor, raf = _case(False, True)
    inputs, factor = inputs.float(), factor.float()

    def build(x: torch.Tensor) -> torch.Tensor:
        return raf_scan_(x * 1.0, visited, factor, raf.leak.float(), raf.threshold.float()) + 0.0

    compiled = torch.compile(build, backend="aot_eager", fullgraph=True)
    with torch.no_grad():
        torch.testing.assert_close(compiled(inputs), build(inputs))


@pytest.mark.parametrize("bad", ["shape", "visited", "factor"])
def test_bad_shapes_are_refused_with_the_argument_named(bad):
    inputs, visited, factor, raf = _case(False, False)
    if bad == "shape":
        inputs = inputs[..., :3]
    elif bad == "visited":
        visited = visited[:, :3]
    else:
        factor = factor[:, :, :, :2]
    with pytest.raises(ValueError, match=f"`{'inputs' if bad == 'shape' else bad}`"):
        raf_scan_(inputs, visited, factor, raf.leak, raf.threshold)


def test_the_loop_is_the_cpu_path():
    """On the CPU the operator runs :func:`raf_scan_loop`: the same numbers, bit for bit."""
    inputs, visited, factor, raf = _case(False, True)
    a, b = inputs.clone(), inputs.clone()
    raf_scan_(a, visited, factor, raf.leak, raf.threshold)
    raf_scan_loop(b, visited, factor, raf.leak.detach(), raf.threshold.detach(), False)
    assert torch.equal(a, b)
