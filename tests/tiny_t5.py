"""Shared by the command-line tests that launch subprocesses: a tiny random T5 checkpoint with its own tokenizer."""

from __future__ import annotations

from collections.abc import Sequence
from pathlib import Path

import torch
from transformers import T5Config, T5ForConditionalGeneration

from srformer.data.tokenizer import train_unigram_tokenizer


def save_tiny_t5(folder: Path, texts: Sequence[str], *, dropout_rate: float) -> None:
    """Save into ``folder`` a T5 of two layers, d_model 32 (weights from seed 0), with ``dropout_rate``, and a
    Unigram tokenizer of 300 pieces trained on ``texts``."""
    tokenizer = train_unigram_tokenizer(list(texts), vocab_size=300)
    torch.manual_seed(0)
    T5ForConditionalGeneration(T5Config(
        vocab_size=len(tokenizer), d_model=32, d_ff=64, num_layers=2, num_decoder_layers=2, num_heads=2, d_kv=16,
        dropout_rate=dropout_rate, pad_token_id=tokenizer.pad_token_id, eos_token_id=tokenizer.eos_token_id,
        decoder_start_token_id=tokenizer.pad_token_id,
    )).save_pretrained(folder)
    tokenizer.save_pretrained(folder)
