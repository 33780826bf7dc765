"""``srformer long-bench`` on a tiny shape: the records, their resumption, refusal by the memory estimate, and the
report; and the memory estimate itself."""

from __future__ import annotations

import importlib.util
import json
import subprocess

import pytest
import torch

import srformer.models.memory_estimate as memory_estimate
from srformer.benchmarks.long_input import LongInputSettings, run_long_input, write_long_input
from srformer.benchmarks.long_input_probe import MAX_BATCH_CAP, _largest_batch
from srformer.benchmarks.variants import t5_config
from srformer.cli.main import main
from srformer.config import SRformerConfig
from srformer.models.memory_estimate import check_decode_memory, estimate_decode_memory
from tests.models.conftest import BUILDERS, converted

TINY = dict(lengths=(600,), variants=("full", "srformer-lean", "linear"), end_to_end=("srformer-lean",),
            shape="t5-tiny", new_tokens=3, segment_size=16, target_length=16, encoder_window=256)


def test_a_run_records_every_measurement_and_resumes_without_measuring_again(tmp_path, monkeypatch):
    records = run_long_input(LongInputSettings(**TINY), tmp_path, log=lambda line: None)
    kinds = sorted((r["kind"], r.get("variant")) for r in records)
    assert kinds == [("decode", "full"), ("decode", "linear"), ("decode", "srformer-lean"), ("encode", None),
                     ("end_to_end", "srformer-lean")]
    decode = {r["variant"]: r for r in records if r["kind"] == "decode"}
    assert all(r["tokens"] == 3 and r["seconds_per_token"] > 0 and not r["refused"] for r in decode.values())
    # full caches keys and values of every layer: 2 * 600 positions * 4 heads * 32 * 4 bytes * 2 layers
    assert decode["full"]["state_bytes"] == 2 * 600 * 4 * 32 * 4 * 2
    assert decode["linear"]["state_bytes"] < decode["full"]["state_bytes"] / 10

    def no_child(*args, **kwargs):
        raise AssertionError("a finished measurement was run again")

    monkeypatch.setattr(subprocess, "Popen", no_child)
    assert run_long_input(LongInputSettings(**TINY), tmp_path, log=lambda line: None) == records
    written = write_long_input(tmp_path)
    text = written["markdown"].read_text()
    assert "| srformer-lean |" in text and "End to end" in text and written["plot"].stat().st_size > 0


def test_without_matplotlib_the_table_is_written_and_the_plot_left_out_with_a_warning(tmp_path, monkeypatch):
    """A machine with torch and transformers only (a GPU box) still gets the JSON and the table."""
    settings = LongInputSettings(**{**TINY, "variants": ("full",), "end_to_end": (), "memory_budget": 1})
    run_long_input(settings, tmp_path, log=lambda line: None)
    found = importlib.util.find_spec
    monkeypatch.setattr(importlib.util, "find_spec", lambda name, *a: None if name == "matplotlib" else found(name, *a))
    with pytest.warns(UserWarning, match="long_input.png not written: matplotlib is not installed"):
        written = write_long_input(tmp_path)
    assert set(written) == {"json", "markdown"} and not (tmp_path / "long_input.png").exists()


def test_a_variant_that_cannot_fit_is_refused_with_its_estimate(tmp_path):
    settings = LongInputSettings(**{**TINY, "variants": ("full",), "end_to_end": (), "memory_budget": 1})
    records = run_long_input(settings, tmp_path, log=lambda line: None)
    refused = [r for r in records if r["kind"] == "decode"]
    assert refused[0]["refused"] and refused[0]["estimated_bytes"] > 0
    assert "refused (est." in write_long_input(tmp_path)["markdown"].read_text()


