"""``srformer led-from-bart``: a BART checkpoint written as an LED that loads with transformers' Auto classes,
reads inputs past BART's positions, and the tokenizer beside it; no overwrite."""

from __future__ import annotations

import pytest
import torch
from transformers import AutoModelForSeq2SeqLM, AutoTokenizer, BartConfig, BartForConditionalGeneration

from srformer.cli.main import main
from srformer.data.pairs import load_aclsum
from srformer.data.tokenizer import train_unigram_tokenizer


@pytest.fixture(scope="module")
def bart_checkpoint(tmp_path_factory):
    tokenizer = train_unigram_tokenizer([pair.document for pair in load_aclsum("val")[:4]], vocab_size=300)
    eos = tokenizer.eos_token_id
    torch.manual_seed(0)
    bart = BartForConditionalGeneration(BartConfig(
        vocab_size=len(tokenizer), d_model=32, encoder_layers=1, decoder_layers=1, encoder_attention_heads=4,
        decoder_attention_heads=4, encoder_ffn_dim=64, decoder_ffn_dim=64, max_position_embeddings=32,
        pad_token_id=tokenizer.pad_token_id, eos_token_id=eos, bos_token_id=eos, decoder_start_token_id=eos,
    ))
    folder = tmp_path_factory.mktemp("bart") / "bart"
    bart.save_pretrained(folder)
    tokenizer.save_pretrained(folder)
    return folder


def test_writes_an_led_that_reads_past_barts_positions(bart_checkpoint, tmp_path, capsys):
    output = tmp_path / "led"
    args = ["led-from-bart", "--checkpoint", str(bart_checkpoint), "--output", str(output), "--max-positions", "256",
            "--attention-window", "16", "--position-period", "24"]
    assert main(args) == 0
    assert "BART's first 24 repeated" in capsys.readouterr().out
    led = AutoModelForSeq2SeqLM.from_pretrained(output).eval()
    tokenizer = AutoTokenizer.from_pretrained(output)
    assert type(led).__name__ == "LEDForConditionalGeneration"
    assert led.config.max_encoder_position_embeddings == 256 and len(tokenizer) == led.config.vocab_size
    inputs = tokenizer(" ".join(["word"] * 150), return_tensors="pt")  # past BART's 32 positions
    assert inputs.input_ids.shape[1] > 32
    with torch.no_grad():
        out = led.generate(**inputs, max_new_tokens=3, do_sample=False)
    assert out.shape[0] == 1
    assert main(args) == 2  # never overwrites
    assert "already holds a model" in capsys.readouterr().err
