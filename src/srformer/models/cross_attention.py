"""Glue between a Hugging Face cross-attention module and an SRformer attention module
(:func:`~srformer.attention.variants.build_cross_attention`).

Shared by the T5-style and BART-style module replacements: reading the encoder padding mask,
finding the decoder step, and keeping the per-sequence state inside the ``EncoderDecoderCache``.
"""

from __future__ import annotations

import dataclasses
from collections.abc import Callable
from typing import Any

import torch
from torch.nn import functional as F
from transformers.cache_utils import DynamicLayer, EncoderDecoderCache

from srformer.attention.base import CrossAttentionMechanism
from srformer.attention.projection import HeadProjection
from srformer.attention.schedule import tracing
from srformer.attention.state import CrossAttentionState, SRformerCacheLayer, shares_storage
from srformer.attention.step_choice import step_kind
from srformer.attention.weights import cross_attention_weights


def key_padding_from_mask(mask: torch.Tensor | None, key_length: int) -> torch.Tensor | None:
    """Real-position mask of the encoder keys from the mask Hugging Face hands to cross attention.

    Args:
        mask: None (nothing padded), or a (B, 1, q, k) / (B, k) tensor: bool with True = attend
            (sdpa), or additive float with 0 = attend and a large negative value = masked (eager).
        key_length: ``k``, the number of encoder positions.

    Returns:
        (B, k) bool, True at real positions, or None.

    Raises:
        ValueError: for a mask of another kind (e.g. a flex-attention ``BlockMask``).
    """
    if mask is None:
        return None
    if not isinstance(mask, torch.Tensor) or mask.dim() not in (2, 4):
        raise ValueError(
            f"SRformer cross attention cannot read an encoder mask of type {type(mask).__name__}; "
            "load the model with attn_implementation='sdpa' or 'eager'."
        )
    rows = mask if mask.dim() == 2 else mask[:, 0, 0, :]
    valid = rows if rows.dtype == torch.bool else rows > torch.finfo(rows.dtype).min / 2
    if valid.shape[-1] != key_length:
        raise ValueError(f"Encoder mask covers {valid.shape[-1]} positions but the encoder output has {key_length}.")
    return valid


def attention_weights_requested(module: object, output_attentions: bool | None) -> bool:
    """Whether a converted cross-attention module must return its attention weights.

    As in transformers, weights are returned under the ``eager`` implementation only: under ``sdpa``
    transformers warns and returns none for any layer, converted or not. The flag is the
    ``output_attentions`` keyword transformers passes to attention modules, else the model config's
    ``output_attentions`` (set in the config, it reaches the output recorders but not the modules).

    Args:
        module: the converted cross-attention module (its ``config`` is the model's ``PretrainedConfig``).
        output_attentions: the ``output_attentions`` keyword the module received, or None.

    Returns:
        True when weights are wanted and the model runs the eager attention implementation.
    """
    config = getattr(module, "config", None)
    if output_attentions is None:
        output_attentions = bool(getattr(config, "output_attentions", False))
    return bool(output_attentions) and getattr(config, "_attn_implementation", None) == "eager"


#: Encoder positions projected at a time when a generation state is built block by block
#: (:meth:`~srformer.attention.base.CrossAttentionMechanism.streamed_state`).
STREAM_BLOCK = 4096


