"""Getting a model and tokenizer: a hub id or local checkpoint, or a small named config built from scratch.

Named configs (randomly initialised, for machines without hub access or for quick experiments)
get a SentencePiece-style Unigram tokenizer trained on the training texts; it is saved with
every checkpoint, so evaluation and generation use the same vocabulary.
"""

from __future__ import annotations

import os
from collections.abc import Callable, Iterable, Mapping
from pathlib import Path
from typing import Any, TypeVar

from transformers import (
    AutoConfig,
    AutoModelForSeq2SeqLM,
    AutoTokenizer,
    BartConfig,
    BartForConditionalGeneration,
    LEDConfig,
    LEDForConditionalGeneration,
    PreTrainedModel,
    PreTrainedTokenizerBase,
    T5Config,
    T5ForConditionalGeneration,
)

from srformer.core import SRformerConfig
from srformer.data.tokenizer import train_unigram_tokenizer
from srformer.models.convert import from_pretrained as load_converted
from srformer.models.named_configs import NAMED_CONFIGS

_Loaded = TypeVar("_Loaded")


def build_named_model(name: str, tokenizer: PreTrainedTokenizerBase, *, max_positions: int = 4096) -> PreTrainedModel:
    """A randomly initialised model of a :data:`NAMED_CONFIGS` architecture for ``tokenizer``.

    Args:
        name: a key of :data:`NAMED_CONFIGS`.
        tokenizer: its vocabulary size and special tokens (pad, eos) set the model's.
        max_positions: the learned positions of the encoder and the decoder, in tokens (BART, LED; T5's positions
            are relative).

    Raises:
        ValueError: for an unknown name.
    """
    if name not in NAMED_CONFIGS:
        raise ValueError(f"Unknown model config {name!r}; named configs are {', '.join(NAMED_CONFIGS)}.")
    settings = dict(NAMED_CONFIGS[name])
    family = settings.pop("family")
    vocab_size = len(tokenizer)
    # Generation settings such as decoder_start_token_id are not fields of the config dataclasses, which
    # accept them as extra keywords: passed through a dict, as their typed signatures do not list them.
    generation: dict[str, Any]
    if family == "t5":
        generation = {"decoder_start_token_id": tokenizer.pad_token_id}
        t5_config = T5Config(
            vocab_size=vocab_size, pad_token_id=tokenizer.pad_token_id, eos_token_id=tokenizer.eos_token_id,
            dropout_rate=0.1, **generation, **settings,
        )
        return T5ForConditionalGeneration(t5_config)
    generation = {"decoder_start_token_id": tokenizer.eos_token_id, "forced_bos_token_id": None}
    tokens = dict(vocab_size=vocab_size, pad_token_id=tokenizer.pad_token_id, eos_token_id=tokenizer.eos_token_id,
                  bos_token_id=tokenizer.eos_token_id, forced_eos_token_id=None)
    if family == "led":
        led_config = LEDConfig(**tokens, max_encoder_position_embeddings=max_positions,
                               max_decoder_position_embeddings=max_positions, **generation, **settings)
        return LEDForConditionalGeneration(led_config)
    bart_config = BartConfig(**tokens, max_position_embeddings=max_positions, **generation, **settings)
    return BartForConditionalGeneration(bart_config)


def is_local_path(name_or_path: str) -> bool:
    """Whether ``name_or_path`` can only be a local path, never a hub model id: it is absolute, starts with ``.``
    or ``~``, contains a backslash, or has more than two ``/``-separated parts (hub ids are ``NAME`` or
    ``OWNER/NAME``)."""
    text = str(name_or_path)
    return (Path(text).is_absolute() or text.startswith((".", "~")) or "\\" in text
            or len([part for part in text.split("/") if part]) > 2)


