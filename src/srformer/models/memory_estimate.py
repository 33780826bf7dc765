"""How much memory generation from an input of a given length needs, estimated before anything is allocated, and a
clear refusal when it cannot fit (instead of the operating system's out-of-memory kill).

The estimate (bytes) for a batch of ``B`` inputs of ``k`` tokens decoded with ``b`` beams (or ``b`` returned
sequences each; transformers copies the encoder output ``b`` times), ``L`` decoder layers, ``H`` heads of ``d``, with
``B' = B * b``:

- the joined encoder output, ``B' * k * d_model`` elements;
- per layer, a state that holds encoder-length tensors (the registry's ``state_grows_with_input``: ``full``, ``knn``,
  ``block-topk``, ``segmented`` and ``srformer`` without ``lean_cache``, ...): keys and values,
  ``2 * B' * H * k * d`` elements (an upper bound for the mechanisms that compress them), plus for ``srformer``
  the ``V * d * d`` float32 RAF readouts per head (one per segment the schedule can visit:
  ``V = min(ceil(k / s), T + 1)``);
- per layer, a fixed-size state (``lean_cache=True``, ``linear``, ...): nothing that grows with ``k`` (its
  ``O(H * d^2)`` numbers are left out);
- one layer's projected keys and values while its state is built, ``2 * B' * H * k * d`` elements;
- ``knn`` searching an index (``knn_index`` set, an input of at least ``index_min_keys`` tokens): no per-layer
  state, one float32 index of ``B * k * (d_model + 1)`` numbers (the beams of an input share it), and two float32
  copies of one example's rows while it is built.
- ``knn`` searching the encoder output's rows (``knn_index="rows"``, an input padded to at least ``index_min_keys``
  tokens): per layer an order-key term (float64) and a mask (float32) per position, ``B' * k * 12`` bytes; at a
  step, every head's scores and order keys, ``B' * H * k`` numbers each.
- ``quest`` reading rows of the encoder output (an input of at least ``rows_min_keys`` tokens): per layer, the
  minimum and maximum key of each leaf (bfloat16) and group (float32) of each head,
  ``2 * B' * H * (k/b + G) * d`` numbers (``G`` the tree's groups, a power of two), the compaction order, each head's
  leaf order, and the accelerator step's tables (16 bytes per leaf and 12 per row; with groups 24 per head and slot
  and 12 per head and row; the CPU builds none, so there this is an upper bound); while it is built, the keys of
  4,096 positions at a time. Per layer too, each example's value projection with its bias (float32),
  ``B' * H * d * (d_model + 1)`` numbers.

Two checks use it: the chunked encoder's, before a long input is encoded (``b = 1``: the beams are not known yet),
and the converted model's, when ``generate`` copies the encoder output for its beams (``b`` known).

See ``docs/long-inputs.md``.
"""

from __future__ import annotations

from dataclasses import dataclass
from pathlib import Path
from typing import Any

import torch

from srformer.attention.quest import bounds_chunk, tree_group_elements
from srformer.core import REGISTRY, SRformerConfig


@dataclass(frozen=True)
class DecodeMemory:
    """An estimate of :func:`estimate_decode_memory`, in bytes.

    Attributes:
        encoder_output: the joined encoder output.
        states: the cross-attention states of every decoder layer.
        transient: one layer's projected keys and values while its state is built.
    """

    encoder_output: int
    states: int
    transient: int

    @property
    def total(self) -> int:
        """The sum of the parts (bytes)."""
        return self.encoder_output + self.states + self.transient


