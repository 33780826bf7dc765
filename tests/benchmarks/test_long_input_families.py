"""``srformer long-bench`` on LED and LongT5 shapes: a shape names its family, the family's own encoder reads the
input whole (no chunked encoding unless a window is given), LED's positions bound the lengths, operator counts are
recorded; and the T5 shapes' settings are stored as before."""

from __future__ import annotations

import io
import json
import subprocess
import sys
from dataclasses import asdict

import pytest
import torch
from transformers import LEDForConditionalGeneration, LongT5ForConditionalGeneration, T5ForConditionalGeneration

from srformer.benchmarks import long_input_probe
from srformer.benchmarks.long_input import LongInputSettings, run_long_input, write_long_input
from srformer.benchmarks.suite_settings import MODEL_SHAPES, SuiteSettings
from srformer.benchmarks.variants import shape_config, shape_model, t5_config
from srformer.cli.main import main
from srformer.models import chunked_encoding

FAMILY_TINY = dict(variants=("full", "knn-loki", "segmented"), end_to_end=(), new_tokens=3, segment_size=16,
                   target_length=16)


def test_a_shape_builds_its_familys_class_with_the_published_sizes():
    assert isinstance(shape_model("t5-tiny"), T5ForConditionalGeneration)
    assert isinstance(shape_model("led-tiny"), LEDForConditionalGeneration)
    assert isinstance(shape_model("longt5-tiny"), LongT5ForConditionalGeneration)
    led = shape_config("led-base")  # allenai/led-base-16384's config.json
    assert (led.d_model, led.encoder_layers, led.decoder_layers, led.decoder_attention_heads, led.decoder_ffn_dim,
            led.vocab_size, led.attention_window, led.max_encoder_position_embeddings) == (
        768, 6, 6, 12, 3072, 50265, [1024] * 6, 16384)
    assert (led.pad_token_id, led.eos_token_id, led.decoder_start_token_id) == (1, 2, 2)
    longt5 = shape_config("longt5-base")  # google/long-t5-tglobal-base's config.json
    assert (longt5.d_model, longt5.d_kv, longt5.num_heads, longt5.d_ff, longt5.num_layers, longt5.num_decoder_layers,
            longt5.encoder_attention_type, longt5.local_radius, longt5.global_block_size, longt5.vocab_size,
            longt5.feed_forward_proj) == (768, 64, 12, 2048, 12, 12, "transient-global", 127, 16, 32128, "gated-gelu")
    with torch.device("meta"):  # led-base's 162M parameters, without allocating them
        assert sum(p.numel() for p in shape_model("led-base").parameters()) == 161_844_480


def test_t5_builders_and_the_bench_suite_refuse_other_families():
    with pytest.raises(ValueError, match="led shape, not a T5 one"):
        t5_config("led-base")
    with pytest.raises(ValueError, match="builds T5 models.*longt5 shape"):
        SuiteSettings(model_shape="longt5-base")
    assert all("family" in shape for shape in MODEL_SHAPES.values())


def test_t5_shapes_keep_their_windows_and_stored_settings():
    """The settings a T5 run stores are the fields and values it stored before the families came (512-token
    windows by default, 256 with --quick; no ``operators`` key unless asked for)."""
    stored = LongInputSettings().stored()
    assert list(stored) == ["lengths", "variants", "end_to_end", "shape", "new_tokens", "segment_size",
                            "target_length", "encoder_window", "window_overlap", "window_batch_size",
                            "memory_budget", "seed", "device", "dtype", "batch_size", "compiled", "max_batch"]
    assert stored["encoder_window"] == 512 and stored["shape"] == "t5-small"
    assert LongInputSettings.quick().encoder_window == 256
    assert LongInputSettings.quick(encoder_window=300).encoder_window == 300
    assert LongInputSettings(operators=True).stored()["operators"] is True
    assert LongInputSettings(shape="longt5-base").encoder_window is None  # its own encoder, whole
    assert LongInputSettings.quick(shape="longt5-tiny").encoder_window is None


def test_a_length_beyond_leds_positions_is_refused_without_a_window(tmp_path, capsys):
    with pytest.raises(ValueError, match=r"positions for 1,024 tokens.*\[2000\].*--encoder-window"):
        LongInputSettings(**FAMILY_TINY, shape="led-tiny", lengths=(600, 2000))
    assert main(["long-bench", "--output", str(tmp_path), "--shape", "led-base", "--lengths", "16384", "32768",
                 "--variants", "full"]) == 2
    assert "positions for 16,384 tokens" in capsys.readouterr().err and not (tmp_path / "long_input.json").exists()
    assert LongInputSettings(**FAMILY_TINY, shape="led-tiny", lengths=(2000,), encoder_window=512).encoder_window == 512
    with pytest.raises(ValueError, match="encoder_window <= 1,024"):
        LongInputSettings(**FAMILY_TINY, shape="led-tiny", lengths=(600,), encoder_window=2048)
    assert LongInputSettings(**FAMILY_TINY, shape="longt5-tiny", lengths=(100_000,)).lengths == (100_000,)
    with pytest.raises(ValueError, match="encoder_window"):
        LongInputSettings(**FAMILY_TINY, shape="longt5-tiny", lengths=(600,), encoder_window=0)


