"""Diagnostics of the SRformer recurrent term ``O_R``: does the RAF neuron fire, what does it
throw away, how large is ``O_R`` next to ``O_S``, and do ``W``, leak and threshold receive gradients?

:class:`RecurrentTermMonitor` attaches one :class:`LayerRecord` to every
:class:`~srformer.attention.srformer.SRformerCrossAttention` layer with a recurrent term (its ``monitor``
attribute) while the ``with`` block is active. The layer hands the record detached tensors from its training
(autograd) path, so the model's outputs and gradients are unchanged, bit for bit (tested). Statistics are
accumulated over every call inside the block (several forwards, or the recomputation of gradient
checkpointing, which repeats the same numbers and so leaves every ratio unchanged).

Per layer, in decoder order (paper Sec. 3.3, Eq. 11-16, Appendix A.2; ``x_j = W P_j`` is the RAF input of
segment ``j``, ``P_j = K^T V - K_j^T V_j``):

* ``firing_fraction``: the fraction of RAF output entries (of the (d, d) output of every head and visited
  segment) that are not 0. "Fired" means "output != 0", which for the paper's ``relu(mem / threshold - 1)``
  neuron is "output > 0", i.e. the membrane exceeded the threshold. 0.0 means ``O_R`` is exactly 0.
* ``discarded_input``: ``||relu(-x)||^2 / ||x||^2`` over the visited segments' inputs ``x_j``: the share of
  the input's energy in its negative entries, which a relu neuron can never pass on (a memory of signed
  associations loses that half). 0.5 for a sign-symmetric input.
* ``recurrent_to_softmax``: ``||O_R||_F / ||O_S||_F`` over the whole batch (all heads, decoder positions and
  features, padded decoder positions included), before the two are added (Eq. 11) or mixed (Eq. 10).

Those need a forward with autograd enabled (a training step): the inference path writes the RAF outputs over
its inputs in place and is not observed. After ``loss.backward()``, :meth:`RecurrentTermMonitor.gradients`
reads the gradient norms of ``W``, leak and threshold and their current values.
"""

from __future__ import annotations

import math
from types import TracebackType

import torch
from torch import nn

from srformer.attention.srformer import SRformerCrossAttention


def recurrent_layers(model: nn.Module) -> list[SRformerCrossAttention]:
    """The :class:`~srformer.attention.srformer.SRformerCrossAttention` modules of ``model`` that compute a
    recurrent term (``has_recurrence``), in ``model.modules()`` order (decoder layer order for a converted
    T5/BART model). Empty for a model without any (e.g. ``full`` or ``segmented``)."""
    return [m for m in model.modules() if isinstance(m, SRformerCrossAttention) and m.has_recurrence]


def _norm(tensor: torch.Tensor | None) -> float | None:
    """Euclidean norm of a gradient as a Python float; 0.0 where no gradient arrived (``grad`` is None)."""
    if tensor is None:
        return 0.0
    return float(torch.linalg.vector_norm(tensor.detach().to(torch.float64)))


class LayerRecord:
    """Running sums of one layer's recurrent-term statistics (float64 tensors, no host sync until read).

    Args:
        has_neuron: the layer has a RAF neuron (False under ablation III, where the "output" is ``P_j``).
    """

    def __init__(self, has_neuron: bool) -> None:
        self.has_neuron = has_neuron
        zero = torch.zeros((), dtype=torch.float64)
        self.fired = zero.clone()  # RAF output entries != 0 at visited segments
        self.entries = zero.clone()  # RAF output entries at visited segments
        self.negative_energy = zero.clone()  # sum of relu(-x)^2 at visited segments
        self.input_energy = zero.clone()  # sum of x^2 at visited segments
        self.recurrent_energy = zero.clone()  # sum of O_R^2
        self.softmax_energy = zero.clone()  # sum of O_S^2
        self.raf_calls = 0
        self.output_calls = 0
        self.has_softmax = True

    def observe_raf(self, raf_inputs: torch.Tensor, raf_outputs: torch.Tensor, visited: torch.Tensor) -> None:
        """Add one state build.

        Args:
            raf_inputs: (B, M, H, d, d) ``x_j = W P_j`` of every segment slot (detached).
            raf_outputs: (B, M, H, d, d) the RAF output in force after slot ``j`` (``raf_inputs`` itself under
                ablation III).
            visited: (B, M) bool, the slots the schedule visits; the others are ignored.
        """
        mask = visited[:, :, None, None, None].to(raf_inputs.device)
        x = raf_inputs.to(torch.float64).masked_fill(~mask, 0.0)
        self.negative_energy = self.negative_energy.to(x.device) + torch.relu(-x).square().sum()
        self.input_energy = self.input_energy.to(x.device) + x.square().sum()
        per_slot = raf_outputs[0, 0].numel()
        self.entries = self.entries.to(x.device) + visited.sum().to(torch.float64) * per_slot
        self.fired = self.fired.to(x.device) + ((raf_outputs != 0) & mask).sum().to(torch.float64)
        self.raf_calls += 1

    def observe_output(self, softmax_output: torch.Tensor | None, recurrent: torch.Tensor) -> None:
        """Add one output computation.

        Args:
            softmax_output: (B, H, q, d) ``O_S``, or None under ablation I (no softmax term).
            recurrent: (B, H, q, d) ``O_R`` (detached).
        """
        device = recurrent.device
        self.recurrent_energy = self.recurrent_energy.to(device) + recurrent.to(torch.float64).square().sum()
        if softmax_output is None:
            self.has_softmax = False
        else:
            self.softmax_energy = self.softmax_energy.to(device) + softmax_output.to(torch.float64).square().sum()
        self.output_calls += 1

    def statistics(self) -> dict[str, float | None]:
        """``{"firing_fraction", "discarded_input", "recurrent_to_softmax"}`` as fractions/ratios (unitless);
        None where not defined: no RAF observed (no autograd forward) or no neuron (ablation III) for the
        first two; no output observed, no ``O_S`` (ablation I) or ``O_S`` exactly 0 for the ratio; a zero
        input for ``discarded_input``."""
        firing = discarded = ratio = None
        if self.raf_calls and self.has_neuron:
            firing = float(self.fired / self.entries) if self.entries > 0 else None
            discarded = float(self.negative_energy / self.input_energy) if self.input_energy > 0 else None
        if self.output_calls and self.has_softmax and self.softmax_energy > 0:
            ratio = math.sqrt(float(self.recurrent_energy / self.softmax_energy))
        return {"firing_fraction": firing, "discarded_input": discarded, "recurrent_to_softmax": ratio}


