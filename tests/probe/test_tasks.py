"""Task generators: determinism by seed, targets recoverable from the document alone, bad input."""

from __future__ import annotations

import pytest

from srformer.probe.tasks import TASKS, ProbeVocabulary, TaskSpec, generate_examples

VOCAB = ProbeVocabulary()
SHAPES = [(64, 8, 4), (100, 16, 3), (512, 32, 4), (40, 40, 2)]  # (length, segment_size, n)


def _schedule_T(n_target: int, length: int, s: int) -> int:
    return max(n_target + 1, -(-length // s))


def _make(task: str, n: int, length: int, s: int, seed: int):
    spec = TaskSpec(task, n)
    return generate_examples(spec, VOCAB, count=5, length=length, segment_size=s,
                             target_length=_schedule_T(spec.target_tokens, length, s), seed=seed)


@pytest.mark.parametrize("task", TASKS)
def test_same_seed_same_examples_other_seed_other_examples(task):
    assert _make(task, 3, 96, 16, seed=7) == _make(task, 3, 96, 16, seed=7)
    assert _make(task, 3, 96, 16, seed=7) != _make(task, 3, 96, 16, seed=8)


def _words(example) -> list[str]:
    return [VOCAB.tokens[i] for i in example.source]


def _marked_values(words: list[str]) -> list[tuple[int, str]]:
    return [(p + 1, words[p + 1]) for p, w in enumerate(words) if w == "<mark>"]


@pytest.mark.parametrize("length,s,n", SHAPES)
@pytest.mark.parametrize("task", TASKS)
def test_target_recovered_from_document(task, length, s, n):
    """Solve every task by reading the document as text, without the generator's bookkeeping."""
    n = min(n, 2) if task == "aggregate" and length < 64 else n
    for example in _make(task, n, length, s, seed=3):
        words = _words(example)
        assert len(words) == length
        target = [VOCAB.tokens[i] for i in example.target]
        if task in ("copy", "reverse"):
            marked = _marked_values(words)
            assert len(marked) == n
            expected = [w for _, w in marked]
            expected = expected if task == "copy" else expected[::-1]
            assert target == expected
            assert [p for p, _ in (marked if task == "copy" else marked[::-1])] == [q[0] for q in example.needed]
        elif task == "recall":
            overlay = [VOCAB.tokens[i] if i >= 0 else None for i in example.overlay]
            facts = {w: (p, overlay[p]) for p, w in enumerate(words) if w.startswith("K")}
            assert len(facts) == min(VOCAB.num_keys, max(n, length // 2))  # one fact per 2 tokens, distinct keys
            assert all(value is not None and value.startswith("v") for _, value in facts.values())
            assert sum(v is not None for v in overlay) == len(facts)  # values only on key positions
            queried = target[0::2]
            assert len(queried) == n and queried == sorted(queried, key=lambda k: int(k[1:]))
            assert target[1::2] == [facts[key][1] for key in queried]
            assert example.scored == tuple(j % 2 == 1 for j in range(2 * n))
            assert [q for q in example.needed if q] == [(facts[key][0],) for key in queried]
        else:
            counts = [sum(w == f"c{c}" for w in words) for c in range(n)]
            assert target == [f"#{c}" for c in counts]
            assert [len(q) for q in example.needed] == counts


def test_copy_places_each_marked_value_in_its_scheduled_segment():
    length, s, n = 256, 16, 8
    T = _schedule_T(n, length, s)
    m = length // s
    for example in _make("copy", n, length, s, seed=1):
        for j, (p,) in enumerate(example.needed):
            assert p // s == min(j * m // T, m - 1)


def test_recall_document_is_filler_and_facts():
    example = _make("recall", 4, 128, 16, seed=0)[0]
    words = _words(example)
    assert sum(w.startswith("K") for w in words) == 128 // 2
    assert all(w.startswith(("w", "K")) for w in words)


@pytest.mark.parametrize("length,stored", [(4, 4), (8, 4), (64, 32), (512, 256), (4096, 256)])
def test_recall_stores_one_fact_per_spacing_between_n_and_num_keys(length, stored):
    example = _make("recall", 4, length, 16, seed=2)[0]
    assert sum(i >= 0 for i in example.overlay) == stored
    spaced = generate_examples(TaskSpec("recall", 4, fact_spacing=8), VOCAB, count=1, length=128, segment_size=16,
                               target_length=9, seed=0)[0]
    assert sum(i >= 0 for i in spaced.overlay) == 16


def test_bad_input_names_the_argument():
    with pytest.raises(ValueError, match="task"):
        TaskSpec("sort", 2)
    with pytest.raises(ValueError, match="`n`"):
        TaskSpec("recall", 0)
    with pytest.raises(ValueError, match="num_keys"):
        _make("recall", VOCAB.num_keys + 1, 4096, 32, seed=0)
    with pytest.raises(ValueError, match="at least"):
        _make("recall", 8, 7, 4, seed=0)
    with pytest.raises(ValueError, match="fact_spacing"):
        TaskSpec("recall", 2, fact_spacing=0)
    with pytest.raises(ValueError, match="segment"):
        _make("copy", 8, 64, 1, seed=0)  # one-token segments cannot hold '<mark> v'
    with pytest.raises(ValueError, match="num_values"):
        ProbeVocabulary(num_values=0)
    with pytest.raises(ValueError, match="count"):
        generate_examples(TaskSpec("copy", 1), VOCAB, count=0, length=8, segment_size=4, target_length=2, seed=0)


def test_vocabulary_round_trip():
    text = "w3 K0 v5 <mark> c1 #2"
    assert VOCAB.decode(VOCAB.encode(text) + [VOCAB.eos_id, VOCAB.ids["w1"]]) == text
    assert len(set(VOCAB.tokens)) == len(VOCAB)
    assert VOCAB.chance("recall") == 1 / VOCAB.num_values
    assert VOCAB.chance("aggregate") == 1 / (VOCAB.max_count + 1)