def test_a_batch_in_another_dtype_with_the_largest_batch_is_recorded_and_another_setting_refused(tmp_path):
    settings = LongInputSettings(**{**TINY, "variants": ("full", "srformer"), "end_to_end": (), "batch_size": 3,
                                    "dtype": "bfloat16", "max_batch": True})
    records = run_long_input(settings, tmp_path, log=lambda line: None)
    decode = {r["variant"]: r for r in records if r["kind"] == "decode"}
    # full caches keys and values of every layer, for 3 inputs, in bf16: 2 * 3 * 600 * 4 * 32 * 2 bytes * 2 layers
    assert decode["full"]["state_bytes"] == 2 * 3 * 600 * 4 * 32 * 2 * 2
    largest = {r["variant"]: r for r in records if r["kind"] == "max_batch"}
    assert set(largest) == {"full", "srformer"}
    budget = json.loads((tmp_path / "long_input.json").read_text())["memory_budget"]
    for variant, record in largest.items():  # the largest batch whose estimate fits, and not one more
        config = SRformerConfig(variant=variant, segment_size=16, target_length=16, encoder_window=256,
                                window_overlap=0.5, window_batch_size=8)
        estimate = [estimate_decode_memory(config, t5_config("t5-tiny"), n, 600, torch.bfloat16).total
                    for n in (record["max_batch"], record["max_batch"] + 1)]
        assert record["how"].startswith("estimated") and record["max_batch"] >= 3
        assert estimate[0] <= budget and (estimate[1] > budget or record["max_batch"] == MAX_BATCH_CAP)
    text = write_long_input(tmp_path)["markdown"].read_text()
    assert "CPU, bfloat16, batch 3, eager" in text and "Largest batch that fits" in text
    with pytest.raises(ValueError, match="batch_size: 3 there, 1 now"):
        run_long_input(LongInputSettings(**{**TINY, "variants": ("full",), "end_to_end": (), "dtype": "bfloat16"}),
                       tmp_path, log=lambda line: None)


def test_the_largest_batch_search_finds_the_boundary():
    for limit in (0, 1, 2, 5, 8, 100, 4096):
        tried: list[int] = []

        def fits(n: int, limit: int = limit, tried: list[int] = tried) -> bool:
            tried.append(n)
            return n <= limit

        assert _largest_batch(fits, 1, 4096) == limit
        assert len(tried) <= 2 * 13 + 1  # doubling, then bisection
    assert _largest_batch(lambda n: n <= 7, 4, 4096) == 7
    assert _largest_batch(lambda n: n <= 2, 4, 4096) == 2  # the starting batch does not fit


@pytest.mark.parametrize("bad,message", [(dict(variants=("nope",)), "nope"), (dict(lengths=(0,)), "lengths"),
                                         (dict(new_tokens=1), "new_tokens"), (dict(window_overlap=1.0), "overlap"),
                                         (dict(dtype="int8"), "dtype"), (dict(batch_size=0), "batch_size"),
                                         (dict(device="tpu"), "device")])
def test_bad_settings_are_refused(bad, message):
    with pytest.raises(ValueError, match=message):
        LongInputSettings(**{**TINY, **bad})


def test_the_command_writes_its_outputs(tmp_path, capsys):
    assert main(["long-bench", "--output", str(tmp_path), "--quick", "--lengths", "300", "--variants", "linear",
                 "--end-to-end"]) == 0
    assert json.loads((tmp_path / "long_input.json").read_text())["records"]
    assert (tmp_path / "long_input.png").is_file()


# ------------------------------------------------------------------ the estimate
def test_the_estimate_counts_keys_and_values_of_states_that_hold_them():
    model_config = BUILDERS["t5"]().config  # 2 decoder layers, 4 heads of 8, d_model 32
    k, element = 1000, 4
    full = estimate_decode_memory(SRformerConfig("full"), model_config, 2, k, torch.float32)
    keys_values = 2 * 2 * 4 * k * 8 * element
    assert full.states == 2 * keys_values and full.transient == keys_values
    assert full.encoder_output == 2 * k * 32 * element
    srformer = estimate_decode_memory(SRformerConfig("srformer", segment_size=10), model_config, 2, k, torch.float32)
    assert srformer.states == 2 * (keys_values + 2 * 4 * 100 * 8 * 8 * 4)  # plus m = 100 float32 d x d readouts
    short = SRformerConfig("srformer", segment_size=10, target_length=20)  # positions 0..20 visit at most 21 segments
    assert estimate_decode_memory(short, model_config, 2, k, torch.float32).states == 2 * (
        keys_values + 2 * 4 * 21 * 8 * 8 * 4)
    lean = SRformerConfig("srformer", segment_size=10, lean_cache=True)
    assert estimate_decode_memory(lean, model_config, 2, k, torch.float32).states == 0
    assert estimate_decode_memory(SRformerConfig("linear"), model_config, 2, k, torch.float32).states == 0


