"""An LED made from a BART model the way LED itself was made (Beltagy et al., 2020, "Longformer", §6): every weight
copied, the encoder's self attention replaced by Longformer's local attention, the learned positions copied across
the longer table.

- Encoder self attention: BART's query, key and value projections become both the local projections (``query``,
  ``key``, ``value``) and the global ones (``query_global``, ``key_global``, ``value_global``); ``out_proj`` becomes
  ``output``. Every token attends to ``attention_window / 2`` tokens on each side.
- Encoder positions: LED's table of ``max_positions`` rows repeats BART's first ``position_period`` positions
  (row ``p`` of LED is BART's position ``p mod position_period``; BART's table is offset by 2 rows, LED's is not).
  LED copied BART's whole table (1,024 positions); a BART trained only on shorter inputs, such as one read in
  windows by chunked encoding, repeats the positions it was trained on.
- Decoder: unchanged (LED's decoder is BART's); its positions are BART's first ``max_decoder_positions``.

So an input no longer than ``attention_window / 2 + 1`` tokens and no longer than ``position_period`` gets exactly
BART's encoding (each token sees every other one at BART's positions), and the LED generates what BART generates:
tested in float64. Longer inputs need fine-tuning at their length, as LED's did.
"""

from __future__ import annotations

from typing import Any

import torch
from transformers import LEDConfig, LEDForConditionalGeneration, PreTrainedModel

from srformer.models.families import family_of_config
from srformer.models.install import srformer_config_of

__all__ = ["led_from_bart"]

#: BART's learned positions start at row 2 of their table (BartLearnedPositionalEmbedding's offset); LED's at row 0.
BART_POSITION_OFFSET = 2
#: BART encoder self-attention projection -> the LED projections that receive a copy of it.
ENCODER_ATTENTION_COPIES = {
    "q_proj": ("longformer_self_attn.query", "longformer_self_attn.query_global"),
    "k_proj": ("longformer_self_attn.key", "longformer_self_attn.key_global"),
    "v_proj": ("longformer_self_attn.value", "longformer_self_attn.value_global"),
    "out_proj": ("output",),
}
#: BartConfig fields that LEDConfig takes under the same name.
SHARED_CONFIG_FIELDS = (
    "vocab_size", "d_model", "encoder_layers", "decoder_layers", "encoder_attention_heads", "decoder_attention_heads",
    "encoder_ffn_dim", "decoder_ffn_dim", "activation_function", "dropout", "attention_dropout", "activation_dropout",
    "init_std", "pad_token_id", "bos_token_id", "eos_token_id", "decoder_start_token_id",
)


def led_from_bart(
    bart: PreTrainedModel,
    *,
    max_positions: int,
    attention_window: int,
    position_period: int | None = None,
) -> LEDForConditionalGeneration:
    """An LED whose weights are ``bart``'s (the module docstring gives the mapping).

    Args:
        bart: a ``BartForConditionalGeneration`` (or its SRformer ``full`` conversion, whose weights are BART's).
        max_positions: the LED encoder's positions, in tokens: the longest input it reads.
        attention_window: tokens in each local attention window (even; each token sees half on each side).
        position_period: how many of BART's encoder positions are repeated across the table (tokens); default all
            of them (BART's ``max_position_embeddings``, LED's choice).

    Returns:
        an ``LEDForConditionalGeneration`` in ``bart``'s dtype, in eval mode if ``bart`` is, with BART's generation
        settings; the decoder's positions are BART's (``max_decoder_position_embeddings`` =
        ``max_position_embeddings``).

    Raises:
        ValueError: ``bart`` is not a BART model (``model_type`` "bart") or is converted to a mechanism other than
            ``full``; it scales its embeddings (``scale_embedding``, which LED does not have); ``attention_window``
            is not a positive even number; ``max_positions`` is not positive; ``position_period`` is not in
            ``[1, max_position_embeddings]``.
    """
    config = bart.config
    family = family_of_config(config)  # a converted BART's model type is srformer's, its family BART's
    if family is None or family.name != "bart":
        raise ValueError(f"`bart` must be a BART model (model_type 'bart'), not "
                         f"{getattr(config, 'model_type', None)!r}.")
    stored = srformer_config_of(config)
    if stored is not None and stored.variant != "full":
        raise ValueError(f"`bart` is converted to {stored.variant!r}: pass the plain BART checkpoint or its `full` "
                         "conversion, whose weights are BART's.")
    if getattr(config, "scale_embedding", False):
        raise ValueError("`bart` scales its embeddings (scale_embedding=True), which LED does not: its encoding "
                         "would change.")
    if attention_window <= 0 or attention_window % 2:
        raise ValueError(f"`attention_window` must be a positive even number of tokens, not {attention_window}.")
    if max_positions <= 0:
        raise ValueError(f"`max_positions` must be a positive number of tokens, not {max_positions}.")
    bart_positions = config.max_position_embeddings
    period = bart_positions if position_period is None else position_period
    if not 1 <= period <= bart_positions:
        raise ValueError(f"`position_period` must be between 1 and BART's {bart_positions} positions, not {period}.")
    # generation settings (decoder start, forced eos) pass as extra keywords, which LEDConfig's signature does not list
    fields: dict[str, Any] = {name: getattr(config, name) for name in SHARED_CONFIG_FIELDS}
    fields["forced_eos_token_id"] = getattr(config, "forced_eos_token_id", None)
    led_config = LEDConfig(**fields, max_encoder_position_embeddings=max_positions,
                           max_decoder_position_embeddings=bart_positions, attention_window=attention_window)
    led = LEDForConditionalGeneration(led_config)
    # transformers declares PreTrainedModel.to with @wraps(nn.Module.to), so its annotation keeps an unbound `self`
    led = led.to(bart.dtype)  # type: ignore[arg-type]
    led.load_state_dict(led_state_dict(bart.state_dict(), max_positions=max_positions, period=period), strict=True)
    led.generation_config = bart.generation_config
    led.train(bart.training)
    return led


def led_state_dict(state: dict[str, torch.Tensor], *, max_positions: int, period: int) -> dict[str, torch.Tensor]:
    """BART's ``state`` under LED's names (:func:`led_from_bart`); ``max_positions`` and ``period`` in tokens."""
    result: dict[str, torch.Tensor] = {}
    for name, tensor in state.items():
        if name.startswith("model.encoder.embed_positions."):
            rows = tensor[BART_POSITION_OFFSET:BART_POSITION_OFFSET + period]
            index = torch.arange(max_positions) % period
            result["led.encoder.embed_positions.weight"] = rows[index].clone()
            continue
        if name.startswith("model.decoder.embed_positions."):
            result["led.decoder.embed_positions.weight"] = tensor[BART_POSITION_OFFSET:].clone()
            continue
        led_name = "led." + name.removeprefix("model.") if name.startswith("model.") else name
        prefix, _, rest = led_name.partition(".self_attn.")
        if ".encoder.layers." in prefix and rest:
            projection, _, parameter = rest.partition(".")
            for target in ENCODER_ATTENTION_COPIES[projection]:
                result[f"{prefix}.self_attn.{target}.{parameter}"] = tensor.clone()
            continue
        result[led_name] = tensor
    return result
