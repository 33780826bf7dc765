"""Time of one decoder step of one cross-attention module, as ``generate()`` calls it.

The module is layer 0 of a t5-small-sized decoder (one layer, not the whole decoder). Its cache
is filled once for encoder length ``k`` (the first call, at decoder position 0: the unmodified
module projects and caches K/V, a converted one builds its :class:`CrossAttentionState`), then
single-token calls are timed at consecutive decoder positions ``t = 1 .. n``. Between two calls,
outside the timed region, the self-attention cache grows by one dummy token, exactly what the
layer's self attention does in ``generate()``: the converted module reads ``t`` from it, so the
segment changes of the schedule, and the RAF firings with them, fall inside the timed run.
A repeat restores the cache after the fill, so every repeat times the same positions.

Inputs mirror the model's: the encoder mask comes from
``transformers.masking_utils.create_bidirectional_mask`` (no padding), and the unmodified module
receives the zero position bias returned by its first call, as decoder layers 1..5 receive the
bias that layer 0 creates.

Compiled (``compiled=True``, ``srformer bench --compiled``): the self-attention cache is a ``StaticCache``
(the position is a 0-d tensor on the device) and the timed calls go through the compiled module
(:mod:`~srformer.benchmarks.compiled`); the cache fill stays eager.
"""

from __future__ import annotations

import statistics
from dataclasses import dataclass

import torch
from torch import nn
from transformers import Cache, DynamicCache, EncoderDecoderCache, PretrainedConfig, StaticCache
from transformers.masking_utils import create_bidirectional_mask

from srformer.attention.state import CrossAttentionState, SRformerCacheLayer
from srformer.benchmarks.compiled import compile_step
from srformer.benchmarks.flops import count_flops
from srformer.benchmarks.timing import TimingSummary, repeat_samples, time_call


class CrossAttentionStepRun:
    """One cross-attention module, its filled cache, and a run over consecutive decoder positions.

    Args:
        module: a T5 cross-attention module (``T5Attention`` or its SRformer conversion) with
            ``layer_idx`` set, in eval mode.
        encoder_states: (B, k, d_model) encoder output on the module's device.
        positions: ``n``, decoder positions per run (single-token calls at ``t = 1 .. n``).
        seed: seed of the random decoder hidden state (B, 1, d_model) fed at every position.
        static_cache: keep the self-attention positions in a ``StaticCache`` (created once, reset per
            run), so that the decoder position is a 0-d tensor, as for a compiled step.

    Raises:
        ValueError: if ``positions < 1``, ``module.layer_idx`` is None or ``module.config`` is not a
            model config.
    """

    def __init__(
        self, module: nn.Module, encoder_states: torch.Tensor, *, positions: int, seed: int = 0,
        static_cache: bool = False,
    ) -> None:
        if positions < 1:
            raise ValueError(f"`positions` must be >= 1, got {positions}.")
        layer_idx = getattr(module, "layer_idx", None)
        if not isinstance(layer_idx, int):
            raise ValueError("The cross-attention module needs a `layer_idx` to use a cache.")
        config = getattr(module, "config", None)
        if not isinstance(config, PretrainedConfig):
            raise ValueError("The cross-attention module needs its model's `config` (a T5Attention has one).")
        self.module = module
        self.encoder_states = encoder_states
        self.positions = positions
        self.layer_idx = layer_idx
        self.device = encoder_states.device
        batch, k, d_model = encoder_states.shape
        generator = torch.Generator().manual_seed(seed)
        self.hidden = torch.randn(batch, 1, d_model, generator=generator).to(self.device, encoder_states.dtype)
        self.mask = create_bidirectional_mask(
            config=config,
            inputs_embeds=self.hidden,
            attention_mask=torch.ones(batch, k, dtype=torch.long, device=self.device),
            encoder_hidden_states=encoder_states,
        )
        self._dummy = torch.zeros(batch, 1, 1, 1, device=self.device, dtype=encoder_states.dtype)
        self._cross_cache: Cache | None = None
        self._filled_state: CrossAttentionState | None = None
        self._position_bias: torch.Tensor | None = None
        self.cache: EncoderDecoderCache | None = None
        self._static = StaticCache(config, max_cache_len=positions + 1) if static_cache else None

    def _new_cache(self) -> EncoderDecoderCache:
        cross = self._cross_cache if self._cross_cache is not None else DynamicCache()
        if self._static is not None:
            self._static.reset()
        cache = EncoderDecoderCache(self._static if self._static is not None else DynamicCache(), cross)
        cache.self_attention_cache.update(self._dummy, self._dummy, self.layer_idx)  # position 0
        return cache

    def _call(self) -> None:
        self.module(
            self.hidden,
            self.mask,
            key_value_states=self.encoder_states,
            position_bias=self._position_bias,
            past_key_values=self.cache,
        )

    @torch.no_grad()
    def fill(self) -> float:
        """Fill the cache with a call at decoder position 0.

        Returns:
            That call's wall-clock time in seconds (synchronised): the K/V projection of all ``k``
            encoder positions and, for a converted module, the state build.
        """
        self._cross_cache = None  # a fresh cross-attention cache: reusing a filled one would skip the fill
        cache = self.cache = self._new_cache()
        module = getattr(self.module, "_orig_mod", self.module)  # the fill is never compiled
        (_, position_bias, _), seconds = time_call(
            lambda: module(self.hidden, self.mask, key_value_states=self.encoder_states, past_key_values=cache),
            self.device,
        )
        self._position_bias = None if hasattr(self.module, "srformer") else position_bias
        self._cross_cache = cache.cross_attention_cache
        layer = self._cross_cache.layers[self.layer_idx]
        self._filled_state = layer.state if isinstance(layer, SRformerCacheLayer) else None
        return seconds

    def _restore(self) -> EncoderDecoderCache:
        if self._cross_cache is None:
            self.fill()
        layer = self._cross_cache.layers[self.layer_idx] if self._cross_cache is not None else None
        if self._filled_state is not None and isinstance(layer, SRformerCacheLayer):
            layer.set_state(self._filled_state)
        cache = self.cache = self._new_cache()
        cache.is_updated[self.layer_idx] = True
        return cache

    @torch.no_grad()
    def run(self) -> float:
        """Run positions ``t = 1 .. n`` from the filled cache.

        Returns:
            The summed wall-clock time of the ``n`` single-token calls in seconds (each call
            synchronised; the cache bookkeeping between calls is not timed).
        """
        cache = self._restore()
        total = 0.0
        for _ in range(self.positions):
            cache.self_attention_cache.update(self._dummy, self._dummy, self.layer_idx)
            total += time_call(self._call, self.device)[1]
        return total

    @torch.no_grad()
    def run_untimed(self) -> None:
        """Run positions ``t = 1 .. n`` without timing (for FLOP counting)."""
        cache = self._restore()
        for _ in range(self.positions):
            cache.self_attention_cache.update(self._dummy, self._dummy, self.layer_idx)
            self._call()


