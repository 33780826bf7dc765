"""Seeded synthetic tasks for long-range cross attention.

Every task builds a document of ``length`` encoder tokens (its real length ``k``; nothing is
padded) from a small word-level vocabulary of its own (:class:`ProbeVocabulary`): filler tokens,
key tokens, value tokens, class tokens, count tokens and one marker. The target lists what a
decoder must read from the document; every target position records the document positions it
needs (``Example.needed``), from which :mod:`srformer.probe.metrics` decides whether the position is
on-segment (everything it needs lies in the segment ``i(t)`` that segmented attention reads at that
decoder step) or off-segment.

Tasks (``n`` is the task's size):

- ``copy`` (control): ``n`` marked value tokens (``<mark> v``); the target is the marked values in
  document order. Marked value ``j`` is placed inside segment ``i(j)`` of the schedule, so segmented
  attention sees what it needs at every step.
- ``reverse``: the same documents; the target is the marked values in reverse order, so target
  ``j`` needs the value placed in segment ``i(n - 1 - j)``, off the scheduled segment almost always.
- ``recall``: ``D`` facts at random positions in the filler; a fact is one position holding a key
  token ``K{q}`` with a value token ``v{x}`` superposed on it (``Example.overlay``: the model's input at
  that position is the sum of the two token embeddings). The target queries ``n`` of the ``D`` stored
  keys, in increasing key order: ``K{a} v_a K{b} v_b ...``. The key tokens of the target are the queries
  (given to the decoder, never scored); only the value positions are scored; each needs the position of
  its fact. ``D = min(num_keys, max(n, k // fact_spacing))`` grows with the document (one fact per
  ``fact_spacing`` tokens), so a short curriculum document stores only the queried facts and a long one
  stores every key: the encoder cannot know which of them the decoder will ask for.
- ``aggregate``: ``n`` classes; class ``c`` occurs a uniform random number of times in
  ``[0, max_count]`` at random positions; the target is one count token per class, in class order.
  A count needs every occurrence of its class (a count of 0 needs the whole document to check
  absence and is always off-segment).

Why this design (measured; see docs/probe.md): a tiny T5 trained from scratch learns neither
associative recall in real-text filler (chance after 2.5k steps on 1.8k examples, 23% after 24k steps
on 17k examples), nor two-token facts ``K_q v`` (binding a value to its neighbouring key is an encoder
skill; chance after 1.25k steps with 32 facts), nor one-token facts ``K{q}=v{x}`` with every key stored
(each of the ``num_keys * num_values`` fact embeddings must be learned on its own; chance after 1.2k
steps). A superposed key + value embedding states the fact in one position with shared embeddings,
and storing one fact per ``fact_spacing`` tokens makes the curriculum's short documents easy (only the
queried facts) while the long ones store every key, which stops the full-attention encoder from
copying the few facts that matter into every segment.
"""

from __future__ import annotations

import random
from dataclasses import dataclass, field
from functools import cached_property

#: Task names, in report order.
TASKS: tuple[str, ...] = ("copy", "reverse", "recall", "aggregate")


