"""Recurrent Accumulate-and-Fire (RAF) neuron, paper Sec. 3.3 and Appendix A.2."""

from __future__ import annotations

import math

import torch
from torch import nn

from srformer.attention.initialization import TORCH_INIT, InitFunctions
from srformer.attention.schedule import tracing
from srformer.core import NEURONS  # the neuron names, checked by the config too

__all__ = ["NEURONS", "RecurrentAccumulateAndFire", "ScaledLinear", "activation", "update"]


def update(
    membrane: torch.Tensor,
    potential: torch.Tensor,
    projected: torch.Tensor,
    leak: torch.Tensor,
    threshold: torch.Tensor,
    fire: torch.Tensor | None,
    two_sided: bool = False,
) -> tuple[torch.Tensor, torch.Tensor]:
    """One RAF update.

    ``paper`` neuron (Appendix A.2): ``mem = leak * mem + x``, ``p = mem / threshold - 1``, soft reset
    ``mem -= threshold`` where ``p > 0``; the output is ``relu(p)``.

    ``two_sided`` neuron: ``mem = leak * mem + x``, ``p = mem / threshold``, soft reset
    ``mem -= threshold * sign(mem)`` where ``|p| > 1``; the output is ``sign(p) * relu(|p| - 1)``
    (:func:`activation`), so a negative membrane fires too and the output keeps its sign.

    Args:
        membrane: (..., d, d) membrane before the update.
        potential: (..., d, d) ``p`` in force before the update (kept where nothing fires).
        projected: (..., d, d) input ``x = W P``.
        leak, threshold: 0-d tensors in the inputs' dtype.
        fire: bool, broadcastable to the membrane: rows that update (the others carry ``membrane`` and
            ``potential`` unchanged); None when every row updates.
        two_sided: the ``two_sided`` neuron instead of the paper's.

    Returns:
        ``(membrane, potential)`` after the update; the RAF output is ``activation(potential, two_sided)``.
    """
    new_membrane = torch.addcmul(projected, membrane, leak)  # leak * mem + x
    if two_sided:
        new_potential = new_membrane / threshold
        reset = torch.where(new_membrane > 0, threshold, -threshold)  # threshold * sign(mem), mem != 0 where fired
        new_membrane = torch.where(new_potential.abs() > 1.0, new_membrane - reset, new_membrane)
    else:
        new_potential = new_membrane / threshold - 1.0
        new_membrane = torch.where(new_potential > 0, new_membrane - threshold, new_membrane)  # soft reset
    if fire is None:
        return new_membrane, new_potential
    return torch.where(fire, new_membrane, membrane), torch.where(fire, new_potential, potential)


def _forward_activation(potential: torch.Tensor, two_sided: bool) -> torch.Tensor:
    if two_sided:  # sign(p) * relu(|p| - 1)
        return torch.nn.functional.softshrink(potential, 1.0)
    return torch.relu(potential)


class _SurrogateSpike(torch.autograd.Function):
    """The neuron's output with a surrogate derivative: forward exactly :func:`_forward_activation`,
    backward ``sigmoid(slope * e)`` where ``e`` is the distance past the firing threshold (``p`` for the paper
    neuron, ``|p| - 1`` for the two-sided one) instead of the step ``(e > 0)``."""

    @staticmethod
    def forward(ctx, potential: torch.Tensor, two_sided: bool, slope: float) -> torch.Tensor:
        ctx.save_for_backward(potential)
        ctx.two_sided = two_sided
        ctx.slope = slope
        return _forward_activation(potential, two_sided)

    @staticmethod
    def backward(ctx, grad_output: torch.Tensor) -> tuple[torch.Tensor, None, None]:
        (potential,) = ctx.saved_tensors
        excess = potential.abs() - 1.0 if ctx.two_sided else potential
        return grad_output * torch.sigmoid(ctx.slope * excess), None, None


def activation(potential: torch.Tensor, two_sided: bool = False, surrogate_slope: float | None = None) -> torch.Tensor:
    """The RAF output from its potential: ``relu(p)`` (paper neuron) or ``sign(p) * relu(|p| - 1)`` (two-sided).

    The true derivative is a step: zero wherever the neuron does not fire, so a neuron that never fires
    passes no gradient to ``W``, leak or threshold. With ``surrogate_slope`` set (a change beyond the paper,
    ``docs/design.md``, "Surrogate gradient"), the forward value is unchanged and the backward pass uses the
    derivative ``sigmoid(slope * e)``, ``e`` the distance past the threshold (``p``, or ``|p| - 1``): the
    surrogate-gradient method of spiking-network training (Neftci et al. 2019), with the derivative of
    ``softplus(slope * e) / slope``; it tends to the true step as ``slope`` grows.

    Args:
        potential: (..., d, d) the potential ``p`` of :func:`update`.
        two_sided: the two-sided neuron.
        surrogate_slope: None (true derivative) or the slope, > 0.

    Returns:
        (..., d, d) the RAF output.
    """
    if surrogate_slope is None or not potential.requires_grad:
        return _forward_activation(potential, two_sided)
    output = _SurrogateSpike.apply(potential, two_sided, float(surrogate_slope))
    assert isinstance(output, torch.Tensor)
    return output