def run_cross_attention(
    attention: CrossAttentionMechanism,
    queries: torch.Tensor,
    key_value_states: torch.Tensor,
    project: Callable[[torch.Tensor], tuple[torch.Tensor, torch.Tensor]],
    mask: torch.Tensor | None,
    past_key_values,
    layer_idx: int | None,
    *,
    dropout: float,
    output_attentions: bool = False,
    projection: HeadProjection | None = None,
) -> tuple[torch.Tensor, torch.Tensor | None]:
    """Run one layer's SRformer cross attention, with or without a generation cache.

    With an ``EncoderDecoderCache``, the state is built at the sequence's first forward pass
    and stored in the cache's cross-attention part as an :class:`SRformerCacheLayer` (in the lean
    layout when ``lean_cache`` is set); later single-token passes take the incremental path. The
    decoder position is ``self_attention_cache.get_seq_length(layer_idx) - q`` because the layer's
    self attention has already appended the current tokens (``docs/design.md``, "Two paths, one function").

    Args:
        attention: the layer's SRformer module.
        queries: (B, H, q, d) projected decoder queries.
        key_value_states: (B, k, d_model) encoder output.
        project: maps encoder states (B, n, d_model) to projected (keys, values), each (B, H, n, d).
        mask: the encoder mask as passed by the model (see :func:`key_padding_from_mask`).
        past_key_values: None or an ``EncoderDecoderCache``.
        layer_idx: the decoder layer index (required with a cache).
        dropout: attention dropout probability (0 outside training).
        output_attentions: also return the attention weights
            (:func:`~srformer.attention.weights.cross_attention_weights`). The output is then computed from
            them (:meth:`~srformer.attention.base.CrossAttentionMechanism.output_from_weights`, eager attention's
            cost), so they carry the gradient of the loss; it equals the output without them up to rounding.
            When False nothing is computed for them.
        projection: the layer's key/value projections per head, or None (a projection that is not a plain
            ``nn.Linear``): for the mechanisms that search the encoder output themselves
            (:meth:`~srformer.attention.base.CrossAttentionMechanism.indexed_state`), which without it build their
            exact state.

    Returns:
        ``(output, weights)``: (B, H, q, d) attention output before the output projection, and
        (B, H, q, k) attention weights in the queries' dtype, or None unless ``output_attentions``.

    Raises:
        ValueError: for a cache that is not an ``EncoderDecoderCache``, or a missing ``layer_idx``;
            for NaN/inf in the encoder output, its projections or the state built from them (see
            :func:`check_finite_state`; eager mode only: under ``torch.compile``/``torch.export`` the
            check, which needs a host sync, is skipped).
    """
    q_len = queries.shape[2]
    cache: EncoderDecoderCache | None = None
    cache_index = 0  # the layer's index in the cache; read only when there is a cache
    if past_key_values is not None:
        if not isinstance(past_key_values, EncoderDecoderCache):
            raise ValueError(
                f"SRformer cross attention needs an EncoderDecoderCache, got {type(past_key_values).__name__}."
            )
        if layer_idx is None:
            raise ValueError("SRformer cross attention with a cache needs the module's `layer_idx`.")
        cache, cache_index = past_key_values, layer_idx

    state: CrossAttentionState | None = None
    keys: torch.Tensor | None = None  # projected here when the state is built, or for the weights
    values: torch.Tensor | None = None
    pending: PendingFiniteCheck | None = None  # the deferred check of a state built here
    if cache is not None and cache.is_updated.get(cache_index):
        layer = cache.cross_attention_cache.layers[cache_index]
        if not isinstance(layer, SRformerCacheLayer) or layer.state is None:
            raise RuntimeError(
                "The cross-attention cache of this layer was filled by another attention module; "
                "start generation with a fresh cache after converting the model."
            )
        state = layer.state
        earlier = layer.pending_check
        if isinstance(earlier, PendingFiniteCheck) and earlier.ready():
            layer.pending_check = None
            earlier.raise_if_non_finite()
    if state is None or (state.is_lean and q_len > 1):
        # Built once per sequence; a lean state meeting a multi-token chunk is rebuilt in the
        # standard layout (its RAF outputs do not depend on the tokens decoded so far).
        state = None
        key_length = key_value_states.shape[1]
        key_valid = key_padding_from_mask(mask, key_length)
        attention.adapt_to_input(key_valid, key_length)
        if cache is not None and q_len == 1 and not tracing():
            if projection is not None and not output_attentions:  # a search index over the encoder output
                state = attention.indexed_state(key_value_states, key_valid, projection)
            if state is None:  # a state that holds no keys is built block by block (O(block) memory, not O(k))
                state = attention.streamed_state(
                    lambda start, end: project(key_value_states[:, start:end]), key_length, key_valid, STREAM_BLOCK
                )
        if state is None:
            keys, values = project(key_value_states)
            build_lean = getattr(attention, "init_lean_state", None)
            if cache is not None and q_len == 1 and attention.settings.lean_cache and build_lean is not None:
                # the first single-token step of a lean cache: built lean directly (no segment-major copy); the
                # step below projects its segment's rows
                state = build_lean(keys, values, key_valid)
            elif output_attentions or tracing() or shares_storage(keys, key_value_states):
                # the weights read the projections again below; a graph's inputs, and an encoder output seen
                # through an identity projection, are not this function's to overwrite
                state = attention.init_state(keys, values, key_valid)  # float32-or-wider state
            else:  # nothing reads these projections after the build: their memory may become the state's
                state = attention.init_state_from_donated(keys, values, key_valid)
                keys = values = None  # possibly overwritten; the check re-projects them if it must diagnose
        if not tracing():  # the check reads a flag on the host; compile/export run without it
            if cache is not None and finite_check_mode(key_value_states.device) == "deferred":
                pending = PendingFiniteCheck.start(key_value_states, state, layer_idx, attention, project)
            else:
                check_finite_state(key_value_states, keys, values, state, layer_idx, attention, project=project)

    # an int (dynamic cache) or a 0-d tensor (static cache): used on the device, never synced to the host
    start = 0 if cache is None else cache.self_attention_cache.get_seq_length(cache_index) - q_len
    if cache is not None and q_len == 1:

        def project_rows(positions: torch.Tensor) -> tuple[torch.Tensor, torch.Tensor]:
            width = key_value_states.shape[-1]
            if positions.dim() == 3:  # (B, H, n): each head its own rows
                if projection is None:
                    raise ValueError("Per-head encoder rows need the layer's per-head projection.")
                batch, heads, count = positions.shape
                flat = positions.reshape(batch, heads * count, 1).expand(-1, -1, width)
                rows = torch.gather(key_value_states, 1, flat).view(batch, heads, count, width)
                return projection.project(rows)
            index = positions[:, :, None].expand(-1, -1, width)
            return project(torch.gather(key_value_states, 1, index))

        output, state = attention.step(queries, state, position=start, project_rows=project_rows)
    else:
        output, state = attention(queries, state, start_position=start, dropout=dropout)

    weights = None
    if output_attentions:
        if keys is None or values is None:
            keys, values = project(key_value_states)
        key_valid = key_padding_from_mask(mask, keys.shape[2])
        weights = cross_attention_weights(attention, queries, keys, state, start_position=start, key_valid=key_valid)
        # The output is computed again from the returned weights, so that they are the autograd nodes it depends
        # on (their gradient is d(loss)/d(weights)); the same function, equal up to rounding.
        mixing = F.dropout(weights, p=dropout, training=True) if dropout > 0.0 and attention.has_softmax else weights
        output = attention.output_from_weights(
            mixing, queries, keys, values, state, start_position=start, key_valid=key_valid
        )

    if cache is not None:
        # The lean layout carries the RAF membrane of the segments fired so far, so it is only entered
        # at a single-token step, whose position is the sequence's own. After a multi-token chunk
        # (assisted decoding, prompt lookup) the state stays standard: generate() may crop the
        # rejected candidates, and a lean membrane would still hold the segments they reached.
        if attention.settings.lean_cache and not state.is_lean and q_len == 1:
            state = attention.lean(state)
        key_shape = (queries.shape[1], key_value_states.shape[1], queries.shape[3])  # (H, k, d)
        _store_state(cache, cache_index, state, key_shape, queries.dtype)
        if pending is not None:
            stored = cache.cross_attention_cache.layers[cache_index]
            assert isinstance(stored, SRformerCacheLayer)
            stored.pending_check = pending
    return output, weights