@dataclass(frozen=True)
class ProbeVocabulary:
    """The probe's word-level vocabulary: ids ``0, 1, 2`` are ``<pad>`` (also T5's decoder start),
    ``</s>`` and ``<unk>``, then ``<mark>``, filler ``w*``, keys ``K*``, values ``v*``, classes
    ``c*`` and counts ``#0 .. #max_count``.

    Args:
        num_filler: filler tokens (what the document is made of).
        num_keys: key tokens; the largest number of facts a ``recall`` document stores (and the
            largest ``n``).
        num_values: value tokens; chance accuracy on a value is ``1 / num_values``.
        num_classes: class tokens; the largest ``aggregate`` size.
        max_count: largest count of one class in ``aggregate`` (chance ``1 / (max_count + 1)``).

    Raises:
        ValueError: if a size is not a positive integer.
    """

    num_filler: int = 64
    num_keys: int = 256
    num_values: int = 16
    num_classes: int = 8
    max_count: int = 7

    def __post_init__(self) -> None:
        for name in ("num_filler", "num_keys", "num_values", "num_classes", "max_count"):
            value = getattr(self, name)
            if isinstance(value, bool) or not isinstance(value, int) or value < 1:
                raise ValueError(f"ProbeVocabulary `{name}` must be a positive integer, got {value!r}.")

    @cached_property
    def tokens(self) -> tuple[str, ...]:
        """Every token, in id order."""
        return (
            "<pad>", "</s>", "<unk>", "<mark>",
            *(f"w{i}" for i in range(self.num_filler)),
            *(f"K{i}" for i in range(self.num_keys)),
            *(f"v{i}" for i in range(self.num_values)),
            *(f"c{i}" for i in range(self.num_classes)),
            *(f"#{i}" for i in range(self.max_count + 1)),
        )

    @cached_property
    def ids(self) -> dict[str, int]:
        """Token -> id."""
        return {token: i for i, token in enumerate(self.tokens)}

    def __len__(self) -> int:
        return len(self.tokens)

    pad_id = 0
    eos_id = 1
    unk_id = 2
    mark_id = 3

    def _block(self, prefix: str, count: int) -> list[int]:
        start = self.ids[f"{prefix}0"]
        return list(range(start, start + count))

    @cached_property
    def filler_ids(self) -> list[int]:
        return self._block("w", self.num_filler)

    @cached_property
    def key_ids(self) -> list[int]:
        return self._block("K", self.num_keys)

    @cached_property
    def value_ids(self) -> list[int]:
        return self._block("v", self.num_values)

    @cached_property
    def class_ids(self) -> list[int]:
        return self._block("c", self.num_classes)

    @cached_property
    def count_ids(self) -> list[int]:
        return self._block("#", self.max_count + 1)

    def encode(self, text: str) -> list[int]:
        """Ids of the whitespace-separated tokens of ``text`` (unknown words map to ``<unk>``)."""
        return [self.ids.get(word, self.unk_id) for word in text.split()]

    def decode(self, ids) -> str:
        """Tokens of ``ids`` joined by spaces, stopping at ``</s>`` and skipping ``<pad>``."""
        words = []
        for i in ids:
            i = int(i)
            if i == self.eos_id:
                break
            if i != self.pad_id:
                words.append(self.tokens[i] if 0 <= i < len(self.tokens) else "<unk>")
        return " ".join(words)

    def chance(self, task: str) -> float:
        """Accuracy of a uniform guess on a scored target position of ``task``."""
        if task == "aggregate":
            return 1.0 / (self.max_count + 1)
        return 1.0 / self.num_values


