"""Gradient (activation) checkpointing on converted models: same loss and gradients, with recomputation."""

from __future__ import annotations

import copy
import warnings

import pytest
import torch

from srformer.models import cross_attention_modules
from tests.models.conftest import BUILDERS, converted, decoder_inputs, padded_batch
from tests.tolerance import assert_exact, exact_tolerance


def loss_and_gradients(model, ids, mask, labels, *, checkpointing: bool):
    """Loss, gradients by parameter name and the number of cross-attention forward calls of one
    training step of a copy of ``model`` (dropout on, same seed)."""
    model = copy.deepcopy(model)
    if checkpointing:
        with warnings.catch_warnings():
            # transformers 5.x renames it activation_checkpointing_enable
            warnings.simplefilter("ignore", FutureWarning)
            model.gradient_checkpointing_enable()
    calls = []
    for _, _, module in cross_attention_modules(model):
        module.register_forward_hook(lambda *_: calls.append(1))
    model.train()
    torch.manual_seed(5)
    loss = model(input_ids=ids, attention_mask=mask, labels=labels).loss
    loss.backward()
    gradients = {name: p.grad.clone() for name, p in model.named_parameters() if p.grad is not None}
    return loss.item(), gradients, len(calls)


def test_gradient_checkpointing_gives_the_same_loss_and_gradients(family):
    base = BUILDERS[family]()
    model = converted(base, variant="srformer", segment_size=8, target_length=12)
    for module in model.modules():
        if isinstance(module, torch.nn.Dropout):
            module.p = 0.2  # the recomputation must replay the same dropout masks
    ids, mask = padded_batch(model)
    labels = decoder_inputs(model, ids.shape[0], 10)[:, 1:].contiguous()

    loss, gradients, calls = loss_and_gradients(model, ids, mask, labels, checkpointing=False)
    loss_gc, gradients_gc, calls_gc = loss_and_gradients(model, ids, mask, labels, checkpointing=True)

    layers = len(cross_attention_modules(model))
    assert calls == layers and calls_gc == 2 * layers  # checkpointing really recomputed every layer
    # float64 model: the recomputed forward and the backward through it differ from the plain step
    # only in the order in which gradient contributions are summed (tests/tolerance.py).
    assert loss_gc == pytest.approx(loss, rel=exact_tolerance(1.0), abs=exact_tolerance(loss))
    assert gradients_gc.keys() == gradients.keys()
    assert any(".srformer.raf." in name for name in gradients)  # RAF parameters get gradients in both
    for name in gradients:
        assert_exact(gradients_gc[name], gradients[name], name)