def _store_state(
    cache: EncoderDecoderCache, layer_idx: int, state: CrossAttentionState, key_shape: tuple[int, int, int],
    dtype: torch.dtype,
) -> None:
    """Put ``state`` into the cross-attention part of ``cache`` at ``layer_idx`` (an
    :class:`SRformerCacheLayer` presenting keys of ``key_shape`` = (H, k, d) and ``dtype``)."""
    layers = cache.cross_attention_cache.layers
    while len(layers) <= layer_idx:
        layers.append(DynamicLayer())
    layer = layers[layer_idx]
    if isinstance(layer, SRformerCacheLayer):
        layer.set_state(state, key_shape, dtype)
    else:
        layers[layer_idx] = SRformerCacheLayer(state, key_shape, dtype)
    cache.is_updated[layer_idx] = True


#: Where the NaN/inf check of a freshly built state is read (:func:`finite_check_mode`); None: by device.
FINITE_CHECK_OVERRIDE: str | None = None


def finite_check_mode(device: torch.device) -> str:
    """How a generation cache's freshly built state is checked for NaN/inf: ``"now"`` on the CPU, where reading
    the check's flag waits for nothing (:func:`check_finite_state` at the build); ``"deferred"`` on an accelerator
    (:class:`PendingFiniteCheck`: the flag is copied to the host without waiting and read at the layer's next step,
    which raises there), so that the first step's kernel launches never wait for the device. A forward pass without
    a cache always checks now. :data:`FINITE_CHECK_OVERRIDE` (``"now"`` or ``"deferred"``) overrides the device's
    choice (tests, and the operator count of what a GPU runs)."""
    if FINITE_CHECK_OVERRIDE is not None:
        return FINITE_CHECK_OVERRIDE
    return "now" if device.type == "cpu" else "deferred"


