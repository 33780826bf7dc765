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
- ``recall``: one fact per key (``num_keys`` facts) at random positions in the filler; a fact is one
  token ``K{q}=v{x}`` that states "key ``q`` has value ``x``". The target queries ``n`` random keys, in
  increasing key order: ``K{a} v_a K{b} v_b ...``. The key tokens of the target are the queries (given to
  the decoder, never scored); only the value positions are scored; each needs the position of its fact.
  Every key is stored but only ``n`` are asked, so the encoder cannot know which facts matter.
- ``aggregate``: ``n`` classes; class ``c`` occurs a uniform random number of times in
  ``[0, max_count]`` at random positions; the target is one count token per class, in class order.
  A count needs every occurrence of its class (a count of 0 needs the whole document to check
  absence and is always off-segment).

Why a synthetic vocabulary and one-token facts: a tiny T5 trained from scratch did not learn
associative recall in real-text filler at the CPU budget (measured: chance after 2.5k steps on 1.8k
examples, 23% after 24k steps on 17k examples, copying the right words bound to the wrong keys).
With two-token facts ``K_q v`` in synthetic filler it plateaued the same way (about 30% after 400
steps at k=64, i.e. one of the n=4 values present, not the one bound to the key): binding a value to
its neighbouring key is an encoder skill (a previous-token head) that is the same for every
cross-attention variant. A one-token fact removes it, so the probe measures what differs between
variants: finding one position among ``k`` by content. With only the ``n`` queried facts in the
document, segmented attention solved recall off-segment (the full-attention encoder copied the few
facts into every segment); storing a fact for every key defeats that. See docs/probe.md.
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
    ``c*``, counts ``#0 .. #max_count`` and facts ``K{q}=v{x}``.

    Args:
        num_filler: filler tokens (what the document is made of).
        num_keys: key tokens; the largest ``recall`` size that can be generated. There are
            ``num_keys * num_values`` fact tokens ``K{q}=v{x}``.
        num_values: value tokens; chance accuracy on a value is ``1 / num_values``.
        num_classes: class tokens; the largest ``aggregate`` size.
        max_count: largest count of one class in ``aggregate`` (chance ``1 / (max_count + 1)``).

    Raises:
        ValueError: if a size is not a positive integer.
    """

    num_filler: int = 64
    num_keys: int = 32
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
            *(f"K{q}=v{x}" for q in range(self.num_keys) for x in range(self.num_values)),
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

    def fact_id(self, key: int, value: int) -> int:
        """Id of the fact token ``K{key}=v{value}`` (``key``, ``value`` are indices, not ids)."""
        return self.ids["K0=v0"] + key * self.num_values + value

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
        n: the task's size: marked tokens (copy, reverse), facts (recall), classes (aggregate).

    Raises:
        ValueError: for an unknown task or a non-positive ``n``.
    """

    task: str
    n: int

    def __post_init__(self) -> None:
        if self.task not in TASKS:
            raise ValueError(f"Unknown probe task {self.task!r}: `task` must be one of {', '.join(TASKS)}.")
        if isinstance(self.n, bool) or not isinstance(self.n, int) or self.n < 1:
            raise ValueError(f"The task size `n` must be a positive integer, got {self.n!r}.")

    @property
    def target_tokens(self) -> int:
        """Target length in tokens, without the final ``</s>``."""
        return 2 * self.n if self.task == "recall" else self.n

    def check(self, vocabulary: ProbeVocabulary, length: int) -> None:
        """Raise ``ValueError`` if documents of ``length`` tokens cannot hold this task."""
        if self.task == "recall" and self.n > vocabulary.num_keys:
            raise ValueError(f"recall with n={self.n} needs n <= num_keys={vocabulary.num_keys}; raise num_keys.")
        if self.task == "aggregate" and self.n > vocabulary.num_classes:
            raise ValueError(
                f"aggregate with n={self.n} needs n <= num_classes={vocabulary.num_classes}; raise num_classes."
            )
        needed = {"copy": 2 * self.n, "reverse": 2 * self.n, "recall": vocabulary.num_keys,
                  "aggregate": self.n * vocabulary.max_count}[self.task]
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
    """

    source: tuple[int, ...]
    target: tuple[int, ...]
    needed: tuple[tuple[int, ...], ...]
    scored: tuple[bool, ...] = field(default=())

    def __post_init__(self) -> None:
        if not self.scored:
            object.__setattr__(self, "scored", tuple(True for _ in self.target))


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
        positions = rng.sample(range(length), vocabulary.num_keys)  # positions[q]: the fact of key q
        values = rng.choices(range(vocabulary.num_values), k=vocabulary.num_keys)
        for key, (position, value) in enumerate(zip(positions, values, strict=True)):
            source[position] = vocabulary.fact_id(key, value)
        target, needed, scored = [], [], []
        for key in sorted(rng.sample(range(vocabulary.num_keys), spec.n)):
            target += [vocabulary.key_ids[key], vocabulary.value_ids[values[key]]]
            needed += [(), (positions[key],)]
            scored += [False, True]
        return Example(tuple(source), tuple(target), tuple(needed), tuple(scored))
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
