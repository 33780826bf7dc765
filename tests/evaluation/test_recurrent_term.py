"""RecurrentTermMonitor: hand-checked statistics, agreement with an independent RAF recurrence on a tiny
converted T5, numerics unchanged by the monitor, None where an ablation removes a term."""

from __future__ import annotations

import math

import pytest
import torch
from transformers import T5Config, T5ForConditionalGeneration

import srformer
from srformer.evaluation.recurrent_term import LayerRecord, RecurrentTermMonitor, recurrent_layers

VOCAB = 64
LENGTHS = (24, 17, 9)  # s = 8: 3, 3 and 2 segments, so example 2 never visits slot 2 (the mask matters)


def _model(**settings) -> T5ForConditionalGeneration:
    torch.manual_seed(0)
    config = T5Config(vocab_size=VOCAB, d_model=32, d_ff=64, num_layers=1, num_decoder_layers=2, num_heads=2,
                      d_kv=8, decoder_start_token_id=0, pad_token_id=0, eos_token_id=1, dropout_rate=0.0)
    model = T5ForConditionalGeneration(config).to(torch.float64)
    # W at PyTorch's default scale and a small threshold, so that some RAF units fire and some do not.
    values = {"raf_linear_init_scale": 1.0, "raf_threshold_init": 0.05, **settings}
    return srformer.convert(model, srformer.SRformerConfig(variant="srformer", segment_size=8, target_length=6,
                                                           **values)).train()


def _batch() -> dict[str, torch.Tensor]:
    generator = torch.Generator().manual_seed(1)
    ids = torch.randint(2, VOCAB, (len(LENGTHS), max(LENGTHS)), generator=generator)
    mask = torch.zeros_like(ids)
    for row, n in enumerate(LENGTHS):
        mask[row, :n] = 1
        ids[row, n:] = 0
    labels = torch.randint(2, VOCAB, (len(LENGTHS), 6), generator=generator)
    return {"input_ids": ids, "attention_mask": mask, "labels": labels}


def _reference_raf(inputs: torch.Tensor, visited: torch.Tensor, leak: float, threshold: float) -> torch.Tensor:
    """The RAF outputs (B, M, H, d, d) at visited slots, by the Appendix A.2 recurrence written out per example
    (zeros at unvisited slots)."""
    outputs = torch.zeros_like(inputs)
    for b in range(inputs.shape[0]):
        membrane = torch.zeros_like(inputs[b, 0])
        for j in range(inputs.shape[1]):
            if not visited[b, j]:
                continue
            membrane = leak * membrane + inputs[b, j]
            y = membrane / threshold - 1.0
            membrane = membrane - threshold * (y > 0).to(membrane.dtype)
            outputs[b, j] = torch.clamp(y, min=0.0)
    return outputs


def test_layer_record_by_hand():
    record = LayerRecord(has_neuron=True)
    x = torch.tensor([3.0, -4.0, 0.0, 0.0]).view(1, 2, 1, 1, 2)  # slot 0: (3, -4); slot 1 unvisited
    x[0, 1] = -100.0
    outputs = torch.tensor([1.0, 0.0, 7.0, 7.0]).view(1, 2, 1, 1, 2)
    record.observe_raf(x, outputs, torch.tensor([[True, False]]))
    record.observe_output(torch.ones(1, 1, 2, 2), torch.full((1, 1, 2, 2), 3.0))
    stats = record.statistics()
    assert stats["firing_fraction"] == 0.5  # one of the two visited entries != 0
    assert stats["discarded_input"] == pytest.approx(16.0 / 25.0, rel=1e-15)  # (-4)^2 / (3^2 + 4^2)
    assert stats["recurrent_to_softmax"] == pytest.approx(3.0, rel=1e-15)  # ||3||_F / ||1||_F
    ablation_one = LayerRecord(has_neuron=True)
    ablation_one.observe_output(None, torch.ones(1, 1, 1, 1))
    assert ablation_one.statistics()["recurrent_to_softmax"] is None
    assert LayerRecord(has_neuron=True).statistics() == dict.fromkeys(
        ("firing_fraction", "discarded_input", "recurrent_to_softmax"))