class PendingFiniteCheck:
    """A state's NaN/inf check whose flag is on its way to the host (:func:`finite_check_mode` ``"deferred"``).

    :meth:`start` reduces the encoder output and the state's checked fields to one flag on the device (no host
    sync) and copies it to pinned host memory without waiting (on CUDA, with an event marking the copy); the layer's
    next call reads it once the copy is done (:meth:`ready`: the event has completed, which generate()'s own sync
    after each token ensures) and, if a value was not finite, raises :func:`check_finite_state`'s error
    (:meth:`raise_if_non_finite`). Consequence: the error comes one decoder step after the state was built, and a
    generation of one token is not checked.
    """

    def __init__(self, flag: Any, event: object | None, diagnose: Callable[[], None]) -> None:
        self.flag, self.event, self.diagnose = flag, event, diagnose  # flag: a 0-d NumPy view of host memory

    @classmethod
    def start(
        cls, encoder_states: torch.Tensor, state: CrossAttentionState, layer_idx: int | None,
        attention: CrossAttentionMechanism, project: Callable[[torch.Tensor], tuple[torch.Tensor, torch.Tensor]],
    ) -> PendingFiniteCheck:
        """Start the check of ``state`` built from ``encoder_states`` (arguments as :func:`check_finite_state`)."""
        checked = _checked_tensors(encoder_states, state, attention)
        finite = _all_finite(checked)
        event = None
        if finite.device.type == "cuda":
            host = torch.empty((), dtype=torch.bool, pin_memory=True)
            host.copy_(finite, non_blocking=True)
            event = torch.cuda.Event()
            event.record()
        else:
            host = finite.to("cpu")

        def diagnose() -> None:
            check_finite_state(encoder_states, None, None, state, layer_idx, attention, project=project)

        # a NumPy view of the host memory, made now: the copy lands in it, and reading it later is no operator call
        return cls(host.numpy(), event, diagnose)

    def ready(self) -> bool:
        """Whether the flag has reached the host (asks the event; never waits)."""
        return self.event is None or bool(self.event.query())  # type: ignore[attr-defined]

    def raise_if_non_finite(self) -> None:
        """Raise :func:`check_finite_state`'s ``ValueError`` when the flag says a value was not finite (the flag's
        host memory is read directly: no operator call, no sync)."""
        if not bool(self.flag):
            self.diagnose()
            raise ValueError("SRformer cross attention: a NaN/inf value reached the cross-attention state.")


def _checked_tensors(
    encoder_states: torch.Tensor, state: CrossAttentionState, attention: torch.nn.Module | None
) -> list[torch.Tensor]:
    """The floating-point tensors a NaN/inf check reads: the encoder output and the fields the module names."""
    if isinstance(attention, CrossAttentionMechanism):
        names: tuple[str, ...] = attention.finite_check_fields(state)
    else:
        names = tuple(field.name for field in dataclasses.fields(state)) if dataclasses.is_dataclass(state) else ()
    return [
        value for value in (encoder_states, *(getattr(state, name) for name in names))
        if isinstance(value, torch.Tensor) and value.is_floating_point() and value.numel()
    ]


def _all_finite(checked: list[torch.Tensor]) -> torch.Tensor:
    """A 0-d bool tensor on the tensors' device: every element of ``checked`` (non-empty tensors, as
    :func:`_checked_tensors` gives them) is finite. On an accelerator
    (:func:`~srformer.attention.step_choice.step_kind`) each tensor's largest magnitude (one ``_foreach_norm`` of
    order inf for them all: one operator call, one fused kernel on a GPU) propagates NaN and is infinite iff an
    element is, and it is finite iff it is below ``inf`` (NaN compares false): four calls whatever the number of
    tensors, one read of each, no boolean copies, no host sync. On the CPU, where that norm reads bfloat16 about ten
    times slower, each tensor's smallest and largest element from one ``aminmax`` (it propagates NaN; its ends are
    infinite iff an element of that sign is), one read where ``amax`` and ``amin`` took two: about a third of their
    time on a (8, 4096, 512) float32 encoder output, on a CPU core."""
    with torch.no_grad():
        if checked and step_kind(checked[0].device) == "accelerator":
            return (torch.stack(torch._foreach_norm(checked, ord=float("inf"))) < float("inf")).all()
        ends = [end.isfinite() for tensor in checked for end in torch.aminmax(tensor)]
        return torch.stack(ends).all() if ends else torch.ones((), dtype=torch.bool)


