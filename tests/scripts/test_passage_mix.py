"""scripts/passage_mix.py: each paper's passages are contiguous runs of its first tokens, 16-48 long, followed by
its oracle target unchanged; a negative passage count is refused."""

from __future__ import annotations

import json
import subprocess
import sys
from pathlib import Path

from tokenizers import Tokenizer
from tokenizers.models import WordLevel
from tokenizers.pre_tokenizers import WhitespaceSplit
from transformers import PreTrainedTokenizerFast

SCRIPT = Path(__file__).resolve().parents[2] / "scripts" / "passage_mix.py"


def _tokenizer(path: Path) -> None:
    vocab = {"<pad>": 0, "</s>": 1, "<unk>": 2, **{f"w{i}": i for i in range(3, 400)}}
    backend = Tokenizer(WordLevel(vocab=vocab, unk_token="<unk>"))
    backend.pre_tokenizer = WhitespaceSplit()
    PreTrainedTokenizerFast(tokenizer_object=backend, pad_token="<pad>", eos_token="</s>",
                            unk_token="<unk>").save_pretrained(path)


def test_passages_are_runs_of_the_papers_first_tokens_then_the_oracle_target(tmp_path: Path) -> None:
    _tokenizer(tmp_path / "tok")
    papers = [{"id": f"p{n}", "document": " ".join(f"w{3 + (n * 7 + i) % 390}" for i in range(300)),
               "summary": f"oracle {n}"} for n in range(4)]
    (tmp_path / "oracle.jsonl").write_text("".join(json.dumps(p) + "\n" for p in papers))
    subprocess.run([sys.executable, str(SCRIPT), str(tmp_path / "oracle.jsonl"), str(tmp_path / "tok"),
                    str(tmp_path / "mix.jsonl"), "2", "--max-source-length", "100"], check=True, capture_output=True)
    rows = [json.loads(line) for line in (tmp_path / "mix.jsonl").read_text().splitlines()]
    assert len(rows) == 4 * 3
    for n, paper in enumerate(papers):
        first = paper["document"].split()[:100]
        passages, oracle = rows[3 * n:3 * n + 2], rows[3 * n + 2]
        assert oracle == paper
        for passage in passages:
            words = passage["summary"].split()
            assert passage["document"] == paper["document"] and 16 <= len(words) <= 48
            starts = [i for i in range(len(first)) if first[i:i + len(words)] == words]
            assert starts, passage  # a contiguous run of the first 100 tokens


def test_a_negative_passage_count_is_refused(tmp_path: Path) -> None:
    result = subprocess.run([sys.executable, str(SCRIPT), "o.jsonl", "tok", "out.jsonl", "-1"], cwd=tmp_path,
                            capture_output=True, text=True, check=False)
    assert result.returncode == 2 and "PASSAGES must be 0 or more, got -1" in result.stderr
    assert not (tmp_path / "out.jsonl").exists()
