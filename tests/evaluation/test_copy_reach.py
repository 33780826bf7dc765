"""copy_reach (srformer.evaluation.copy_reach) on two exact copiers: one by position, one by content."""

from __future__ import annotations

from types import SimpleNamespace

import pytest
import torch
from torch import nn

from srformer.evaluation.copy_reach import copy_reach, reach_starts
from srformer.evaluation.copy_reach_report import reach_summary, reach_table, write_copy_reach

VOCAB = 64
START = 1  # decoder start token; documents use ids 2..VOCAB-1, each once


class _Copier(nn.Module):
    """Logits with one hot arg-max per decoder position: ``by_position`` predicts ``input_ids[:, t]`` at decoder
    position ``t``; otherwise it finds the decoder's input token in the source and predicts the token after it (the
    source's first token after the start token)."""

    def __init__(self, by_position: bool) -> None:
        super().__init__()
        self.by_position = by_position
        self.config = SimpleNamespace(decoder_start_token_id=START)
        self.anchor = nn.Parameter(torch.zeros(()))

    @property
    def device(self) -> torch.device:
        return self.anchor.device

    def get_encoder(self):
        """An encoder whose output is the source ids themselves, (B, n, 1)."""
        return lambda input_ids, attention_mask: SimpleNamespace(last_hidden_state=input_ids[..., None].float())

    def forward(self, encoder_outputs, attention_mask, decoder_input_ids):
        batch, steps = decoder_input_ids.shape
        predicted = torch.zeros(batch, steps, dtype=torch.long)
        source_ids = encoder_outputs.last_hidden_state[..., 0].long()
        for b in range(batch):
            source = source_ids[b][attention_mask[b].bool()].tolist()
            for t in range(steps):
                if self.by_position:
                    predicted[b, t] = source[t] if t < len(source) else 0
                else:
                    token = int(decoder_input_ids[b, t])
                    predicted[b, t] = source[0] if token == START else source[source.index(token) + 1]
        return SimpleNamespace(logits=nn.functional.one_hot(predicted, VOCAB).float())


def _documents(lengths, seed=0):
    generator = torch.Generator().manual_seed(seed)
    return [(torch.randperm(VOCAB - 2, generator=generator)[:n] + 2).tolist() for n in lengths]


def test_a_position_copier_reaches_only_the_start_and_a_content_copier_reaches_everywhere():
    documents = _documents([40, 40, 40])
    starts = reach_starts(40, 16, 8)
    assert starts == [0, 8, 16, 24]
    by_position = copy_reach(_Copier(True), documents, starts, span=16, cue=4, pad_id=0, batch_size=2)
    by_content = copy_reach(_Copier(False), documents, starts, span=16, cue=4, pad_id=0, batch_size=2)
    assert [row["accuracy"] for row in by_position] == [1.0, 0.0, 0.0, 0.0]  # distinct tokens: no lucky match
    assert [row["accuracy"] for row in by_content] == [1.0] * 4
    assert all(row["documents"] == 3 and row["tokens"] == 3 * 12 for row in by_content)


def test_only_the_tokens_after_the_cue_are_scored():
    """The count leaves the cue out (a position copier on a passage one token in is wrong everywhere: 0 of 2 x 7);
    with cue 0 the prediction after the start token counts too."""
    documents = _documents([30, 30])
    rows = copy_reach(_Copier(True), documents, [1], span=10, cue=3, pad_id=0)
    assert rows[0]["accuracy"] == 0.0 and rows[0]["tokens"] == 2 * 7
    rows = copy_reach(_Copier(False), documents, [5], span=10, cue=0, pad_id=0)
    # the first prediction (after the start token) is the source's first token, not the passage's: 9 of 10 right
    assert rows[0]["accuracy"] == pytest.approx(9 / 10)


def test_documents_too_short_for_a_start_are_left_out_and_counted():
    documents = _documents([20, 40, 12])
    rows = copy_reach(_Copier(False), documents, [0, 10, 30], span=10, cue=2, pad_id=0, batch_size=8)
    assert [row["documents"] for row in rows] == [3, 2, 1]
    rows = copy_reach(_Copier(False), documents, [35], span=10, cue=2, pad_id=0)
    assert rows == [{"start": 35, "documents": 0, "tokens": 0, "accuracy": None}]


@pytest.mark.parametrize(("keywords", "message"), [
    ({"span": 4, "cue": 4}, "`span`"), ({"cue": -1}, "`cue`"), ({"batch_size": 0}, "`batch_size`"),
])
def test_bad_arguments_are_refused_by_name(keywords, message):
    with pytest.raises(ValueError, match=message):
        copy_reach(_Copier(False), _documents([20]), [0], pad_id=0, **{"span": 8, "cue": 2, **keywords})


def test_bad_starts_and_no_sequences_are_refused():
    with pytest.raises(ValueError, match="`starts`"):
        copy_reach(_Copier(False), _documents([20]), [-1], span=8, cue=2, pad_id=0)
    with pytest.raises(ValueError, match="at least one sequence"):
        copy_reach(_Copier(False), [], [0], span=8, cue=2, pad_id=0)
    with pytest.raises(ValueError, match="does not fit"):
        reach_starts(10, 16, 4)
    with pytest.raises(ValueError, match="`span` and `stride`"):
        reach_starts(10, 4, 0)


def test_a_model_without_a_decoder_start_token_is_refused():
    model = _Copier(False)
    model.config = SimpleNamespace(decoder_start_token_id=None)
    with pytest.raises(ValueError, match="decoder_start_token_id"):
        copy_reach(model, _documents([20]), [0], span=8, cue=2, pad_id=0)


def test_the_summary_weights_by_tokens_and_splits_at_the_first_window():
    rows = [{"start": 0, "tokens": 10, "accuracy": 1.0}, {"start": 8, "tokens": 10, "accuracy": 0.5},
            {"start": 16, "tokens": 30, "accuracy": 0.1}, {"start": 24, "tokens": 0, "accuracy": None}]
    summary = reach_summary(rows, first_window_end=16)
    assert summary["at_start"] == 1.0
    assert summary["elsewhere"] == pytest.approx((5 + 3) / 40)
    assert summary["beyond_first_window"] == pytest.approx(0.1)
    assert reach_summary(rows, None)["beyond_first_window"] is None


def test_the_record_is_written_as_json_markdown_and_png(tmp_path):
    rows = copy_reach(_Copier(True), _documents([40, 40]), [0, 16], span=16, cue=4, pad_id=0)
    for row, window in zip(rows, (0, 1), strict=True):
        row["window"] = window
    record = {"checkpoint": "copier", "max_source_length": 40, "encoder_window": 20, "window_overlap": 0.0,
              "window_keep_starts": [0, 20], "span": 16, "cue": 4, "documents": 2, "rows": rows,
              "summary": reach_summary(rows, 20)}
    paths = write_copy_reach(tmp_path / "reach" / "copier.json", record)
    assert paths["json"].is_file() and paths["plot"].stat().st_size > 1000
    table = paths["markdown"].read_text()
    assert "| 0 | 0 | 2 | 24 | 100.0% |" in table and "| 16 | 1 | 2 | 24 | 0.0% |" in table
    assert table == reach_table(record) and "windows of 20 tokens" in table
