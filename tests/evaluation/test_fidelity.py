"""Teacher-forced fidelity (:mod:`srformer.evaluation.fidelity`): the per-document scores of a model, and the
summary's perplexity, agreement and paired intervals against the reference."""

from __future__ import annotations

import math

import pytest
import torch

from srformer.evaluation.fidelity import DocumentFidelity, fidelity_summary, teacher_forced


def test_teacher_forced_scores_the_references_tokens_only():
    """A stand-in model with fixed logits: each document's NLL is the sum over its unpadded target positions of
    -log softmax at the label, and the argmax is taken where the label is."""

    class Fixed(torch.nn.Module):
        def forward(self, **batch):
            logits = torch.log(torch.tensor([[[0.5, 0.25, 0.25], [0.1, 0.8, 0.1], [0.2, 0.2, 0.6]]] * 2))

            class Out:
                pass

            out = Out()
            out.logits = logits
            return out

    labels = torch.tensor([[0, 1, 2], [1, -100, -100]])
    batch = {"input_ids": torch.ones(2, 4, dtype=torch.long), "attention_mask": torch.ones(2, 4),
             "labels": labels}
    first, second = teacher_forced(Fixed(), [batch])
    assert first.tokens == 3 and second.tokens == 1
    assert first.nll == pytest.approx(-(math.log(0.5) + math.log(0.8) + math.log(0.6)))
    assert second.nll == pytest.approx(-math.log(0.25))
    assert first.argmax == (0, 1, 2) and second.argmax == (0,)
    with pytest.raises(ValueError, match="labels"):
        teacher_forced(Fixed(), [{"input_ids": batch["input_ids"]}])


def test_the_summary_compares_each_mechanism_with_the_reference():
    reference = [DocumentFidelity(nll=2.0, tokens=2, argmax=(1, 2)), DocumentFidelity(nll=3.0, tokens=3,
                                                                                        argmax=(4, 5, 6))]
    other = [DocumentFidelity(nll=2.0, tokens=2, argmax=(1, 9)), DocumentFidelity(nll=6.0, tokens=3,
                                                                                    argmax=(4, 5, 6))]
    summary = fidelity_summary({"full": reference, "x": other}, "full", n_samples=200)
    assert summary["full"]["perplexity"] == pytest.approx(math.exp(5.0 / 5))
    assert summary["full"]["perplexity_ratio"] == 1.0 and summary["full"]["agreement"] == 1.0
    assert summary["x"]["perplexity"] == pytest.approx(math.exp(8.0 / 5))
    assert summary["x"]["agreement"] == pytest.approx(4 / 5)
    assert summary["x"]["nll_per_token_minus_reference"]["mean"] == pytest.approx((0.0 + 1.0) / 2)
    assert summary["x"]["agreement_minus_reference"]["mean"] == pytest.approx((-0.5 + 0.0) / 2)
    with pytest.raises(ValueError, match="reference 'full' was not scored"):
        fidelity_summary({"x": other}, "full")
    with pytest.raises(ValueError, match="same features"):
        fidelity_summary({"full": reference, "x": [other[0], DocumentFidelity(1.0, 2, (4, 5))]}, "full")
