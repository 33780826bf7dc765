"""Tiny randomly initialised T5 and BART models and padded batches for the integration tests.

The models are float64 unless a test asks for another dtype: most model tests check exactness
(parallel == incremental, reductions to full attention, cache on == off), which float64 makes a
property of the code rather than of one CPU's float32 summation order (see ``tests/tolerance.py``).
"""

from __future__ import annotations

import copy

import pytest
import torch
from transformers import (
    BartConfig,
    BartForConditionalGeneration,
    GenerationConfig,
    T5Config,
    T5ForConditionalGeneration,
)

import srformer

VOCAB = 96


def tiny_t5(attn_implementation: str = "sdpa", dtype: torch.dtype = torch.float64) -> T5ForConditionalGeneration:
    torch.manual_seed(0)
    config = T5Config(
        vocab_size=VOCAB, d_model=32, d_ff=64, num_layers=2, num_decoder_layers=2, num_heads=4, d_kv=8,
        decoder_start_token_id=0, pad_token_id=0, eos_token_id=1, dropout_rate=0.0,
    )
    config._attn_implementation = attn_implementation
    return T5ForConditionalGeneration(config).to(dtype).eval()


def tiny_bart(attn_implementation: str = "sdpa", dtype: torch.dtype = torch.float64) -> BartForConditionalGeneration:
    torch.manual_seed(0)
    config = BartConfig(
        vocab_size=VOCAB, d_model=32, encoder_layers=2, decoder_layers=2, encoder_attention_heads=4,
        decoder_attention_heads=4, encoder_ffn_dim=64, decoder_ffn_dim=64, max_position_embeddings=128,
        dropout=0.0, attention_dropout=0.0, activation_dropout=0.0, pad_token_id=1, bos_token_id=0,
        eos_token_id=2, decoder_start_token_id=2, forced_eos_token_id=None, forced_bos_token_id=None,
    )
    config._attn_implementation = attn_implementation
    return BartForConditionalGeneration(config).to(dtype).eval()


BUILDERS = {"t5": tiny_t5, "bart": tiny_bart}


def plain_generation_config(model, **kwargs) -> GenerationConfig:
    """Generation settings with no logits processor, so beam scores are plain log-probabilities."""
    return GenerationConfig(
        decoder_start_token_id=model.config.decoder_start_token_id,
        pad_token_id=model.config.pad_token_id,
        eos_token_id=model.config.eos_token_id,
        **kwargs,
    )


def check_beam_search_with_a_cache_equals_without(model, ids, mask) -> None:
    """Beam search (3 beams, 3 sequences, 10 new tokens) gives the same sequences with the cache as without."""
    config = dict(max_new_tokens=10, num_beams=3, num_return_sequences=3)
    with torch.no_grad():
        cached = model.generate(input_ids=ids, attention_mask=mask,
                                generation_config=plain_generation_config(model, use_cache=True, **config))
        uncached = model.generate(input_ids=ids, attention_mask=mask,
                                  generation_config=plain_generation_config(model, use_cache=False, **config))
    assert torch.equal(cached, uncached)


def padded_batch(model, lengths=(24, 17, 9), seed: int = 1):
    """Right-padded encoder inputs with the given real lengths (tokens)."""
    generator = torch.Generator().manual_seed(seed)
    width = max(lengths)
    ids = torch.randint(3, VOCAB, (len(lengths), width), generator=generator)
    mask = torch.zeros_like(ids)
    for row, n in enumerate(lengths):
        mask[row, :n] = 1
        ids[row, n:] = model.config.pad_token_id
    return ids, mask


def decoder_inputs(model, batch: int, length: int, seed: int = 2) -> torch.Tensor:
    generator = torch.Generator().manual_seed(seed)
    ids = torch.randint(3, VOCAB, (batch, length), generator=generator)
    ids[:, 0] = model.config.decoder_start_token_id
    return ids


def converted(model, **settings):
    """A converted deep copy. Unless asked otherwise, the RAF linear layer gets PyTorch's full-size
    default init (scale 1.0) and a low threshold, so that RAF fires often, the recurrent term is large
    in both tiny models (BART's 0.02-std weights give small K^T V products), and any error in it shows."""
    settings.setdefault("raf_linear_init_scale", 1.0)
    settings.setdefault("raf_threshold_init", 1e-3)
    model = copy.deepcopy(model)
    return srformer.convert(model, srformer.SRformerConfig(**settings))