def test_monitor_matches_an_independent_recurrence():
    model = _model()
    layers = recurrent_layers(model)
    assert len(layers) == 2 and all(layer.monitor is None for layer in layers)
    captured: dict[int, tuple[torch.Tensor, torch.Tensor]] = {}
    for index, layer in enumerate(layers):
        scan = layer.raf.scan

        def recording(projected, fires, *args, _scan=scan, _index=index, **kwargs):
            captured[_index] = (projected.detach().clone(), fires.clone())
            return _scan(projected, fires, *args, **kwargs)

        layer.raf.scan = recording
    with RecurrentTermMonitor(model) as monitor:
        loss = model(**_batch()).loss
    assert all(layer.monitor is None for layer in layers)
    loss.backward()
    report = monitor.report()
    fractions = []
    for index, layer in enumerate(layers):
        inputs, visited = captured[index]
        assert visited.tolist() == [[True, True, True], [True, True, True], [True, True, False]]
        leak, threshold = float(layer.raf.leak.detach()), float(layer.raf.threshold.detach())
        outputs = _reference_raf(inputs, visited, leak, threshold)
        slots = [(b, j) for b in range(visited.shape[0]) for j in range(visited.shape[1]) if visited[b, j]]
        fired = sum(int((outputs[b, j] != 0).sum()) for b, j in slots)
        entries = sum(outputs[b, j].numel() for b, j in slots)
        negative = sum(float((inputs[b, j][inputs[b, j] < 0] ** 2).sum()) for b, j in slots)
        energy = sum(float((inputs[b, j] ** 2).sum()) for b, j in slots)
        assert report[index]["firing_fraction"] == fired / entries
        # Two float64 sums of the same <= 200 squares in different orders: gamma_200 ~ 2.2e-14 relative.
        assert report[index]["discarded_input"] == pytest.approx(negative / energy, rel=1e-12)
        assert math.isfinite(report[index]["recurrent_to_softmax"]) and report[index]["recurrent_to_softmax"] > 0
        raf = layer.raf
        assert report[index]["grad_weight"] == float(torch.linalg.vector_norm(raf.linear.weight.grad))
        assert report[index]["grad_leak"] == abs(float(raf.leak.grad))
        assert report[index]["grad_threshold"] == abs(float(raf.threshold.grad))
        assert report[index]["leak"] == leak == 1.0 and report[index]["threshold"] == threshold
        fractions.append(fired / entries)
    assert any(0.0 < f < 1.0 for f in fractions), fractions  # the case is not degenerate
    assert any(row["grad_weight"] > 0 for row in report)


def test_monitor_does_not_change_logits_or_gradients():
    results = []
    for monitored in (False, True):
        model = _model()
        if monitored:
            with RecurrentTermMonitor(model):
                outputs = model(**_batch())
        else:
            outputs = model(**_batch())
        outputs.loss.backward()
        results.append((outputs.logits.detach(), {n: p.grad.clone() for n, p in model.named_parameters()
                                                  if p.grad is not None}))
    (logits, grads), (logits_monitored, grads_monitored) = results
    assert torch.equal(logits, logits_monitored)
    assert grads.keys() == grads_monitored.keys()
    assert all(torch.equal(grads[name], grads_monitored[name]) for name in grads)
    assert "monitor" not in "".join(_model().state_dict())


def test_a_neuron_that_never_fires_gets_no_gradient():
    model = _model(raf_threshold_init=1e6)  # no membrane reaches 1e6: O_R is exactly 0
    with RecurrentTermMonitor(model) as monitor:
        model(**_batch()).loss.backward()
    for row in monitor.report():
        assert row["firing_fraction"] == 0.0 and row["recurrent_to_softmax"] == 0.0
        assert row["grad_weight"] == 0.0 and row["grad_leak"] == 0.0 and row["grad_threshold"] == 0.0


def test_ablations_report_none_where_a_term_is_missing():
    with RecurrentTermMonitor(model := _model(ablation="no_raf")) as monitor:  # III: no neuron
        model(**_batch()).loss.backward()
    for row in monitor.report():
        assert row["firing_fraction"] is None and row["discarded_input"] is None
        assert all(row[key] is None for key in ("grad_weight", "grad_leak", "grad_threshold", "leak", "threshold"))
        assert row["recurrent_to_softmax"] > 0
    with RecurrentTermMonitor(model := _model(ablation="recurrent_only")) as monitor:  # I: no O_S
        model(**_batch()).loss.backward()
    for row in monitor.report():
        assert row["recurrent_to_softmax"] is None
        assert 0.0 <= row["firing_fraction"] <= 1.0 and row["grad_weight"] is not None


def test_monitor_needs_recurrent_layers_and_one_at_a_time():
    torch.manual_seed(0)
    plain = T5ForConditionalGeneration(T5Config(vocab_size=VOCAB, d_model=16, d_ff=32, num_layers=1, num_heads=2,
                                                d_kv=8, decoder_start_token_id=0))
    with pytest.raises(ValueError, match="variant='srformer'"):
        RecurrentTermMonitor(plain)
    model = _model()
    with RecurrentTermMonitor(model), pytest.raises(RuntimeError, match="Another monitor"):
        RecurrentTermMonitor(model).__enter__()
    assert all(layer.monitor is None for layer in recurrent_layers(model))