def test_an_input_too_large_for_memory_is_refused_before_encoding(monkeypatch):
    monkeypatch.setattr(memory_estimate, "available_memory", lambda device: 10_000)
    with pytest.raises(MemoryError, match="needs about .* bytes .* 10,000 bytes are available"):
        check_decode_memory(SRformerConfig("full"), BUILDERS["t5"]().config, 1, 4096, torch.float32,
                            torch.device("cpu"))
    model = converted(BUILDERS["bart"](dtype=torch.float32), variant="full", encoder_window=32)
    encoder = model.get_encoder()
    calls = []
    plain_class = type(encoder).__mro__[2]  # the class after srformer's subclass and ChunkedEncoderMixin
    assert plain_class.__name__ == "BartEncoder"
    monkeypatch.setattr(plain_class, "forward", lambda *a, **k: calls.append(1))
    with torch.no_grad(), pytest.raises(MemoryError, match="'full'"):
        model.get_encoder()(input_ids=torch.ones(1, 100, dtype=torch.long))
    assert not calls  # refused before any window was encoded


def test_beams_multiply_the_estimate_except_a_shared_index():
    model_config = BUILDERS["t5"]().config
    one = estimate_decode_memory(SRformerConfig("full"), model_config, 2, 1000, torch.float32)
    four = estimate_decode_memory(SRformerConfig("full"), model_config, 2, 1000, torch.float32, beams=4)
    assert (four.encoder_output, four.states, four.transient) == (
        4 * one.encoder_output, 4 * one.states, 4 * one.transient)
    indexed = SRformerConfig("knn", knn_index="flat", index_min_keys=1)
    one = estimate_decode_memory(indexed, model_config, 2, 1000, torch.float32)
    four = estimate_decode_memory(indexed, model_config, 2, 1000, torch.float32, beams=4)
    assert four.states == one.states and four.encoder_output == 4 * one.encoder_output  # the beams share the index
    for bad in ({"beams": 0}, {"batch": 0}, {"input_length": 0}):
        arguments = {"batch": 2, "input_length": 1000, "beams": 1, **bad}
        with pytest.raises(ValueError, match=f"`{next(iter(bad))}` must be at least 1"):
            estimate_decode_memory(SRformerConfig("full"), model_config, dtype=torch.float32, **arguments)


def test_cuda_memory_the_caching_allocator_holds_unused_counts_as_available(monkeypatch):
    monkeypatch.setattr(torch.cuda, "mem_get_info", lambda device=None: (1_000, 10_000))
    monkeypatch.setattr(torch.cuda, "memory_reserved", lambda device=None: 5_000)
    monkeypatch.setattr(torch.cuda, "memory_allocated", lambda device=None: 3_000)
    assert memory_estimate.available_memory(torch.device("cuda")) == 3_000


@pytest.mark.parametrize("variant", ["segmented", "knn"])
def test_generation_refuses_beams_whose_copies_would_not_fit_before_copying(monkeypatch, variant):
    model = converted(BUILDERS["bart"](dtype=torch.float32), variant=variant, segment_size=8, encoder_window=32)
    model.eval()
    ids = torch.randint(3, 50, (1, 100), generator=torch.Generator().manual_seed(0))
    config = SRformerConfig.from_dict(model.config.srformer)
    alone = estimate_decode_memory(config, model.config, 1, 100, torch.float32).total
    beams = estimate_decode_memory(config, model.config, 1, 100, torch.float32, beams=4).total
    assert beams > alone
    monkeypatch.setattr(memory_estimate, "available_memory", lambda device: (alone + beams) // 2)
    generation = {"max_new_tokens": 3, "do_sample": False,
                  "decoder_start_token_id": model.config.decoder_start_token_id}
    assert model.generate(ids, num_beams=1, **generation).shape[0] == 1  # one copy fits
    expanded = []
    real = type(model).__mro__[2]._expand_inputs_for_generation  # transformers' own, after srformer's check
    monkeypatch.setattr(type(model).__mro__[2], "_expand_inputs_for_generation",
                        lambda *a, **k: expanded.append(k["expand_size"]) or real(*a, **k))
    with pytest.raises(MemoryError, match="with 4 beams .* fewer beams"):
        model.generate(ids, num_beams=4, **generation)
    with pytest.raises(MemoryError, match="with 4 beams"):
        model.generate(ids, do_sample=True, num_return_sequences=4, max_new_tokens=3)
    assert not expanded  # refused before the encoder output was copied
    monkeypatch.setattr(memory_estimate, "available_memory", lambda device: beams)
    assert model.generate(ids, num_beams=4, **generation).shape[0] == 1
    assert expanded == [4]