def initial_potential(output: torch.Tensor, two_sided: bool) -> torch.Tensor:
    """A potential whose :func:`activation` is ``output`` (the RAF output in force before the first update):
    ``output`` itself for the paper neuron (``output >= 0``, so ``relu(output) == output``),
    ``output + sign(output)`` for the two-sided one."""
    return output + torch.sign(output) if two_sided else output


class ScaledLinear(nn.Linear):
    """The RAF weight ``W``: a bias-free ``Linear(d, d)`` initialised uniform in ``±init_scale / sqrt(d)``,
    that is PyTorch's default ``nn.Linear`` initialisation (``kaiming_uniform_(a=sqrt(5))``, bound
    ``1 / sqrt(d)``) times ``init_scale`` (``SRformerConfig.raf_linear_init_scale``).

    A class of its own so that a converted model's ``_init_weights`` (transformers' initialisation path:
    ``init_weights()``, meta-device loading, missing keys) recognises it and keeps srformer's scale
    instead of the model's own ``nn.Linear`` scheme (T5: std ``initializer_factor``, BART: ``init_std``).

    Args:
        features: ``d``, input and output size.
        init_scale: factor on the default bound, > 0.
    """

    def __init__(self, features: int, init_scale: float = 1.0) -> None:
        self.init_scale = float(init_scale)  # read by reset_parameters, which nn.Linear.__init__ calls
        super().__init__(features, features, bias=False)

    def reset_parameters(self) -> None:
        """Draw ``W`` uniform in ``±init_scale / sqrt(d)`` (in place; a no-op on the meta device)."""
        self.initialize_parameters(TORCH_INIT)

    def initialize_parameters(self, init: InitFunctions) -> None:
        """``W`` uniform in ``±init_scale / sqrt(d)``, through ``init.uniform_``."""
        bound = self.init_scale / math.sqrt(self.in_features)
        init.uniform_(self.weight, -bound, bound)


