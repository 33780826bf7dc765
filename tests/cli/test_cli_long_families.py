"""The long-document families on the command line: ``summarize`` and ``evaluate`` convert a plain LED or LongT5
checkpoint as they load it (``--variant``), with no training step; LED's encoder reads inputs up to its positions
whole and longer ones in windows of that length; LongT5's reads any input whole."""

from __future__ import annotations

import json

import pytest
import torch
from transformers import LEDConfig, LEDForConditionalGeneration, LongT5Config, LongT5ForConditionalGeneration

from srformer.cli.main import main
from srformer.data.pairs import load_aclsum
from srformer.data.tokenizer import train_unigram_tokenizer

#: LED's encoder positions in the tiny checkpoint (tokens).
LED_POSITIONS = 128


def _texts() -> list[str]:
    return [pair.document for pair in load_aclsum("val")[:4]]


def _save(model, tokenizer, folder) -> str:
    model.save_pretrained(folder)
    tokenizer.save_pretrained(folder)
    return str(folder)


@pytest.fixture(scope="module")
def checkpoints(tmp_path_factory):
    """Plain tiny LED and LongT5 (transient-global) checkpoints with a tokenizer trained on ACLSum papers."""
    tokenizer = train_unigram_tokenizer(_texts(), vocab_size=300)
    vocab, pad, eos = len(tokenizer), tokenizer.pad_token_id, tokenizer.eos_token_id
    torch.manual_seed(0)
    led = LEDForConditionalGeneration(LEDConfig(
        vocab_size=vocab, d_model=32, encoder_layers=1, decoder_layers=2, encoder_attention_heads=4,
        decoder_attention_heads=4, encoder_ffn_dim=64, decoder_ffn_dim=64, attention_window=16,
        max_encoder_position_embeddings=LED_POSITIONS, max_decoder_position_embeddings=64, pad_token_id=pad,
        eos_token_id=eos, bos_token_id=eos, decoder_start_token_id=eos,
    ))
    longt5 = LongT5ForConditionalGeneration(LongT5Config(
        vocab_size=vocab, d_model=32, d_ff=64, num_layers=2, num_decoder_layers=2, num_heads=4, d_kv=8,
        encoder_attention_type="transient-global", local_radius=8, global_block_size=8, pad_token_id=pad,
        eos_token_id=eos, decoder_start_token_id=pad,
    ))
    root = tmp_path_factory.mktemp("long-families")
    return {"led": _save(led, tokenizer, root / "led"), "longt5": _save(longt5, tokenizer, root / "longt5")}


@pytest.fixture
def encoder_windows(monkeypatch):
    """The number of chunked encodings run (calls of ``encode_in_windows``)."""
    from srformer.models import chunked_encoding

    calls: list[int] = []
    real = chunked_encoding.encode_in_windows
    monkeypatch.setattr(chunked_encoding, "encode_in_windows", lambda *a, **k: calls.append(1) or real(*a, **k))
    return calls


@pytest.fixture(scope="module")
def document(tmp_path_factory):
    path = tmp_path_factory.mktemp("doc") / "paper.txt"
    path.write_text(" ".join(_texts()))
    return str(path)


@pytest.mark.parametrize("family", ["led", "longt5"])
@pytest.mark.parametrize("variant", ["knn-loki", "srformer"])
def test_summarize_converts_a_plain_checkpoint_as_it_loads_it(checkpoints, document, family, variant, capsys):
    status = main(["summarize", "--checkpoint", checkpoints[family], document, "--variant", variant,
                   "--segment-size", "16", "--target-length", "8", "--max-source-length", "96",
                   "--max-new-tokens", "5", "--no-progress"])
    assert status == 0
    assert capsys.readouterr().out.count("\n") == 1


def test_evaluate_records_the_setting_it_converted_to(checkpoints, tmp_path, capsys):
    data = tmp_path / "data.jsonl"
    data.write_text("".join(json.dumps({"document": p.document, "summary": p.summary}) + "\n"
                            for p in load_aclsum("val")[:2]))
    output = tmp_path / "metrics.json"
    status = main(["evaluate", "--checkpoint", checkpoints["led"], "--data", str(data), "--output", str(output),
                   "--variant", "segmented", "--segment-size", "16", "--target-length", "8",
                   "--max-source-length", "96", "--max-new-tokens", "4", "--no-progress"])
    assert status == 0
    metrics = json.loads(output.read_text())
    assert metrics["variant"] == "segmented" and metrics["segment_size"] == 16


def test_led_reads_up_to_its_positions_whole_and_longer_inputs_in_windows(checkpoints, document, encoder_windows):
    common = ["summarize", "--checkpoint", checkpoints["led"], document, "--variant", "segmented",
              "--segment-size", "16", "--target-length", "8", "--max-new-tokens", "3", "--no-progress"]
    assert main([*common, "--max-source-length", str(LED_POSITIONS)]) == 0
    assert not encoder_windows
    assert main([*common, "--max-source-length", str(3 * LED_POSITIONS)]) == 0
    assert encoder_windows


def test_longt5_reads_any_input_whole_unless_a_window_is_set(checkpoints, document, encoder_windows):
    common = ["summarize", "--checkpoint", checkpoints["longt5"], document, "--variant", "segmented",
              "--segment-size", "16", "--target-length", "8", "--max-new-tokens", "3", "--max-source-length", "600",
              "--no-progress"]
    assert main(common) == 0
    assert not encoder_windows
    assert main([*common, "--encoder-window", "128"]) == 0
    assert encoder_windows


def test_variant_of_a_converted_checkpoint_and_a_setting_alone_are_refused(checkpoints, document, tmp_path, capsys):
    import srformer

    converted = srformer.from_pretrained(checkpoints["led"], srformer.named_config("segmented", segment_size=16,
                                                                                   target_length=8))
    folder = tmp_path / "converted"
    converted.save_pretrained(folder)
    from transformers import AutoTokenizer

    AutoTokenizer.from_pretrained(checkpoints["led"]).save_pretrained(folder)
    assert main(["summarize", "--checkpoint", str(folder), document, "--variant", "srformer", "--no-progress"]) == 2
    assert "holds an SRformer checkpoint of variant 'segmented'" in capsys.readouterr().err
    assert main(["summarize", "--checkpoint", checkpoints["led"], document, "--setting", "recurrence=false",
                 "--no-progress"]) == 2
    assert "--setting applies with --variant" in capsys.readouterr().err


@pytest.mark.slow
def test_train_fine_tunes_a_long_document_checkpoint_by_its_path(checkpoints, tmp_path):
    data = tmp_path / "train.jsonl"
    data.write_text("".join(json.dumps({"document": p.document, "summary": p.summary}) + "\n"
                            for p in load_aclsum("train")[:8]))
    output = tmp_path / "run"
    status = main(["train", "--model", checkpoints["longt5"], "--data", str(data), "--variant", "knn-loki",
                   "--segment-size", "16", "--target-length", "8", "--max-source-length", "256",
                   "--max-target-length", "16", "--batch-size", "4", "--max-steps", "2", "--output", str(output),
                   "--no-progress"])
    assert status == 0
    config = json.loads((output / "config.json").read_text())
    assert config["model_type"] == "srformer_longt5" and config["srformer"]["settings"]["knn_index"] == "loki"