@pytest.fixture(params=["t5", "bart"])
def family(request):
    return request.param


# ------------------------------------------------------------------------ the long-document families
def _tiny(config_class, model_class, attn_implementation: str, dtype: torch.dtype, **settings):
    """A tiny model of ``model_class``; ``sdpa`` becomes ``eager`` for a family that has no sdpa path."""
    torch.manual_seed(0)
    config = config_class(vocab_size=VOCAB, **settings)
    config._attn_implementation = attn_implementation if model_class._supports_sdpa else "eager"
    return model_class(config).to(dtype).eval()


_BART_LIKE = dict(
    d_model=32, encoder_layers=2, decoder_layers=2, encoder_attention_heads=4, decoder_attention_heads=4,
    encoder_ffn_dim=64, decoder_ffn_dim=64, dropout=0.0, attention_dropout=0.0, activation_dropout=0.0,
)
_T5_LIKE = dict(
    d_model=32, d_ff=64, num_layers=2, num_decoder_layers=2, num_heads=4, d_kv=8, decoder_start_token_id=0,
    pad_token_id=0, eos_token_id=1, dropout_rate=0.0,
)


def tiny_led(attn_implementation: str = "sdpa", dtype: torch.dtype = torch.float64):
    """LED with an encoder window of 8 tokens."""
    from transformers import LEDConfig, LEDForConditionalGeneration

    return _tiny(LEDConfig, LEDForConditionalGeneration, attn_implementation, dtype, **_BART_LIKE, attention_window=8,
                 max_encoder_position_embeddings=256, max_decoder_position_embeddings=64, pad_token_id=1,
                 bos_token_id=0, eos_token_id=2, decoder_start_token_id=2)


def tiny_longt5(encoder_attention_type: str):
    def build(attn_implementation: str = "sdpa", dtype: torch.dtype = torch.float64):
        from transformers import LongT5Config, LongT5ForConditionalGeneration

        return _tiny(LongT5Config, LongT5ForConditionalGeneration, attn_implementation, dtype, **_T5_LIKE,
                     local_radius=4, global_block_size=4, encoder_attention_type=encoder_attention_type)

    return build


def tiny_pegasus_x(attn_implementation: str = "sdpa", dtype: torch.dtype = torch.float64):
    """PEGASUS-X with blocks of 8 tokens and 4 global tokens."""
    from transformers import PegasusXConfig, PegasusXForConditionalGeneration

    return _tiny(PegasusXConfig, PegasusXForConditionalGeneration, attn_implementation, dtype, **_BART_LIKE,
                 max_position_embeddings=256, block_size=8, num_global_tokens=4, stagger_local_blocks=True,
                 pad_token_id=0, eos_token_id=1, decoder_start_token_id=0)


def tiny_bigbird_pegasus(attention_type: str):
    def build(attn_implementation: str = "sdpa", dtype: torch.dtype = torch.float64):
        from transformers import BigBirdPegasusConfig, BigBirdPegasusForConditionalGeneration

        return _tiny(BigBirdPegasusConfig, BigBirdPegasusForConditionalGeneration, attn_implementation, dtype,
                     **_BART_LIKE, max_position_embeddings=256, attention_type=attention_type, block_size=4,
                     num_random_blocks=2, pad_token_id=0, bos_token_id=2, eos_token_id=1, decoder_start_token_id=0)

    return build


#: The long-document families, each encoder attention type of its own: inputs of 48 tokens and fewer run
#: BigBirdPegasus's block-sparse attention (it falls back to full attention at or below (5 + 2 r) b = 36 tokens).
LONG_BUILDERS = {
    "led": tiny_led,
    "longt5-local": tiny_longt5("local"),
    "longt5-transient-global": tiny_longt5("transient-global"),
    "pegasus_x": tiny_pegasus_x,
    "bigbird_pegasus-block_sparse": tiny_bigbird_pegasus("block_sparse"),
    "bigbird_pegasus-original_full": tiny_bigbird_pegasus("original_full"),
}
#: Right-padded lengths of the long families' batches (tokens).
LONG_LENGTHS = (48, 41, 21)