def load_pretrained(load: Callable[..., _Loaded], name_or_path: str | os.PathLike, **kwargs: Any) -> _Loaded:
    """``load(name_or_path, **kwargs)`` (a ``from_pretrained``) with a clear error for a model that is not there.

    The rule: an existing local path is loaded from disk. A missing path that can only be a local path
    (:func:`is_local_path`: absolute, starting with ``.`` or ``~``, or of more than two ``/`` parts) is an error
    at once. Anything else (``t5-small``, ``google/flan-t5-small``, or a mistyped relative path such as
    ``runs/modle``) is tried as a Hugging Face hub model id; when the hub cannot provide it (no such id, no network,
    offline mode) the error says that there is neither a local checkpoint nor a reachable hub model of that name.

    Raises:
        FileNotFoundError: naming ``name_or_path`` and the fix, for a missing local path or a name that is neither
            a local checkpoint nor a reachable hub model id (the loader's ``OSError`` is chained as the cause).
    """
    text = os.fspath(name_or_path)
    path = Path(text)
    if path.exists():
        return load(text, **kwargs)
    if is_local_path(text):
        raise FileNotFoundError(
            f"No checkpoint at local path {text!r} ({path.absolute()} does not exist). Pass the --output "
            f"directory of `srformer train` (or any save_pretrained directory), a named config "
            f"({', '.join(NAMED_CONFIGS)}), or a Hugging Face hub model id such as t5-small."
        )
    try:
        return load(text, **kwargs)
    except OSError as error:
        raise FileNotFoundError(
            f"{text!r} is neither a local checkpoint (no such path: {path.absolute()}) nor a model id that "
            f"could be loaded from the Hugging Face hub ({str(error).splitlines()[0] if str(error) else error!r}). "
            "Fix the path (the --output directory of `srformer train`), or check the hub id and the network "
            "connection (HF_HUB_OFFLINE=1 allows only cached models)."
        ) from error


def load_tokenizer(
    name_or_path: str, *, train_texts: Iterable[str] | None = None, vocab_size: int = 8000
) -> PreTrainedTokenizerBase:
    """The tokenizer for ``name_or_path``: trained on ``train_texts`` for a named config, else loaded
    (:func:`load_pretrained`: a local checkpoint, else a hub model id).

    Raises:
        ValueError: a named config without ``train_texts``.
        FileNotFoundError: no local checkpoint and no reachable hub model of that name (:func:`load_pretrained`).
    """
    if name_or_path in NAMED_CONFIGS:
        if train_texts is None:
            raise ValueError(f"{name_or_path!r} is built from scratch: its tokenizer needs training texts.")
        return train_unigram_tokenizer(train_texts, vocab_size=vocab_size)
    return load_pretrained(AutoTokenizer.from_pretrained, name_or_path)


def load_model(
    name_or_path: str,
    tokenizer: PreTrainedTokenizerBase | None = None,
    *,
    conversion: SRformerConfig | None = None,
    runtime: Mapping[str, Any] | None = None,
    **kwargs,
) -> PreTrainedModel:
    """A model by name: a named config (random weights), an SRformer checkpoint, or a plain checkpoint, converted and
    with runtime options as asked, in one call.

    Args:
        name_or_path: a key of :data:`NAMED_CONFIGS`, a local directory or a hub id (the rule of
            :func:`load_pretrained`).
        tokenizer: required for named configs.
        conversion: the settings to convert a plain checkpoint to as it is loaded (for an SRformer checkpoint, the
            settings expected: :func:`~srformer.models.convert.from_pretrained`); None: the checkpoint as it is.
        runtime: runtime options on top (:func:`~srformer.models.convert.with_runtime_options`): chunked
            encoding's ``encoder_window``/``window_overlap``/``window_batch_size``, ``knn``'s index options; a plain
            checkpoint with them and no ``conversion`` becomes ``full`` with them.
        **kwargs: passed to ``from_pretrained``.

    Raises:
        ValueError: a named config without a tokenizer, or with ``conversion``/``runtime`` (convert the built
            model instead); a ``conversion`` other than the settings an SRformer checkpoint holds; a runtime option
            the model's variant does not have.
        FileNotFoundError: no local checkpoint and no reachable hub model of that name (:func:`load_pretrained`).
    """
    if name_or_path in NAMED_CONFIGS:
        if tokenizer is None:
            raise ValueError(f"{name_or_path!r} needs a tokenizer to size its vocabulary.")
        if conversion is not None or runtime:
            raise ValueError(f"{name_or_path!r} is built from scratch: convert the built model instead of passing "
                             "`conversion` or `runtime`.")
        return build_named_model(name_or_path, tokenizer)
    config = load_pretrained(AutoConfig.from_pretrained, name_or_path)
    if getattr(config, "srformer", None) is None and conversion is None and not runtime:
        return AutoModelForSeq2SeqLM.from_pretrained(name_or_path, **kwargs)
    return load_converted(name_or_path, conversion, runtime=runtime, **kwargs)
