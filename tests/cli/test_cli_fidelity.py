"""``srformer fidelity`` end to end on a plain tiny BART built from a config and a tokenizer trained on the spot:
the reference agrees with itself, ``knn-loki`` with every key a candidate scores what the exact ``knn`` scores, a
mechanism that reads less differs, a rerun resumes without converting again, and a converted checkpoint is
refused unless it was saved with the ``full`` variant (the plain model, windowed: a trained base); a mechanism with
settings of its own is stored beside it, and the reference takes none."""

from __future__ import annotations

import json

import pytest
import torch
from transformers import BartConfig, BartForConditionalGeneration

from srformer.cli import fidelity_command
from srformer.cli.main import main
from srformer.data import train_unigram_tokenizer

DOCUMENTS = [f"Item {i}: the council met on day {i} and the road {i % 3} was closed for repairs by crew {i}."
             for i in range(6)]


@pytest.fixture(scope="module")
def base(tmp_path_factory):
    folder = tmp_path_factory.mktemp("fidelity")
    tokenizer = train_unigram_tokenizer(DOCUMENTS * 20, vocab_size=120)
    torch.manual_seed(0)
    model = BartForConditionalGeneration(BartConfig(
        vocab_size=len(tokenizer), d_model=32, encoder_layers=1, decoder_layers=1, encoder_attention_heads=2,
        decoder_attention_heads=2, encoder_ffn_dim=64, decoder_ffn_dim=64, max_position_embeddings=128,
        pad_token_id=tokenizer.pad_token_id, bos_token_id=tokenizer.bos_token_id,
        eos_token_id=tokenizer.eos_token_id, decoder_start_token_id=tokenizer.eos_token_id))
    model.save_pretrained(folder / "base")
    tokenizer.save_pretrained(folder / "base")
    rows = [{"id": str(i), "document": text * 3, "summary": text[:40]} for i, text in enumerate(DOCUMENTS)]
    (folder / "data.jsonl").write_text("".join(json.dumps(row) + "\n" for row in rows))
    return folder


def _args(base, output, *variants):
    return ["fidelity", "--checkpoint", str(base / "base"), "--data", str(base / "data.jsonl"), "--variants",
            *variants, "--max-source-length", "96", "--max-target-length", "24", "--segment-size", "16",
            "--target-length", "24", "--batch-size", "4", "--output", str(output), "--no-progress"]


def test_fidelity_of_each_mechanism_against_full(base, tmp_path, monkeypatch, capsys):
    output = tmp_path / "out"
    assert main(_args(base, output, "knn", "knn-loki", "segmented")) == 0
    payload = json.loads((output / "fidelity.json").read_text())
    summary = payload["summary"]
    assert list(summary) == ["full", "knn", "knn-loki", "segmented"]
    assert summary["full"]["perplexity_ratio"] == 1.0 and summary["full"]["agreement"] == 1.0
    # every key is a candidate (256 >= 96): the exact search's keys, the same scores up to float32 rounding
    for mine, exact in zip(payload["documents"]["knn-loki"], payload["documents"]["knn"], strict=True):
        assert mine["argmax"] == exact["argmax"]
        assert mine["nll"] == pytest.approx(exact["nll"], rel=1e-4)
    assert summary["segmented"]["perplexity_ratio"] != 1.0  # it reads one segment of the six
    assert summary["knn"]["documents"] == 6 and summary["knn"]["tokens"] == summary["full"]["tokens"]
    assert "| `knn-loki` |" in (output / "fidelity.md").read_text()
    assert (output / "fidelity.png").read_bytes()[:8] == b"\x89PNG\r\n\x1a\n"

    def never(*_args, **_kwargs):
        raise AssertionError("a finished mechanism was scored again")

    monkeypatch.setattr(fidelity_command, "load_summarizer", never)
    assert main(_args(base, output, "knn", "knn-loki", "segmented")) == 0  # resumed: nothing left to score
    assert json.loads((output / "fidelity.json").read_text())["summary"] == summary


def test_a_converted_checkpoint_and_another_runs_folder_are_refused(base, tmp_path, capsys):
    from srformer import convert, named_config
    from srformer.evaluation.evaluate import load_summarizer

    model, tokenizer = load_summarizer(base / "base")
    convert(model, named_config("segmented", segment_size=16, target_length=24))
    model.save_pretrained(tmp_path / "converted")
    tokenizer.save_pretrained(tmp_path / "converted")
    args = _args(base, tmp_path / "out", "knn")
    args[2] = str(tmp_path / "converted")
    assert main(args) == 2
    assert "already converted" in capsys.readouterr().err
    assert main(_args(base, tmp_path / "other", "full")) == 0
    changed = _args(base, tmp_path / "other", "full")
    changed[changed.index("--max-target-length") + 1] = "12"
    assert main(changed) == 2
    assert "another run" in capsys.readouterr().err


def test_a_checkpoint_saved_as_full_is_a_base(base, tmp_path):
    """A model trained with ``--variant full`` (plain attention, its encoder read in windows) is the base the
    mechanisms are converted from: it is scored, and its ``full`` scores what the plain model read through the same
    windows scores."""
    from srformer import convert, named_config
    from srformer.evaluation.evaluate import load_summarizer

    model, tokenizer = load_summarizer(base / "base")
    convert(model, named_config("full", segment_size=16, target_length=24, encoder_window=32))
    model.save_pretrained(tmp_path / "full")
    tokenizer.save_pretrained(tmp_path / "full")
    windowed = _args(base, tmp_path / "windowed", "knn") + ["--setting", "encoder_window=32"]
    assert main(windowed) == 0
    saved = list(windowed)
    saved[2] = str(tmp_path / "full")
    saved[saved.index("--output") + 1] = str(tmp_path / "saved")
    assert main(saved) == 0
    plain = json.loads((tmp_path / "windowed" / "fidelity.json").read_text())["documents"]
    from_full = json.loads((tmp_path / "saved" / "fidelity.json").read_text())["documents"]
    for name in ("full", "knn"):
        for a, b in zip(plain[name], from_full[name], strict=True):
            assert a["argmax"] == b["argmax"]
            assert a["nll"] == pytest.approx(b["nll"], rel=1e-5)


def test_a_mechanism_with_settings_of_its_own_is_stored_beside_it_and_the_summary_covers_the_folder(base, tmp_path):
    output = tmp_path / "out"
    assert main(_args(base, output, "knn")) == 0
    # a second call into the same folder: knn reading 2 keys per head, labelled by its setting
    assert main(_args(base, output, "knn") + ["--setting", "knn:top_keys=2"]) == 0
    payload = json.loads((output / "fidelity.json").read_text())
    assert list(payload["documents"]) == ["full", "knn", "knn@top_keys=2"]
    assert list(payload["summary"]) == ["full", "knn", "knn@top_keys=2"]
    # 2 of up to 96 keys: it reads less than knn's 32, so it scores otherwise
    assert payload["summary"]["knn@top_keys=2"]["perplexity"] != payload["summary"]["knn"]["perplexity"]
    assert "| `knn@top_keys=2` |" in (output / "fidelity.md").read_text()


def test_the_reference_takes_no_settings_of_its_own(base, tmp_path, capsys):
    assert main(_args(base, tmp_path / "out", "knn") + ["--setting", "full:encoder_window=64"]) == 2
    assert "the reference 'full' takes no settings of its own" in capsys.readouterr().err
