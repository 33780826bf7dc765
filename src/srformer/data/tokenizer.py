"""Train a small SentencePiece-style Unigram tokenizer with T5 conventions.

Used to train models from scratch on a corpus without downloading a pretrained tokenizer. The
result follows T5: ``<pad>`` is id 0, ``</s>`` id 1, ``<unk>`` id 2, every encoded sequence
ends with ``</s>``, and words are marked with the metaspace ``"▁"`` so that decoding restores the
spaces.

Unlike T5, newlines are kept (as the piece ``"\\n"``), because multi-sentence summaries are
written one sentence a line for ``rougeLsum``. A newline is normalized to ``"\\n "`` before
encoding, so the word after it starts a new word; decoded text therefore shows ``"\\n "`` where the
input had ``"\\n"`` (harmless for ROUGE, which splits lines and ignores spaces). Runs of spaces
are collapsed to one space, as SentencePiece does.

The pieces and their scores are learned by SentencePiece's own Unigram trainer (single-threaded,
deterministic: the same texts always give the same ids), then loaded into a ``tokenizers`` Unigram
model for fast encoding. The ``tokenizers`` trainer was not used because its result varies from
run to run (piece scores differ by up to 2e-3 and ids are assigned in a different order), which
made whole training runs irreproducible.
"""

from __future__ import annotations

import io
from collections.abc import Iterable

import sentencepiece
from tokenizers import Regex, Tokenizer, decoders, models, normalizers, pre_tokenizers, processors
from transformers import PreTrainedTokenizerFast

#: Special tokens in id order: ``<pad>`` = 0, ``</s>`` = 1, ``<unk>`` = 2 (T5's layout).
SPECIAL_TOKENS: tuple[str, ...] = ("<pad>", "</s>", "<unk>")

#: Smallest vocabulary accepted by :func:`train_unigram_tokenizer`.
MIN_VOCAB_SIZE = 100

_METASPACE = "▁"


def train_unigram_tokenizer(
    texts: Iterable[str], vocab_size: int = 8000
) -> PreTrainedTokenizerFast:
    """Train a Unigram (SentencePiece-style) tokenizer on ``texts``.

    Args:
        texts: training texts (documents and/or summaries); consumed once. Empty and
            whitespace-only texts are skipped.
        vocab_size: target number of tokens including the 3 special tokens. A small corpus may
            yield fewer tokens than asked for. About 1-2k documents train in a few seconds.

    Returns:
        A fast tokenizer with ``pad_token_id == 0``, ``eos_token_id == 1``,
        ``unk_token_id == 2``; ``tokenizer(text)["input_ids"]`` ends with 1 (``</s>``), and
        ``decode(ids, skip_special_tokens=True)`` gives readable text. It round-trips through
        ``save_pretrained(dir)`` and ``transformers.AutoTokenizer.from_pretrained(dir)``.

    Raises:
        ValueError: ``vocab_size < 100`` (too few pieces to cover the characters of a real
            corpus, which would turn many characters into ``<unk>``), or ``texts`` holds no
            non-blank text.
        TypeError: an item of ``texts`` is not a string.
    """
    if isinstance(texts, str):
        raise TypeError(
            "texts must be an iterable of strings, not a single string; wrap it in a list"
        )
    if vocab_size < MIN_VOCAB_SIZE:
        raise ValueError(
            f"vocab_size must be at least {MIN_VOCAB_SIZE}, got {vocab_size}: the vocabulary must "
            "hold the special tokens plus every character of the corpus and common pieces; "
            "use a few thousand (T5 uses 32000, 8000 suits a small corpus)"
        )
    corpus: list[str] = []
    for index, text in enumerate(texts):
        if not isinstance(text, str):
            raise TypeError(f"texts[{index}] is {type(text).__name__}, expected str")
        if text.strip():
            corpus.append(text)
    if not corpus:
        raise ValueError(
            "texts is empty (or holds only blank strings); pass the documents and summaries to "
            "train the tokenizer on"
        )

    backend = Tokenizer(models.Unigram(_learn_pieces(corpus, vocab_size), unk_id=SPECIAL_TOKENS.index("<unk>")))
    backend.normalizer = normalizers.Sequence(
        [
            normalizers.NFKC(),
            normalizers.Replace(Regex(r"[ \t]*\n[ \t]*"), "\n "),
            normalizers.Replace(Regex(r"[ \t]{2,}"), " "),
        ]
    )
    backend.pre_tokenizer = pre_tokenizers.Metaspace(
        replacement=_METASPACE, prepend_scheme="always"
    )
    backend.decoder = decoders.Metaspace(replacement=_METASPACE, prepend_scheme="always")
    for expected_id, token in enumerate(SPECIAL_TOKENS):
        actual = backend.token_to_id(token)
        if actual != expected_id:  # pragma: no cover - guards against a tokenizers change
            raise RuntimeError(f"special token {token!r} got id {actual}, expected {expected_id}")
    eos_id = SPECIAL_TOKENS.index("</s>")
    backend.post_processor = processors.TemplateProcessing(
        single="$A </s>",
        pair="$A </s> $B </s>",
        special_tokens=[("</s>", eos_id)],
    )
    return PreTrainedTokenizerFast(
        tokenizer_object=backend,
        pad_token="<pad>",
        eos_token="</s>",
        unk_token="<unk>",
    )


def _learn_pieces(corpus: list[str], vocab_size: int) -> list[tuple[str, float]]:
    """``(piece, log-probability)`` in id order, learned by SentencePiece's Unigram trainer.

    Ids 0-2 are the special tokens and id 3 is the newline piece. A corpus too small for
    ``vocab_size`` yields fewer pieces (``hard_vocab_limit=False``).
    """
    model = io.BytesIO()
    sentencepiece.SentencePieceTrainer.train(
        sentence_iterator=iter(corpus),
        model_writer=model,
        model_type="unigram",
        vocab_size=vocab_size,
        hard_vocab_limit=False,
        pad_id=0,
        eos_id=1,
        unk_id=2,
        bos_id=-1,
        pad_piece="<pad>",
        eos_piece="</s>",
        unk_piece="<unk>",
        user_defined_symbols=["\n"],
        character_coverage=1.0,
        max_sentence_length=1 << 24,
        num_threads=1,
        minloglevel=2,
    )
    processor = sentencepiece.SentencePieceProcessor(model_proto=model.getvalue())
    return [(processor.id_to_piece(i), processor.get_score(i)) for i in range(processor.get_piece_size())]