def check_finite_state(
    encoder_states: torch.Tensor,
    keys: torch.Tensor | None,
    values: torch.Tensor | None,
    state,
    layer_idx: int | None,
    attention: torch.nn.Module | None = None,
    project: Callable[[torch.Tensor], tuple[torch.Tensor, torch.Tensor]] | None = None,
) -> None:
    """Reject NaN/inf reaching one layer's SRformer cross attention, with the likely cause and fixes.

    Called once per sequence and layer, when the per-sequence state is built (never per decoding
    step): it costs one host sync. Padding positions are checked too, because masking multiplies
    them by zero and ``nan * 0`` is still NaN.

    Args:
        encoder_states: (B, k, d_model) encoder output given to the layer.
        keys: (B, H, k, d) projected encoder keys, or None for a state built block by block (they are then
            projected again with ``project``, only to tell where a non-finite value came from).
        values: (B, H, k, d) projected encoder values, or None likewise.
        state: the state built from them; the fields the module names
            (:meth:`~srformer.attention.base.CrossAttentionMechanism.finite_check_fields`: every floating-point
            tensor field, ``K^T V``-derived RAF inputs and readouts, ``norm(K)``, ..., less those another field
            witnesses) are checked, all floating-point fields without a module.
        layer_idx: the decoder layer index, named in the message (None if unknown).
        attention: the layer's SRformer module; its RAF leak and threshold, if it has them, are
            reported when the state is what overflowed.

    Raises:
        ValueError: if any of these holds a NaN or an infinity. The message names the layer, where
            the values first stopped being finite (encoder output, key/value projections, or the
            recurrent state) and the fixes (bf16 or fp32 instead of fp16, ``kv_clamp``, a lower
            learning rate / gradient clipping; a RAF threshold trained to zero or below).
    """
    checked = _checked_tensors(encoder_states, state, attention)
    if not checked:
        return
    # The state holds (copies of) the keys/values or tensors summed from them, so a non-finite projection shows
    # there too; the diagnosis below tells them apart.
    if bool(_all_finite(checked)):  # the one host sync
        return
    with torch.no_grad():
        if (keys is None or values is None) and project is not None:
            keys, values = project(encoder_states)
        projections_finite = keys is None or values is None or bool(torch.isfinite(keys).all() &
                                                                    torch.isfinite(values).all())
        finite = [bool(torch.isfinite(encoder_states).all()), projections_finite]
    layer = f"decoder layer {layer_idx}" if layer_idx is not None else "a decoder layer"
    precision = (
        "Train and run in bf16 or float32 instead of fp16 (srformer train --mixed-precision bf16 or no; "
        "torch.autocast(dtype=torch.bfloat16))"
    )
    if not finite[0]:
        bad = int((~torch.isfinite(encoder_states)).sum())
        raise ValueError(
            f"SRformer cross attention of {layer}: the encoder output holds {bad} NaN/inf value(s) of "
            f"{encoder_states.numel()}, so the encoder diverged or overflowed before cross attention. {precision}, "
            "lower the learning rate or clip gradients (max_grad_norm), or clamp the encoder activations "
            "(e.g. torch.clamp on the encoder output with a forward hook)."
        )
    if not finite[1]:
        raise ValueError(
            f"SRformer cross attention of {layer}: the projected encoder keys/values overflowed to NaN/inf "
            "although the encoder output is finite "
            f"(largest |value| {float(encoder_states.detach().abs().max()):.3g}). "
            f"{precision}, or clamp the encoder activations before cross attention."
        )
    raf = getattr(attention, "raf", None)
    threshold, leak = getattr(raf, "threshold", None), getattr(raf, "leak", None)
    neuron = ""
    if isinstance(threshold, torch.Tensor) and isinstance(leak, torch.Tensor):
        # detached: float() of a parameter that requires grad adds a torch UserWarning to this error
        threshold_value, leak_value = float(threshold.detach()), float(leak.detach())
        neuron = f" (RAF threshold {threshold_value:.3g}, leak {leak_value:.3g})"
        if threshold_value <= 1e-6:
            neuron += (
                ": the learnable RAF threshold has been trained to zero or below, so membrane / threshold is "
                "infinite. Lower the learning rate, or start from a larger raf_threshold_init"
            )
    raise ValueError(
        f"SRformer cross attention of {layer}: the recurrent state built from finite keys/values (K^T V products, "
        f"norm(K), RAF membrane and output) overflowed to NaN/inf{neuron}. Set SRformerConfig(kv_clamp=2.0) to bound "
        f"the K^T V products, {precision[0].lower() + precision[1:]}, or lower the RAF leak (raf_leak_init) if the "
        "membrane grows."
    )