class RecurrentAccumulateAndFire(nn.Module):
    """Leaky accumulate-and-fire neuron with a learnable leak and threshold and a soft reset.

    One firing (Appendix A.2; ``docs/design.md``, "RAF neuron")::

        x   = W P                    # bias-free Linear(d, d) on the last axis
        mem = leak * mem + x
        y   = mem / threshold - 1
        mem = mem - threshold * (y > 0)   # soft reset, after the output is taken
        out = relu(y)

    The neuron fires once each time the decoder moves to a new segment, so back-propagation
    through time runs over segments, not tokens. ``leak`` and ``threshold`` are one learnable
    scalar each per layer.

    Args:
        head_dim: ``d``, the size of both axes of the ``(d, d)`` key-value products.
        leak_init: initial leak (Appendix A.2 pseudo code: 1.0).
        threshold_init: initial threshold (Appendix A.2: 0.1), must be > 0.
        linear_init_scale: factor on PyTorch's default initialisation of ``W`` (1.0 = Appendix A.2;
            see :class:`srformer.SRformerConfig` for why the package default is 1e-3).
        neuron: one of :data:`NEURONS`: ``paper`` (the update above) or ``two_sided`` (:func:`update`).
        surrogate_slope: None (the output's true derivative) or the slope of a surrogate derivative
            (:func:`activation`); the forward values do not depend on it.

    Raises:
        ValueError: for an unknown ``neuron`` or a ``surrogate_slope`` that is not > 0.

    The initial values are kept (``leak_init``, ``threshold_init``, ``linear.init_scale``) so that
    :meth:`reset_parameters` and the converted model's ``_init_weights`` can restore them, e.g. after
    construction on the meta device.
    """

    def __init__(
        self,
        head_dim: int,
        leak_init: float = 1.0,
        threshold_init: float = 0.1,
        linear_init_scale: float = 1.0,
        neuron: str = "paper",
        surrogate_slope: float | None = None,
    ) -> None:
        super().__init__()
        if neuron not in NEURONS:
            raise ValueError(f"`neuron` must be one of {', '.join(NEURONS)}, got {neuron!r}.")
        if surrogate_slope is not None and not surrogate_slope > 0:
            raise ValueError(f"`surrogate_slope` must be None or > 0, got {surrogate_slope!r}.")
        self.two_sided = neuron == "two_sided"
        self.surrogate_slope = surrogate_slope
        self.leak_init = float(leak_init)
        self.threshold_init = float(threshold_init)
        self.linear = ScaledLinear(head_dim, linear_init_scale)
        self.leak = nn.Parameter(torch.empty(()))
        self.threshold = nn.Parameter(torch.empty(()))
        self.reset_parameters()

    def reset_parameters(self) -> None:
        """Set ``leak`` and ``threshold`` to their initial values (in place). ``W`` is reset by
        :meth:`ScaledLinear.reset_parameters` of ``self.linear``, as each module resets its own parameters."""
        self.initialize_parameters(TORCH_INIT)

    def initialize_parameters(self, init: InitFunctions) -> None:
        """``leak = leak_init`` and ``threshold = threshold_init``, through ``init.constant_`` (not ``W``: see
        :meth:`reset_parameters`)."""
        init.constant_(self.leak, self.leak_init)
        init.constant_(self.threshold, self.threshold_init)

    def project(self, partial_products: torch.Tensor) -> torch.Tensor:
        """``x = W P`` for any number of leading axes.

        Args:
            partial_products: (..., d, d) products ``P_i`` (float32 recommended).

        Returns:
            (..., d, d), same dtype as the input.
        """
        weight = self.linear.weight.to(partial_products.dtype)
        return torch.nn.functional.linear(partial_products, weight)

    def fire(self, membrane: torch.Tensor, projected: torch.Tensor) -> tuple[torch.Tensor, torch.Tensor]:
        """One RAF update.

        Args:
            membrane: (..., d, d) membrane potential before the update.
            projected: (..., d, d) input ``x = W P`` (see :meth:`project`).

        Returns:
            ``(membrane, output)``: the membrane after the soft reset and the output (:meth:`activation`),
            both (..., d, d).
        """
        leak = self.leak.to(projected.dtype)
        threshold = self.threshold.to(projected.dtype)
        membrane, potential = update(membrane, membrane, projected, leak, threshold, None, self.two_sided)
        return membrane, self.activation(potential)

    def activation(self, potential: torch.Tensor) -> torch.Tensor:
        """The output of this neuron from its potential (:func:`activation`), with its surrogate derivative."""
        return activation(potential, self.two_sided, self.surrogate_slope)

    def scan(
        self,
        projected: torch.Tensor,
        fires: torch.Tensor,
        membrane: torch.Tensor,
        output: torch.Tensor,
        axis: int = 2,
    ) -> tuple[torch.Tensor, torch.Tensor, torch.Tensor]:
        """Run the recurrence over the segment axis, firing only where ``fires`` is set.

        This is the parallel (teacher-forced) path. The neuron is nonlinear (threshold and reset), so
        segment ``j`` needs the membrane after segment ``j - 1``: the loop over at most ``m`` segments
        cannot become one batched operation. Each iteration is five element-wise kernels on
        (batch, heads, d, d) tensors (``leak * mem + x``, ``mem / threshold``, ``- 1``, the reset
        ``where``), collecting ``y``; ``relu`` runs once over all segments afterwards.

        Args:
            projected: inputs ``W P_j`` for every segment ``j``, segment axis ``axis``: (batch, heads, m, d, d)
                for ``axis=2``, (batch, m, heads, d, d) for ``axis=1``.
            fires: (batch, m) bool, True where example ``b`` visits segment ``j`` (and has not
                fired for it yet); elsewhere the state is carried unchanged.
            membrane: (batch, heads, d, d) membrane before segment 0.
            output: (batch, heads, d, d) RAF output before segment 0 (>= 0, as every RAF output).
            axis: 1 or 2, the segment axis of ``projected`` and of the returned ``outputs``.

        Returns:
            ``(outputs, membrane, output)``: ``outputs`` has the shape of ``projected``, the RAF output
            in force after segment ``j`` (the one a query attending segment ``j`` reads); then the
            final membrane and output.
        """
        if axis not in (1, 2):
            raise ValueError(f"axis must be 1 or 2 (the segment axis of `projected`), got {axis}.")
        leak = self.leak.to(projected.dtype)
        threshold = self.threshold.to(projected.dtype)
        fire_shape = (-1, 1, 1, 1)
        # Eager: one host sync per call, so that the common case (every example visits every segment)
        # needs no masking; while tracing (compile/export) the masked form always runs, without a sync.
        every_segment_fires = False if tracing() else bool(fires.all())
        potentials = []  # the potentials p_j before the reset; output_j = activation(p_j)
        potential = initial_potential(output, self.two_sided)  # activation(potential) == output before segment 0
        # unbind once: indexing projected[:, :, j] per segment would make backward allocate a
        # full-size zero gradient for every segment.
        for j, projected_j in enumerate(projected.unbind(dim=axis)):
            fire_j = None if every_segment_fires else fires[:, j].view(fire_shape)
            membrane, potential = update(membrane, potential, projected_j, leak, threshold, fire_j, self.two_sided)
            potentials.append(potential)
        if not potentials:  # no segment at all
            return projected.new_zeros(projected.shape), membrane, output
        outputs = self.activation(torch.stack(potentials, dim=axis))
        return outputs, membrane, outputs.select(axis, -1)