@dataclass(frozen=True)
class StepMeasurement:
    """Result of :func:`measure_cross_attention_step`.

    Attributes:
        timing: per-run samples in seconds, each the sum over ``positions`` single-token calls.
        positions: decoder positions per run.
        fill_seconds: the cache fill call (decoder position 0) in seconds, the median of ``repeats``
            fills after ``min(warmup, 1)`` discarded one (a single sample moved by 10-20% between calls on a
            quiet CPU).
        flops_per_step: FLOPs of one single-token call (FlopCounterMode, averaged over a run), or
            None when not counted.
    """

    timing: TimingSummary
    positions: int
    fill_seconds: float
    flops_per_step: float | None

    @property
    def step_ms(self) -> float:
        """Median over runs of the mean time per decoder step, in milliseconds."""
        return self.timing.median_ms / self.positions


def measure_cross_attention_step(
    module: nn.Module,
    encoder_states: torch.Tensor,
    *,
    positions: int,
    repeats: int,
    warmup: int = 1,
    count: bool = True,
    compiled: bool = False,
) -> StepMeasurement:
    """Median time per decoder step of ``module`` with a cache filled for ``encoder_states``.

    Args:
        module: a T5 cross-attention module (unmodified or converted), eval mode, ``layer_idx`` set.
        encoder_states: (B, k, d_model) encoder output.
        positions: decoder positions per run (``t = 1 .. positions``).
        repeats: timed runs (the median is reported).
        warmup: discarded runs before them.
        count: also count FLOPs per step with FlopCounterMode (one extra, untimed run; not when compiled).
        compiled: time the compiled step (:func:`~srformer.benchmarks.compiled.compile_step`, static
            self-attention cache); it is compiled in the warm-up runs (at least one).

    Returns:
        A :class:`StepMeasurement` (``step_ms``: milliseconds per step).

    Raises:
        ValueError: for ``positions < 1``, ``repeats < 1`` or ``warmup < 0``.
    """
    run = CrossAttentionStepRun(module, encoder_states, positions=positions, static_cache=compiled)
    if warmup:
        run.fill()  # the first fill of a shape pays for first-touch memory
    fill_seconds = statistics.median(run.fill() for _ in range(repeats))
    if compiled:
        torch._dynamo.reset()  # earlier variants' graphs would count against dynamo's recompilation limit
        run.module = compile_step(module)
        warmup = max(warmup, 1)  # compilation happens in the first run, never in a timed one
    timing = repeat_samples(run.run, repeats=repeats, warmup=warmup)
    if compiled:
        torch._dynamo.reset()
        run.module = module
    flops = None
    if count and not compiled:
        _, total = count_flops(run.run_untimed)
        flops = total / positions
    return StepMeasurement(timing, positions, fill_seconds, flops)