def _probe(monkeypatch, capsys, settings: LongInputSettings, length: int) -> tuple[list[dict], list[int]]:
    """Run the child in this process on ``settings``' job for ``length``; its records and the windows it encoded
    in (one entry per chunked encoding)."""
    windows: list[int] = []
    real = chunked_encoding.encode_in_windows
    monkeypatch.setattr(chunked_encoding, "encode_in_windows",
                        lambda *a, **k: windows.append(a[1].window) or real(*a, **k))
    job = settings.job(length, ["full"], [], 2**40)
    monkeypatch.setattr(sys, "stdin", io.StringIO(json.dumps(job)))
    capsys.readouterr()
    assert long_input_probe.main() == 0
    return [json.loads(line) for line in capsys.readouterr().out.splitlines()], windows


@pytest.mark.parametrize("shape,length", [("led-tiny", 600), ("longt5-tiny", 1500)])
def test_the_familys_own_encoder_reads_the_input_whole(monkeypatch, capsys, shape, length):
    settings = LongInputSettings(**FAMILY_TINY, shape=shape, lengths=(length,))
    records, windows = _probe(monkeypatch, capsys, settings, length)
    assert windows == []  # no chunked encoding: the whole input in one encoder call
    encode = next(r for r in records if r["kind"] == "encode")
    assert encode["output_bytes"] == length * 64 * 4  # (1, length, d_model 64) float32
    # a window, when asked for, is used; and T5's default windows are still there
    _, windows = _probe(monkeypatch, capsys, LongInputSettings(**{**asdict(settings), "encoder_window": 256}), length)
    assert windows == [256]
    t5 = LongInputSettings(**FAMILY_TINY, shape="t5-tiny", lengths=(length,), encoder_window=None)
    assert t5.encoder_window == 512
    assert _probe(monkeypatch, capsys, t5, length)[1] == [512]


@pytest.mark.parametrize("shape,layers", [("led-tiny", 2), ("longt5-tiny", 2)])
def test_a_family_run_records_decoding_and_operator_counts_and_resumes(tmp_path, monkeypatch, shape, layers):
    settings = LongInputSettings(**FAMILY_TINY, shape=shape, lengths=(300, 600), operators=True)
    records = run_long_input(settings, tmp_path, log=lambda line: None)
    decode = {(r["variant"], r["length"]): r for r in records if r["kind"] == "decode"}
    assert len(decode) == 6 and all(not r["refused"] and r["tokens"] == 3 for r in decode.values())
    for k in (300, 600):  # full caches keys and values of every layer: 2 * k * (4 heads * 16) * 4 bytes * layers
        assert decode[("full", k)]["state_bytes"] == 2 * k * 64 * 4 * layers
    counts = {(r["variant"], r["length"]): r for r in records if r["kind"] == "operators"}
    assert set(counts) == set(decode)
    for count in counts.values():
        assert count["calls_per_token"] > 0 and count["first_step_calls"] > count["calls_per_token"] / 2
        assert count["device_calls_per_token"] > 0 and count["tokens_counted"] == [1, 4]
    # full's calls per token do not grow with the input (one attention per layer, whatever k)
    assert counts[("full", 300)]["calls_per_token"] == counts[("full", 600)]["calls_per_token"]
    stored = json.loads((tmp_path / "long_input.json").read_text())["settings"]
    assert stored["shape"] == shape and stored["encoder_window"] is None and stored["operators"] is True

    def no_child(*args, **kwargs):
        raise AssertionError("a finished measurement was run again")

    monkeypatch.setattr(subprocess, "Popen", no_child)
    assert run_long_input(settings, tmp_path, log=lambda line: None) == records
    text = write_long_input(tmp_path)["markdown"].read_text()
    family_class = "LEDForConditionalGeneration" if shape == "led-tiny" else "LongT5ForConditionalGeneration"
    assert f"random {shape} ({family_class}) weights" in text and "## Encoding (native" in text
    assert "reading each input whole" in text and "## Operator calls per generated token" in text
    with pytest.raises(ValueError, match="encoder_window: None there, 256 now"):
        run_long_input(LongInputSettings(**{**asdict(settings), "encoder_window": 256}), tmp_path,
                       log=lambda line: None)