@dataclass(frozen=True)
class TaskSpec:
    """One task at one size.

    Args:
        task: one of :data:`TASKS`.
        n: the task's size: marked tokens (copy, reverse), queried facts (recall), classes (aggregate).
        fact_spacing: ``recall`` stores ``min(num_keys, max(n, k // fact_spacing))`` facts in a
            document of ``k`` tokens (one per ``fact_spacing`` tokens, at least the ``n`` queried ones).

    Raises:
        ValueError: for an unknown task, a non-positive ``n`` or ``fact_spacing``.
    """

    task: str
    n: int
    fact_spacing: int = 2

    def __post_init__(self) -> None:
        if self.task not in TASKS:
            raise ValueError(f"Unknown probe task {self.task!r}: `task` must be one of {', '.join(TASKS)}.")
        if isinstance(self.n, bool) or not isinstance(self.n, int) or self.n < 1:
            raise ValueError(f"The task size `n` must be a positive integer, got {self.n!r}.")
        if isinstance(self.fact_spacing, bool) or not isinstance(self.fact_spacing, int) or self.fact_spacing < 1:
            raise ValueError(f"`fact_spacing` must be a positive integer (tokens per fact), got {self.fact_spacing!r}.")

    def stored_facts(self, vocabulary: ProbeVocabulary, length: int) -> int:
        """Facts a ``recall`` document of ``length`` tokens stores: ``min(num_keys, max(n, length //
        fact_spacing))``."""
        return min(vocabulary.num_keys, max(self.n, length // self.fact_spacing))

    @property
    def target_tokens(self) -> int:
        """Target length in tokens, without the final ``</s>``."""
        return 2 * self.n if self.task == "recall" else self.n

    def min_length(self, vocabulary: ProbeVocabulary) -> int:
        """The shortest document (tokens) that holds this task: ``2n`` for copy/reverse (``<mark> v``
        pairs), ``n`` for recall (one position per fact), ``n * max_count`` for aggregate."""
        return {"copy": 2 * self.n, "reverse": 2 * self.n, "recall": self.n,
                "aggregate": self.n * vocabulary.max_count}[self.task]

    def check(self, vocabulary: ProbeVocabulary, length: int) -> None:
        """Raise ``ValueError`` if documents of ``length`` tokens cannot hold this task."""
        if self.task == "recall" and self.n > vocabulary.num_keys:
            raise ValueError(f"recall with n={self.n} needs n <= num_keys={vocabulary.num_keys}; raise num_keys.")
        if self.task == "aggregate" and self.n > vocabulary.num_classes:
            raise ValueError(
                f"aggregate with n={self.n} needs n <= num_classes={vocabulary.num_classes}; raise num_classes."
            )
        needed = self.min_length(vocabulary)
        if length < needed:
            raise ValueError(
                f"A {self.task} document with n={self.n} needs at least {needed} tokens, got length={length}."
            )


@dataclass(frozen=True)
class Example:
    """One document and its target.

    Attributes:
        source: the document, ``k`` token ids (all real, no padding).
        target: target token ids without the final ``</s>``; target index ``j`` is produced at decoder
            position ``t = j`` (position 0 holds the decoder start token).
        needed: per target index, the document positions whose tokens it needs.
        scored: per target index, whether it is scored (False for ``recall``'s key tokens, which the
            task fixes).
        overlay: per document position, a second token id whose embedding is added to the source
            token's (``-1``: none); empty when the task has none. ``recall`` puts a fact's value here.
    """

    source: tuple[int, ...]
    target: tuple[int, ...]
    needed: tuple[tuple[int, ...], ...]
    scored: tuple[bool, ...] = field(default=())
    overlay: tuple[int, ...] = field(default=())

    def __post_init__(self) -> None:
        if not self.scored:
            object.__setattr__(self, "scored", tuple(True for _ in self.target))
        if self.overlay and len(self.overlay) != len(self.source):
            raise ValueError(f"`overlay` must have one entry per source position ({len(self.source)}), "
                             f"got {len(self.overlay)}.")


def scheduled_segment(step: int, num_segments: int, target_length: int) -> int:
    """``i(t) = min(floor(t * m / T), m - 1)`` for one decoder position (paper Sec. 3.1); a plain
    Python copy of :func:`srformer.attention.schedule.segment_index` used to place ``copy`` tokens."""
    return min(step * num_segments // target_length, num_segments - 1)


def _pair_slots(rng: random.Random, start: int, stop: int, count: int) -> list[int]:
    """``count`` sorted, non-overlapping starts of two-token slots inside ``[start, stop)``."""
    if stop - start < 2 * count:
        raise ValueError(f"{count} two-token items do not fit in positions [{start}, {stop}).")
    picks = sorted(rng.sample(range(stop - start - count), count))
    return [start + a + i for i, a in enumerate(picks)]


def _filler(rng: random.Random, vocabulary: ProbeVocabulary, length: int) -> list[int]:
    return rng.choices(vocabulary.filler_ids, k=length)


def _marked(rng: random.Random, spec: TaskSpec, vocabulary: ProbeVocabulary, length: int, segment_size: int,
            target_length: int) -> tuple[list[int], list[int], list[int]]:
    """Document with ``n`` marked values, value ``j`` inside segment ``i(j)``; returns the document,
    the values and their positions (in document order)."""
    source = _filler(rng, vocabulary, length)
    m = -(-length // segment_size)
    by_segment: dict[int, int] = {}
    for j in range(spec.n):
        segment = scheduled_segment(j, m, target_length)
        by_segment[segment] = by_segment.get(segment, 0) + 1
    positions: list[int] = []
    for segment in sorted(by_segment):
        start, stop = segment * segment_size, min((segment + 1) * segment_size, length)
        if stop - start < 2 * by_segment[segment]:
            raise ValueError(
                f"copy/reverse with n={spec.n}: segment {segment} must hold {by_segment[segment]} marked tokens "
                f"(2 tokens each) but has {stop - start} positions; use a larger segment_size or length, or smaller n."
            )
        positions.extend(p + 1 for p in _pair_slots(rng, start, stop, by_segment[segment]))
    values = rng.choices(vocabulary.value_ids, k=spec.n)
    for position, value in zip(positions, values, strict=True):
        source[position - 1] = vocabulary.mark_id
        source[position] = value
    return source, values, positions


def generate_example(rng: random.Random, spec: TaskSpec, vocabulary: ProbeVocabulary, *, length: int,
                     segment_size: int, target_length: int) -> Example:
    """One example of ``spec`` with a document of ``length`` tokens, drawn from ``rng``.

    Args:
        rng: the random stream (advanced).
        spec: task and size.
        vocabulary: token ids.
        length: ``k``, document length in tokens.
        segment_size: ``s`` in tokens (``copy``/``reverse`` place marked token ``j`` in segment ``i(j)``).
        target_length: ``T`` of the schedule, >= the target length + 1.

    Raises:
        ValueError: if the document cannot hold the task (see :meth:`TaskSpec.check`).
    """
    spec.check(vocabulary, length)
    if spec.task in ("copy", "reverse"):
        source, values, positions = _marked(rng, spec, vocabulary, length, segment_size, target_length)
        order = range(spec.n) if spec.task == "copy" else range(spec.n - 1, -1, -1)
        return Example(tuple(source), tuple(values[j] for j in order), tuple((positions[j],) for j in order))
    if spec.task == "recall":
        source = _filler(rng, vocabulary, length)
        overlay = [-1] * length
        stored = spec.stored_facts(vocabulary, length)
        keys = rng.sample(range(vocabulary.num_keys), stored)
        positions = rng.sample(range(length), stored)
        values = rng.choices(range(vocabulary.num_values), k=stored)
        fact = {}
        for key, position, value in zip(keys, positions, values, strict=True):
            source[position] = vocabulary.key_ids[key]
            overlay[position] = vocabulary.value_ids[value]
            fact[key] = (position, value)
        target, needed, scored = [], [], []
        for key in sorted(rng.sample(keys, spec.n)):
            position, value = fact[key]
            target += [vocabulary.key_ids[key], vocabulary.value_ids[value]]
            needed += [(), (position,)]
            scored += [False, True]
        return Example(tuple(source), tuple(target), tuple(needed), tuple(scored), tuple(overlay))
    # aggregate
    source = _filler(rng, vocabulary, length)
    counts = [rng.randint(0, vocabulary.max_count) for _ in range(spec.n)]
    spots = rng.sample(range(length), sum(counts))
    occurrences: list[list[int]] = []
    for c, count in enumerate(counts):
        mine, spots = sorted(spots[:count]), spots[count:]
        for position in mine:
            source[position] = vocabulary.class_ids[c]
        occurrences.append(mine)
    return Example(tuple(source), tuple(vocabulary.count_ids[c] for c in counts), tuple(tuple(o) for o in occurrences))


def generate_examples(spec: TaskSpec, vocabulary: ProbeVocabulary, *, count: int, length: int, segment_size: int,
                      target_length: int, seed: int) -> list[Example]:
    """``count`` examples of ``spec``, a pure function of its arguments (``seed`` seeds the stream).

    Raises:
        ValueError: as :func:`generate_example`, or for ``count < 1``.
    """
    if count < 1:
        raise ValueError(f"`count` must be >= 1, got {count}.")
    rng = random.Random(seed)
    return [generate_example(rng, spec, vocabulary, length=length, segment_size=segment_size,
                             target_length=target_length) for _ in range(count)]
