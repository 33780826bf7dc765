"""Shared fixtures for srformer.training tests: a tiny random T5, a tiny word-level tokenizer, features.

Tests get the helpers through fixtures (never ``import conftest``), so the folder also works next to
other test folders' conftest files and under ``--import-mode=importlib``.
"""

from __future__ import annotations

import random

import pytest
import torch
from tokenizers import Tokenizer
from tokenizers.models import WordLevel
from tokenizers.pre_tokenizers import WhitespaceSplit
from transformers import PreTrainedTokenizerFast, T5Config, T5ForConditionalGeneration

VOCAB_SIZE = 64


def build_model(seed: int = 0, dropout: float = 0.0) -> T5ForConditionalGeneration:
    """A tiny random T5 (about 30k parameters), deterministic given ``seed``."""
    torch.manual_seed(seed)
    config = T5Config(
        vocab_size=VOCAB_SIZE,
        d_model=32,
        d_ff=64,
        num_layers=2,
        num_decoder_layers=2,
        num_heads=2,
        d_kv=16,
        decoder_start_token_id=0,
        pad_token_id=0,
        eos_token_id=1,
        dropout_rate=dropout,
    )
    return T5ForConditionalGeneration(config)


def build_features(count: int, seed: int = 0) -> list[dict[str, list[int]]]:
    """``count`` random unpadded examples of varied lengths (inputs 3-12 tokens, labels 2-8 incl. EOS)."""
    rng = random.Random(seed)
    features = []
    for _ in range(count):
        source = [rng.randrange(3, VOCAB_SIZE) for _ in range(rng.randint(2, 11))] + [1]
        target = [rng.randrange(3, VOCAB_SIZE) for _ in range(rng.randint(1, 7))] + [1]
        features.append({"input_ids": source, "attention_mask": [1] * len(source), "labels": target})
    return features


@pytest.fixture(scope="session")
def tokenizer() -> PreTrainedTokenizerFast:
    vocab = {"<pad>": 0, "</s>": 1, "<unk>": 2}
    vocab.update({f"w{i}": i for i in range(3, VOCAB_SIZE)})
    backend = Tokenizer(WordLevel(vocab=vocab, unk_token="<unk>"))
    backend.pre_tokenizer = WhitespaceSplit()
    return PreTrainedTokenizerFast(tokenizer_object=backend, pad_token="<pad>", eos_token="</s>", unk_token="<unk>")


@pytest.fixture
def make_model():
    """Factory fixture: ``make_model(seed=0, dropout=0.0)`` -> tiny random T5 (see :func:`build_model`)."""
    return build_model


@pytest.fixture
def make_features():
    """Factory fixture: ``make_features(count, seed=0)`` -> random features (see :func:`build_features`)."""
    return build_features


@pytest.fixture
def features() -> list[dict[str, list[int]]]:
    """Ten random examples: with batch_size=4 that is 3 batches per epoch (4, 4, 2)."""
    return build_features(10)
