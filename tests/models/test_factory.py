"""Loading a model by name: the local-path / hub-id rule of `load_pretrained` and its errors."""

from __future__ import annotations

import pytest

from srformer.models.factory import is_local_path, load_pretrained


@pytest.mark.parametrize("name,local", [
    ("t5-small", False), ("google/flan-t5-small", False), ("runs/model", False), ("runs/aclsum/base", True),
    ("./model", True), ("../model", True), ("~/model", True), ("/abs/model", True), ("runs\\model", True),
])
def test_what_can_only_be_a_local_path(name, local):
    assert is_local_path(name) is local


def test_an_existing_path_is_loaded_as_given(tmp_path):
    assert load_pretrained(lambda name, **kwargs: (name, kwargs), tmp_path, revision="x") == (str(tmp_path),
                                                                                              {"revision": "x"})


def test_a_missing_local_path_is_an_error_without_trying_the_hub(tmp_path):
    def hub(name):
        raise AssertionError(f"tried the hub for {name}")

    with pytest.raises(FileNotFoundError, match=r"No checkpoint at local path .*nope.*does not exist"):
        load_pretrained(hub, str(tmp_path / "nope"))
    with pytest.raises(FileNotFoundError, match="No checkpoint at local path './nope'"):
        load_pretrained(hub, "./nope")


def test_a_hub_failure_says_neither_a_local_checkpoint_nor_a_hub_model(tmp_path, monkeypatch):
    monkeypatch.chdir(tmp_path)
    calls = []

    def offline(name):
        calls.append(name)
        raise OSError("We couldn't connect to 'https://huggingface.co' to load the files.\nCheck your connection.")

    with pytest.raises(FileNotFoundError) as caught:
        load_pretrained(offline, "nope")
    message = str(caught.value)
    assert calls == ["nope"]
    assert "'nope' is neither a local checkpoint" in message and "hub" in message
    assert "couldn't connect" in message and "Check your connection" not in message
    assert isinstance(caught.value.__cause__, OSError)


def test_other_errors_of_the_loader_pass_through(tmp_path, monkeypatch):
    monkeypatch.chdir(tmp_path)

    def broken(name):
        raise ValueError("not a seq2seq model")

    with pytest.raises(ValueError, match="not a seq2seq model"):
        load_pretrained(broken, "some-model")


def test_bart_mini_is_the_bart_counterpart_of_t5_mini():
    from srformer.data.tokenizer import train_unigram_tokenizer
    from srformer.models.factory import build_named_model

    tokenizer = train_unigram_tokenizer(["a few words to learn pieces from, and some more words"] * 20, vocab_size=100)
    bart = build_named_model("bart-mini", tokenizer, max_positions=64).config
    t5 = build_named_model("t5-mini", tokenizer).config
    assert (bart.d_model, bart.encoder_layers, bart.decoder_layers, bart.encoder_ffn_dim) == (
        t5.d_model, t5.num_layers, t5.num_decoder_layers, t5.d_ff) == (256, 4, 4, 1024)


def test_led_mini_is_bart_mini_with_leds_long_encoder_and_converts_as_built():
    """led-mini: bart-mini's sizes, LED's windowed encoder with positions for the whole input (``max_positions``),
    read whole (no chunked encoding up to its positions); converted with 0 steps, it generates."""
    import torch

    from srformer import SRformerConfig, convert
    from srformer.data.tokenizer import train_unigram_tokenizer
    from srformer.models.chunked_encoding import default_window
    from srformer.models.factory import build_named_model

    tokenizer = train_unigram_tokenizer(["a few words to learn pieces from, and some more words"] * 20, vocab_size=100)
    led = build_named_model("led-mini", tokenizer, max_positions=512)
    bart = build_named_model("bart-mini", tokenizer, max_positions=64).config
    config = led.config
    assert type(led).__name__ == "LEDForConditionalGeneration"
    assert (config.d_model, config.encoder_layers, config.decoder_layers, config.encoder_ffn_dim) == (
        bart.d_model, bart.encoder_layers, bart.decoder_layers, bart.encoder_ffn_dim)
    assert config.max_encoder_position_embeddings == 512 and default_window(config) == 512
    assert config.attention_window == [256] * 4
    assert (config.pad_token_id, config.eos_token_id, config.decoder_start_token_id) == (
        tokenizer.pad_token_id, tokenizer.eos_token_id, tokenizer.eos_token_id)
    convert(led, SRformerConfig("srformer", segment_size=64, target_length=8))
    ids = torch.randint(3, len(tokenizer), (2, 300))
    out = led.eval().generate(input_ids=ids, attention_mask=torch.ones_like(ids), max_new_tokens=4, do_sample=False)
    assert out.shape[0] == 2 and out.shape[1] >= 2
    assert led.get_encoder().srformer_windows.window == 512  # 300 tokens fit: LED's own encoder reads them whole