def estimate_decode_memory(
    config: SRformerConfig, model_config: Any, batch: int, input_length: int, dtype: torch.dtype, beams: int = 1
) -> DecodeMemory:
    """The memory generation needs beyond the weights for ``batch`` inputs of ``input_length`` tokens decoded with
    ``beams`` copies each (module docstring).

    Args:
        config: the SRformer settings (variant, ``lean_cache``, ``segment_size``).
        model_config: the Hugging Face config (``d_model``, decoder layers, heads, head_dim).
        batch: distinct inputs in the batch.
        input_length: ``k``, encoder tokens.
        dtype: dtype of the encoder output and projections.
        beams: copies of each input's encoder output that generation decodes (``max(num_beams,
            num_return_sequences)``, transformers' expansion); 1 for greedy decoding.

    Raises:
        ValueError: for ``batch``, ``input_length`` or ``beams`` below 1.
    """
    for name, value in (("batch", batch), ("input_length", input_length), ("beams", beams)):
        if value < 1:
            raise ValueError(f"`{name}` must be at least 1, got {value}.")
    distinct, batch = batch, batch * beams
    d_model = int(model_config.d_model)
    layers = int(getattr(model_config, "num_decoder_layers", None) or model_config.decoder_layers)
    heads = int(getattr(model_config, "num_heads", None) or model_config.decoder_attention_heads)
    head_dim = int(getattr(model_config, "d_kv", None) or d_model // heads)
    element = torch.empty((), dtype=dtype).element_size()
    keys_values = 2 * batch * heads * input_length * head_dim * element
    entry = REGISTRY[config.variant]
    if config.variant == "knn" and config.knn_index == "rows" and input_length >= config.resolved_index_min_keys():
        # the encoder output is the state: per layer an order-key term and a mask per position; a step's scores
        # (in the encoder output's dtype) and float64 order keys for every head
        mask_bytes = 8 if dtype == torch.float64 else 4
        return DecodeMemory(batch * input_length * d_model * element, layers * batch * input_length * (8 + mask_bytes),
                            batch * heads * input_length * (element + 8))
    if config.variant == "knn" and config.knn_index is not None and input_length >= config.resolved_index_min_keys():
        # one float32 index of the encoder output for all layers (plus a column for ivf), no per-layer keys; the
        # build copies one example's rows twice
        index = distinct * input_length * (d_model + 1) * 4
        return DecodeMemory(batch * input_length * d_model * element, index, 2 * input_length * (d_model + 1) * 4)
    if config.variant == "quest" and input_length >= config.resolved_rows_min_keys():
        # reading rows of the encoder output: per layer the leaves' and groups' float32 min/max keys and the
        # compaction order; the build projects a chunk of positions' keys at a time, then builds the tree a group of
        # heads at a time (about four float32 temporaries of the group's leaf centres): the accelerator's chunks and
        # groups, the larger ones (the CPU's are a head and 4,096 positions)
        leaf = config.resolved_leaf_size()
        leaves = -(-input_length // leaf)
        rows = leaves * leaf
        wide = max(element, 4)
        if config.group_size is None:
            groups = slots = 0
            bounded = leaves
            # the accelerator step's tables: each leaf's index and rank term, each row's bias and encoder row
            step_tables = batch * leaves * 16 + batch * rows * (wide + 8)
        else:  # the tree's slots: g·2^D for D levels
            groups = 1 << max(0, -(-leaves // config.group_size) - 1).bit_length()
            slots = bounded = groups * config.group_size  # the leaves' bounds are kept per slot
            # per head and slot its leaf, its rank term, its place in its segment (per leaf: at most one per slot)
            # and its rows' bias and encoder rows; group ranks and flags
            step_tables = batch * heads * (slots * (24 + leaf * (wide + 8)) + groups * 9)
        # bfloat16 leaf bounds, float32 group bounds, the compaction order and (groups) each head's leaf order;
        # the accelerator step's tables are counted on every device (the CPU builds none): an upper bound there
        # the schedule's table of segments per decoder position (T + 1) and the leaves' flags
        step_tables += batch * (config.target_length + 1) * 8 + batch * leaves
        bounds = (2 * batch * heads * (bounded * 2 + groups * wide) * head_dim + batch * rows * 8
                  + batch * heads * slots * 8 + step_tables
                  + batch * heads * head_dim * (d_model + 1) * wide)  # each example's W_v and b_v
        chunk = batch * bounds_chunk(input_length, leaf) * (heads * head_dim * (element + wide) + d_model * element)
        tree = 4 * 4 * tree_group_elements(batch, heads, leaves, head_dim)
        return DecodeMemory(batch * input_length * d_model * element, layers * bounds, max(chunk, tree))
    grows = entry.capabilities.state_grows_with_input and not (config.lean_cache and entry.capabilities.lean_layout)
    per_layer = keys_values if grows else 0
    if grows and entry.capabilities.recurrent_term and config.recurrence:
        segment_size = config.for_input_length(input_length).segment_size
        assert isinstance(segment_size, int)
        # one float32 readout per segment the schedule can visit: at most T + 1 of them
        readouts = min(-(-input_length // segment_size), config.target_length + 1)
        per_layer += batch * heads * readouts * head_dim * head_dim * 4
    return DecodeMemory(batch * input_length * d_model * element, layers * per_layer, keys_values)


def available_memory(device: torch.device) -> int | None:
    """Bytes that can still be allocated on ``device``: free CUDA memory plus what torch's caching allocator holds
    unused (reserved, not allocated: torch reuses it before asking the driver), or ``MemAvailable`` of
    ``/proc/meminfo`` on a Linux CPU; None where neither is known."""
    if device.type == "cuda":
        cached = torch.cuda.memory_reserved(device) - torch.cuda.memory_allocated(device)
        return int(torch.cuda.mem_get_info(device)[0]) + max(0, int(cached))
    if device.type != "cpu":
        return None
    try:
        for line in Path("/proc/meminfo").read_text().splitlines():
            if line.startswith("MemAvailable:"):
                return int(line.split()[1]) * 1024
    except OSError:
        return None
    return None


def check_decode_memory(
    config: SRformerConfig, model_config: Any, batch: int, input_length: int, dtype: torch.dtype,
    device: torch.device, beams: int = 1,
) -> None:
    """Refuse an input whose generation state cannot fit in the memory left on ``device``: before encoding (the
    chunked encoder, ``beams`` 1), and again before generation copies the encoder output for its ``beams``.

    Raises:
        MemoryError: when :func:`estimate_decode_memory` exceeds :func:`available_memory`; the message gives both
            in bytes and the fixes (``lean_cache=True`` or a mechanism with a fixed-size state, a shorter input).
    """
    available = available_memory(device)
    if available is None:
        return
    estimate = estimate_decode_memory(config, model_config, batch, input_length, dtype, beams)
    if estimate.total <= available:
        return
    copies = f" with {beams} beams (or returned sequences) each" if beams > 1 else ""
    fewer = ", fewer beams" if beams > 1 else ""
    raise MemoryError(
        f"Generating from {batch} input(s) of {input_length:,} tokens{copies} with variant {config.variant!r} "
        f"needs about {estimate.total:,} bytes ({estimate.encoder_output:,} encoder output, {estimate.states:,} "
        f"cross-attention states, {estimate.transient:,} while a state is built), but {available:,} bytes are "
        f"available on {device}. Use a mechanism whose state does not grow with the input (lean_cache=True with "
        f"srformer, segmented or linear), fewer inputs per batch{fewer}, or a shorter input."
    )
