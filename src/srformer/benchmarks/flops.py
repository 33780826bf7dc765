"""FLOP counts: measured with ``torch.utils.flop_counter.FlopCounterMode``, and paper Table 1.

Measured counts are FLOPs as FlopCounterMode defines them: 2 per multiply-accumulate of every
matrix product (``mm``, ``bmm``, ``addmm``, attention kernels); element-wise work (softmax, RAF,
masking) is not counted.

torch 2.13's FlopCounterMode has formulas for the CUDA attention kernels but none for the CPU one
(``aten._scaled_dot_product_flash_attention_for_cpu``), which it would count as 0. :func:`count_flops`
adds that formula through FlopCounterMode's ``custom_mapping``: the same ``Q Kᵀ`` plus ``A V``
count torch uses for the CUDA kernels (``2·b·h·q·k·d`` each, masks ignored).

Table 1 (paper Sec. 3.5) counts products per example and head, for ``q`` decoder positions,
``k`` encoder positions, head size ``d``, segment size ``s`` and ``m = k / s`` segments:

=========== ====================== ===========================
model       computation (MACs)     memory (elements)
=========== ====================== ===========================
Transformer ``q·k·d``              ``q·k + k·d``
Segmented   ``q·s·d``              ``q·s + k·d``
SRformer    ``q·s·d + k·d²``       ``q·s + k·d + m·d²``
=========== ====================== ===========================

Computation counts the score product ``Q Kᵀ`` only (one multiply-accumulate each); a measured
count of ``Q Kᵀ`` and ``A V`` at 2 FLOPs per multiply-accumulate is therefore about 4x the
computation column (2x in MACs). With the paper's example (q = 128, k = 1024, d = 64, s = 64)
these definitions give 8388.608K, 524.288K and 4718.592K, and 196.608K, 73.728K and 139.264K:
rounded to the nearest thousand that is the paper's 8389 / 524 / 4718 and 197 / 74 / 139, except
SRformer's computation, 4718.592K, which rounds to 4719 (the paper truncates this one).
``m`` is ``ceil(k / s)`` here (equal to ``k / s`` when ``s`` divides ``k``, as in the paper).
"""

from __future__ import annotations

from collections.abc import Callable

import torch
import torch.nn.functional as F
from torch.utils.flop_counter import FlopCounterMode

from srformer.attention.variants import build_cross_attention
from srformer.core import TABLE1_VARIANTS, SRformerConfig

# TABLE1_VARIANTS (re-exported): the registry's variants with a row in paper Table 1; its "Transformer" is ``full``.


def _check_sizes(**sizes: int) -> None:
    for name, value in sizes.items():
        if isinstance(value, bool) or not isinstance(value, int) or value < 1:
            raise ValueError(f"`{name}` must be a positive integer, got {value!r}.")


def table1_computation(variant: str, *, q: int, k: int, d: int, s: int) -> int:
    """Paper Table 1 computation of cross attention, per example and head, in MACs.

    Args:
        variant: ``full`` (the paper's Transformer), ``segmented`` or ``srformer``.
        q: decoder positions (tokens); k: encoder positions (tokens); d: head size; s: segment size (tokens).

    Returns:
        ``q·k·d``, ``q·s·d`` or ``q·s·d + k·d²``.

    Raises:
        ValueError: for an unknown variant or a non-positive size.
    """
    _check_sizes(q=q, k=k, d=d, s=s)
    if variant == "full":
        return q * k * d
    if variant == "segmented":
        return q * s * d
    if variant == "srformer":
        return q * s * d + k * d * d
    raise ValueError(f"Unknown Table 1 variant {variant!r}; use one of {', '.join(TABLE1_VARIANTS)}.")


