"""End-to-end ``generate()`` throughput, and the bytes held in the cross-attention cache.

The encoder is excluded: ``generate()`` receives precomputed random ``encoder_outputs`` (a
``BaseModelOutput``) and an all-ones attention mask, so the time covers the decoder only (the
cross-attention K/V projection or state build at the first step included). Decoding is greedy
with ``min_new_tokens == max_new_tokens``, so every variant generates the same number of tokens
whatever its (random) weights predict.

Compiled (``compiled=True``, ``srformer bench --compiled``): ``cache_implementation="static"`` with a fullgraph
``CompileConfig`` (:func:`~srformer.benchmarks.compiled.compile_config`); the warm-up calls generate as
many tokens as the timed ones, so that they compile for the same static cache shape.
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import Any

import torch
from transformers import Cache, EncoderDecoderCache, GenerationMixin, PreTrainedModel
from transformers.generation.utils import GenerateEncoderDecoderOutput
from transformers.modeling_outputs import BaseModelOutput

from srformer.attention.state import SRformerCacheLayer
from srformer.benchmarks.compiled import compile_config
from srformer.benchmarks.memory import cuda_peak_increase
from srformer.benchmarks.timing import TimingSummary, repeat_samples, time_call


def random_encoder_outputs(
    batch_size: int, encoder_length: int, d_model: int, *, device: torch.device | str = "cpu", seed: int = 0
) -> tuple[BaseModelOutput, torch.Tensor]:
    """Random encoder output and its attention mask.

    Returns:
        ``(encoder_outputs, attention_mask)``: ``last_hidden_state`` (B, k, d_model) float32 and
        an all-ones (B, k) long mask (no padding).
    """
    generator = torch.Generator().manual_seed(seed)
    states = torch.randn(batch_size, encoder_length, d_model, generator=generator).to(device)
    mask = torch.ones(batch_size, encoder_length, dtype=torch.long, device=device)
    return BaseModelOutput(last_hidden_state=states), mask


def compiled_generation_options(device: torch.device, compiled: bool) -> dict[str, Any]:
    """``generate()`` keywords of the compiled decoding step on ``device`` (a static cache and
    :func:`~srformer.benchmarks.compiled.compile_config`), or none when not ``compiled``."""
    return {"cache_implementation": "static", "compile_config": compile_config(device)} if compiled else {}


def generate_fixed(
    model: PreTrainedModel,
    encoder_outputs: BaseModelOutput,
    attention_mask: torch.Tensor,
    new_tokens: int,
    *,
    compiled: bool = False,
) -> GenerateEncoderDecoderOutput:
    """Greedy ``generate()`` of exactly ``new_tokens`` tokens per sequence from precomputed encoder outputs;
    with ``compiled``, through a static cache and transformers' compiled decoding step (see the module docstring).

    Returns:
        The ``GenerateEncoderDecoderOutput`` (``sequences`` (B, 1 + new_tokens) and ``past_key_values``).

    Raises:
        TypeError: for a model that cannot generate, or that is not an encoder-decoder model.
    """
    if not isinstance(model, GenerationMixin):
        raise TypeError(f"{type(model).__name__} has no generate() (it is not a GenerationMixin).")
    # transformers types generate() as taking `self: GenerativePreTrainedModel` under @torch.no_grad(), which mypy
    # reads as a second `self` parameter (newer transformers releases type it so that no ignore is needed)
    output = model.generate(  # type: ignore[misc, unused-ignore]
        encoder_outputs=encoder_outputs,
        attention_mask=attention_mask,
        max_new_tokens=new_tokens,
        min_new_tokens=new_tokens,
        do_sample=False,
        num_beams=1,
        use_cache=True,
        return_dict_in_generate=True,
        **compiled_generation_options(model.device, compiled),
    )
    if not isinstance(output, GenerateEncoderDecoderOutput):
        raise TypeError(
            f"generate() of {type(model).__name__} returned a {type(output).__name__}; an encoder-decoder model "
            "returns a GenerateEncoderDecoderOutput."
        )
    return output


def cross_attention_cache_bytes(
    cache: Cache | None, encoder_hidden_states: torch.Tensor | None = None
) -> int:
    """Bytes held for cross attention in a generation cache, summed over decoder layers.

    Unmodified layers (``DynamicLayer``): their cached keys plus values. Converted layers
    (:class:`SRformerCacheLayer`): every tensor of their state (``CrossAttentionState.nbytes``).
    When any layer holds a lean state, the encoder output (read again at every step to project
    the current segment) is counted once, from ``encoder_hidden_states``; so is a structure the layers share
    (``knn``'s search index, :meth:`~srformer.attention.state.CrossAttentionState.shared`).

    Args:
        cache: the ``EncoderDecoderCache`` returned by ``generate(..., return_dict_in_generate=True)``.
        encoder_hidden_states: (B, k, d_model) encoder output; required when a state is lean.

    Returns:
        Bytes.

    Raises:
        TypeError: if ``cache`` is not an ``EncoderDecoderCache``.
        ValueError: if a lean state is present but ``encoder_hidden_states`` is None.
    """
    if not isinstance(cache, EncoderDecoderCache):
        raise TypeError(f"Expected an EncoderDecoderCache, got {type(cache).__name__}.")
    total = 0
    lean = False
    shared: dict[int, int] = {}
    for layer in cache.cross_attention_cache.layers:
        if isinstance(layer, SRformerCacheLayer):
            if layer.state is not None:
                total += layer.state.nbytes()
                lean = lean or layer.state.reads_encoder_rows
                held = layer.state.shared()
                if held is not None:
                    shared[id(held[0])] = held[1]
        else:
            keys, values = getattr(layer, "keys", None), getattr(layer, "values", None)
            if getattr(layer, "is_initialized", False) and keys is not None and values is not None:
                total += keys.numel() * keys.element_size() + values.numel() * values.element_size()
    if lean:
        if encoder_hidden_states is None:
            raise ValueError(
                "A lean SRformer cache reads the encoder output at every step: pass encoder_hidden_states."
            )
        total += encoder_hidden_states.numel() * encoder_hidden_states.element_size()
    return total + sum(shared.values())


@dataclass(frozen=True)
class GenerationMeasurement:
    """Result of :func:`measure_generation`.

    Attributes:
        timing: seconds of each timed ``generate()`` call.
        batch_size: sequences per call.
        new_tokens: tokens generated per sequence.
        cache_bytes: bytes held in the cross-attention cache after generation
            (:func:`cross_attention_cache_bytes`).
        cuda_peak_bytes: on CUDA, the peak allocated memory above the pre-call level during the last
            timed call (``torch.cuda.max_memory_allocated``); None on the CPU.
    """

    timing: TimingSummary
    batch_size: int
    new_tokens: int
    cache_bytes: int
    cuda_peak_bytes: int | None

    @property
    def tokens_per_second(self) -> float:
        """New tokens of all sequences per second: ``batch_size * new_tokens / median seconds``."""
        return self.batch_size * self.new_tokens / self.timing.median_s


def measure_generation(
    model: PreTrainedModel,
    *,
    batch_size: int,
    encoder_length: int,
    new_tokens: int,
    repeats: int,
    warmup: int = 1,
    warmup_tokens: int | None = None,
    seed: int = 0,
    compiled: bool = False,
) -> GenerationMeasurement:
    """Time greedy ``generate()`` of ``new_tokens`` tokens from random encoder outputs (encoder excluded).

    Args:
        model: a T5-style seq2seq model (unmodified or converted), eval mode.
        batch_size: sequences per call.
        encoder_length: ``k``, encoder positions (tokens).
        new_tokens: tokens per sequence (forced: ``min_new_tokens == max_new_tokens``).
        repeats: timed calls (the median is reported).
        warmup: discarded calls before them, at the same shapes.
        warmup_tokens: tokens per warm-up call (default ``new_tokens``).
        seed: seed of the random encoder output.
        compiled: time the compiled decoding step (static cache, fullgraph ``CompileConfig``); at least one
            warm-up call, of ``new_tokens`` tokens (``warmup_tokens`` is ignored), compiles it.

    Returns:
        A :class:`GenerationMeasurement` (``tokens_per_second``: new tokens/s).

    Raises:
        ValueError: if ``new_tokens < 1``, ``repeats < 1`` or ``warmup < 0``.
    """
    if new_tokens < 1:
        raise ValueError(f"`new_tokens` must be >= 1, got {new_tokens}.")
    device = model.device
    encoder_outputs, mask = random_encoder_outputs(
        batch_size, encoder_length, model.config.d_model, device=device, seed=seed
    )
    if compiled:  # compile in an untimed call, for the timed calls' static cache shape
        torch._dynamo.reset()  # earlier variants' graphs would count against dynamo's recompilation limit
        warmup, warmup_tokens = max(warmup, 1), new_tokens
    warmups = [warmup_tokens or new_tokens] * warmup
    last_cache: Cache | None = None
    last_peak: int | None = None

    def sample() -> float:
        nonlocal last_cache, last_peak
        tokens = warmups.pop() if warmups else new_tokens
        with torch.no_grad():
            if device.type == "cuda":
                def timed() -> tuple[GenerateEncoderDecoderOutput, float]:
                    return time_call(lambda: generate_fixed(model, encoder_outputs, mask, tokens, compiled=compiled),
                                     device)

                (output, seconds), peak = cuda_peak_increase(timed, device)
                last_peak = peak
            else:
                output, seconds = time_call(
                    lambda: generate_fixed(model, encoder_outputs, mask, tokens, compiled=compiled), device
                )
        if output.sequences.shape[1] != tokens + 1:
            raise RuntimeError(f"generate() made {output.sequences.shape[1] - 1} tokens instead of {tokens}.")
        # transformers 5.24 renamed the output's cache to `cache` (reading `past_key_values` there warns)
        last_cache = output.cache if "cache" in output else output.past_key_values
        return seconds

    timing = repeat_samples(sample, repeats=repeats, warmup=warmup)
    if compiled:
        torch._dynamo.reset()
    cache_bytes = cross_attention_cache_bytes(last_cache, encoder_outputs.last_hidden_state)
    return GenerationMeasurement(timing, batch_size, new_tokens, cache_bytes, last_peak)