class RecurrentTermMonitor:
    """Collect recurrent-term statistics of every recurrent SRformer layer of ``model`` inside a ``with`` block.

    Example::

        with RecurrentTermMonitor(model) as monitor:
            loss = model(**batch).loss
        loss.backward()
        layers = monitor.statistics()       # forward statistics, one dict per layer
        gradients = monitor.gradients()     # after backward, before clipping / optimizer.step()

    Entering resets the sums and sets each layer's ``monitor``; leaving unsets it (so the layers cost one
    ``if`` again). The statistics stay readable after the block.

    Args:
        model: a converted model (any ``nn.Module`` holding SRformer layers).

    Raises:
        ValueError: if ``model`` has no SRformer layer with a recurrent term (convert it with the ``srformer``
            variant or one of its ablations first; :func:`recurrent_layers` tells whether it has any).
        RuntimeError: when entered while another monitor is attached to the same layers.
    """

    def __init__(self, model: nn.Module) -> None:
        self.layers = recurrent_layers(model)
        if not self.layers:
            raise ValueError(
                "`model` has no SRformerCrossAttention layer with a recurrent term: convert it with "
                "variant='srformer' (or an srformer ablation) before monitoring O_R."
            )
        self.records = [LayerRecord(layer.raf is not None) for layer in self.layers]

    def __enter__(self) -> RecurrentTermMonitor:
        if any(layer.monitor is not None for layer in self.layers):
            raise RuntimeError("Another monitor is attached to these layers: leave its `with` block first.")
        self.records = [LayerRecord(layer.raf is not None) for layer in self.layers]
        for layer, record in zip(self.layers, self.records, strict=True):
            layer.monitor = record
        return self

    def __exit__(
        self, kind: type[BaseException] | None, error: BaseException | None, traceback: TracebackType | None
    ) -> None:
        for layer in self.layers:
            layer.monitor = None

    def statistics(self) -> list[dict[str, float | None]]:
        """Per layer (decoder order), the forward statistics of :meth:`LayerRecord.statistics`."""
        return [record.statistics() for record in self.records]

    def gradients(self) -> list[dict[str, float | None]]:
        """Per layer, after ``loss.backward()``: ``grad_weight`` (Frobenius norm of ``W``'s gradient),
        ``grad_leak`` and ``grad_threshold`` (absolute values of the scalar gradients), in loss units per
        parameter unit; and the current ``leak`` and ``threshold``. A parameter whose ``grad`` is None (no
        gradient reached it) reports 0.0; every entry is None under ablation III (no neuron). Read them before
        clipping or the optimizer step, so that they are what the loss sent."""
        rows: list[dict[str, float | None]] = []
        for layer in self.layers:
            raf = layer.raf
            if raf is None:
                rows.append(dict.fromkeys(("grad_weight", "grad_leak", "grad_threshold", "leak", "threshold")))
                continue
            rows.append({
                "grad_weight": _norm(raf.linear.weight.grad), "grad_leak": _norm(raf.leak.grad),
                "grad_threshold": _norm(raf.threshold.grad), "leak": float(raf.leak.detach()),
                "threshold": float(raf.threshold.detach()),
            })
        return rows

    def report(self) -> list[dict[str, float | None]]:
        """Per layer, :meth:`statistics` and :meth:`gradients` in one dict (call after ``backward``)."""
        return [{**forward, **backward} for forward, backward in zip(self.statistics(), self.gradients(), strict=True)]