def table1_memory(variant: str, *, q: int, k: int, d: int, s: int) -> int:
    """Paper Table 1 memory of cross attention, per example and head, in elements (numbers held).

    Args:
        variant: ``full`` (the paper's Transformer), ``segmented`` or ``srformer``.
        q: decoder positions (tokens); k: encoder positions (tokens); d: head size; s: segment size (tokens).

    Returns:
        ``q·k + k·d``, ``q·s + k·d`` or ``q·s + k·d + m·d²`` with ``m = ceil(k / s)``.

    Raises:
        ValueError: for an unknown variant or a non-positive size.
    """
    _check_sizes(q=q, k=k, d=d, s=s)
    if variant == "full":
        return q * k + k * d
    if variant == "segmented":
        return q * s + k * d
    if variant == "srformer":
        return q * s + k * d + (-(-k // s)) * d * d
    raise ValueError(f"Unknown Table 1 variant {variant!r}; use one of {', '.join(TABLE1_VARIANTS)}.")


def in_thousands(count: float) -> int:
    """``count / 1000`` rounded to the nearest integer (half up), as Table 1's "Example (K)" columns."""
    return int((count + 500) // 1000)


def _cpu_sdpa_flops(query_shape, key_shape, value_shape, *args, out_shape=None, **kwargs) -> int:
    batch, heads, q_len, d = query_shape
    k_len, d_v = key_shape[-2], value_shape[-1]
    return 2 * batch * heads * q_len * k_len * d + 2 * batch * heads * q_len * k_len * d_v


#: Extra FlopCounterMode formulas (see the module docstring).
EXTRA_FLOP_FORMULAS = {torch.ops.aten._scaled_dot_product_flash_attention_for_cpu: _cpu_sdpa_flops}


def count_flops(fn: Callable[[], object]) -> tuple[object, int]:
    """Run ``fn()`` under ``FlopCounterMode`` (plus :data:`EXTRA_FLOP_FORMULAS`).

    The count depends on the operations and their shapes only, so ``fn`` runs with one CPU thread:
    on a busy machine, each small multi-threaded CPU kernel can wait a long time for a core
    (measured on 2 cores while another process held both: 256 single-query attention calls over
    8192 keys took 0.1 s with one thread and 50 s with two). The thread count is restored afterwards.

    Returns:
        ``(result, flops)``: ``fn``'s result and the FLOPs it executed.
    """
    threads = torch.get_num_threads()
    torch.set_num_threads(1)
    try:
        with FlopCounterMode(display=False, custom_mapping=EXTRA_FLOP_FORMULAS) as counter:
            result = fn()
    finally:
        torch.set_num_threads(threads)
    return result, int(counter.get_total_flops())


def attention_core_flops(
    variant: str, *, q: int, k: int, d: int, s: int, mode: str, device: torch.device | str = "cpu", seed: int = 0
) -> int:
    """Measured FLOPs of cross attention alone (no projections), one example and one head.

    Random projected ``Q`` (q, d), ``K`` and ``V`` (k, d). ``full`` is
    ``scaled_dot_product_attention``; ``segmented``/``srformer`` are
    :func:`~srformer.attention.build_cross_attention`'s module with
    ``segment_size = s`` and ``target_length = q`` (the schedule spans the q positions, as in
    the paper's ``i = t·m/q``).

    Args:
        variant: ``full``, ``segmented`` or ``srformer``.
        q, k, d, s: decoder positions, encoder positions, head size, segment size.
        mode: ``"forward"``: all q positions at once (teacher forcing); ``"generation"``: the
            state build (for the converted variants) plus q single-position steps, as in
            ``generate()`` with a cache.
        device: where to run.
        seed: seed of the random inputs.

    Returns:
        FLOPs (FlopCounterMode).

    Raises:
        ValueError: for an unknown variant or mode, or a non-positive size.
    """
    _check_sizes(q=q, k=k, d=d, s=s)
    if variant not in TABLE1_VARIANTS:
        raise ValueError(f"Unknown variant {variant!r}; use one of {', '.join(TABLE1_VARIANTS)}.")
    if mode not in ("forward", "generation"):
        raise ValueError(f"`mode` must be 'forward' or 'generation', got {mode!r}.")
    generator = torch.Generator().manual_seed(seed)
    queries, keys, values = (torch.randn(1, 1, n, d, generator=generator).to(device) for n in (q, k, k))
    if variant == "full":
        if mode == "forward":
            def run():
                F.scaled_dot_product_attention(queries, keys, values)
        else:
            def run():
                for t in range(q):
                    F.scaled_dot_product_attention(queries[:, :, t : t + 1], keys, values)
    else:
        attention = build_cross_attention(
            SRformerConfig(variant=variant, segment_size=s, target_length=q), d
        ).to(device)

        if mode == "forward":
            def run():
                attention(queries, attention.init_state(keys, values, None))
        else:
            def run():
                state = attention.init_state(keys, values, None)
                for t in range(q):
                    _, state = attention.step(queries[:, :, t : t + 1], state, position=t)

    with torch.no_grad():
        return count_flops(run)[1]


def cross_attention_forward_flops(
    module: torch.nn.Module, encoder_states: torch.Tensor, decoder_length: int, seed: int = 0
) -> int:
    """Measured FLOPs of one teacher-forced call of a T5 cross-attention module, projections included.

    The call covers ``decoder_length`` positions at once without a cache (training's forward):
    query, key, value and output projections plus the attention.

    Args:
        module: a T5 cross-attention module (unmodified or converted).
        encoder_states: (B, k, d_model) encoder output.
        decoder_length: ``q``, decoder positions (tokens).
        seed: seed of the random decoder hidden states (B, q, d_model).

    Returns:
        FLOPs (FlopCounterMode).

    Raises:
        ValueError: if ``decoder_length < 1``.
    """
    _check_sizes(decoder_length=decoder_length)
    batch, _, d_model = encoder_states.shape
    generator = torch.Generator().manual_seed(seed)
    hidden = torch.randn(batch, decoder_length, d_model, generator=generator).to(encoder_states.device)
    with torch.no_grad():
        return count_flops(lambda: module(hidden, None, key_value_states=encoder_states, past_key_values=None))[1]
