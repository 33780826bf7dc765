"""What a pretraining run learns from: its recipe (:class:`PretrainRecipe`) and examples (:class:`PretrainExamples`).

Example ``i`` of a run is a pure function of ``(seed, i)``, the tokenized documents and the recipe: it belongs to
optimizer step ``i // examples_per_step``, whose source length the curriculum
(:func:`srformer.training.curriculum.curriculum_length`) sets; a window of that many tokens (less one for
``</s>``) is taken from a document drawn with probability proportional to its length, and turned into a span
corruption or a copy example (:mod:`srformer.data.objectives`) by the objective mix. Nothing is stored per
example, so a run of any length costs no memory, and a resumed run sees exactly the examples an uninterrupted run
would.
"""

from __future__ import annotations

import bisect
import dataclasses
import itertools
import random
from collections.abc import Sequence
from dataclasses import dataclass, field
from typing import Any, overload

from srformer.data.objectives import copy_target, noise_span_counts, passage_target, span_corruption
from srformer.data.sentence_objectives import cued_copy, gap_sentences, marked_copy, sentence_reordering
from srformer.training.curriculum import CURRICULUM_GROWTHS, check_curriculum, curriculum_length
from srformer.training.settings_base import SettingsBase, require_float, require_int

__all__ = ["OBJECTIVES", "SENTENCE_OBJECTIVES", "PretrainExamples", "PretrainRecipe", "parse_objective_mix"]

#: Objective names of :attr:`PretrainRecipe.objective_mix`: T5 span corruption, copy, passage copy (a passage at a
#: random offset), cued copy, PEGASUS gap sentences, sentence reordering and marked copy.
OBJECTIVES: tuple[str, ...] = ("span", "copy", "passage", "cued", "gap", "reorder", "marked")

#: The objectives that need the documents' sentence boundaries.
SENTENCE_OBJECTIVES: tuple[str, ...] = ("cued", "gap", "reorder", "marked")

#: The longest cue of a cued copy example (tokens); the window leaves room for it and its separator.
MAX_CUE = 8

#: Source tokens a sentence objective adds to its window (the cue and its separator; the marker), so that the
#: source stays within the curriculum's length.
SOURCE_EXTRA: dict[str, int] = {"cued": MAX_CUE + 1, "marked": 1}

#: T5's number of sentinel tokens (``<extra_id_0>`` ... ``<extra_id_99>``); more when the input length needs them.
DEFAULT_SENTINELS = 100


def parse_objective_mix(text: str) -> dict[str, float]:
    """``"span=0.5,copy=0.5"`` -> ``{"span": 0.5, "copy": 0.5}`` (weights need not sum to 1; they are normalized).

    Raises:
        ValueError: an item that is not ``NAME=WEIGHT``, an unknown name, a negative or non-numeric weight, or
            all weights zero; the message names ``--objective-mix``.
    """
    mix: dict[str, float] = {}
    for item in filter(None, (part.strip() for part in text.split(","))):
        name, sep, value = item.partition("=")
        name = name.strip()
        if not sep or name not in OBJECTIVES:
            raise ValueError(f"--objective-mix item {item!r}: write NAME=WEIGHT with NAME one of "
                             f"{', '.join(OBJECTIVES)}")
        try:
            weight = float(value)
        except ValueError:
            raise ValueError(f"--objective-mix item {item!r}: the weight {value!r} is not a number") from None
        if weight < 0:
            raise ValueError(f"--objective-mix item {item!r}: weights must be >= 0")
        mix[name] = weight
    if not mix or sum(mix.values()) <= 0:
        raise ValueError(f"--objective-mix {text!r} gives no objective a positive weight (e.g. span=0.5,copy=0.5)")
    return mix


@dataclass
class PretrainRecipe(SettingsBase):
    """The model, tokenizer, objectives and curriculum of a pretraining run (saved as ``pretrain_run.json``).

    Attributes:
        model: a named config of :data:`srformer.models.factory.NAMED_CONFIGS` (random initialisation); ignored
            with ``init_from``.
        max_source_length: the model's input length (tokens, with ``</s>``): the curriculum's final length.
        max_target_length: longest copy target (tokens, with ``</s>``); None = ``max_source_length``.
        vocab_size: size of the Unigram tokenizer trained on the training documents (before the sentinels).
        objective_mix: relative weight per objective of :data:`OBJECTIVES` (normalized; each example draws one).
        noise_density: span corruption's fraction of dropped tokens (T5: 0.15).
        mean_span_length: span corruption's mean dropped-span length (tokens; T5: 3).
        curriculum_start: source length of the first steps (tokens); >= max_source_length disables the curriculum.
        curriculum_hold: fraction of the steps spent at ``curriculum_start``.
        curriculum_end: fraction of the steps by which the full ``max_source_length`` is reached.
        curriculum_growth: ``"doubling"`` or ``"linear"`` (:func:`srformer.training.curriculum.curriculum_length`).
        eval_documents: training-part documents held out of pretraining (and of the tokenizer) to measure
            teacher-forced copy accuracy at the full input length; 0 disables the check.
        eval_every: steps between those measurements (also at the last step).
        data: a description of the documents (file, field, split), recorded only.
        init_from: a directory holding a seq2seq model and its tokenizer (the output of an earlier ``srformer
            pretrain``) to continue from instead of a random ``model`` and a new tokenizer: a second stage with
            other objectives. Its tokenizer must hold the sentinel tokens the objectives use; ``vocab_size`` is then
            not used. None = start from scratch.

    Raises:
        ValueError: a field out of range (naming ``PretrainRecipe.field``).
    """

    model: str = "bart-tiny"
    max_source_length: int = 256
    max_target_length: int | None = None
    vocab_size: int = 4000
    noise_density: float = 0.15
    objective_mix: dict[str, float] = field(default_factory=lambda: {"span": 0.5, "copy": 0.5})
    mean_span_length: float = 3.0
    curriculum_start: int = 8
    curriculum_hold: float = 0.1
    curriculum_end: float = 0.7
    curriculum_growth: str = "doubling"
    data: str = field(default="", compare=False)  # a description only: two runs of other files may be equal
    eval_documents: int = 32
    eval_every: int = 100
    init_from: str | None = None

    def validate(self) -> None:
        super().validate()
        owner = self._owner
        require_int(owner, "max_source_length", self.max_source_length, 4)
        if self.max_target_length is not None:
            require_int(owner, "max_target_length", self.max_target_length, 2)
        require_int(owner, "vocab_size", self.vocab_size, 100)
        require_int(owner, "curriculum_start", self.curriculum_start, 4)
        require_int(owner, "eval_documents", self.eval_documents, 0)
        require_int(owner, "eval_every", self.eval_every, 1)
        require_float(owner, "mean_span_length", self.mean_span_length, minimum=1.0, strict=False)
        if not 0.0 < self.noise_density < 1.0:
            raise ValueError(f"{owner}.noise_density must lie in (0, 1), got {self.noise_density}")
        if self.curriculum_growth not in CURRICULUM_GROWTHS:
            raise ValueError(f"{owner}.curriculum_growth must be one of {', '.join(CURRICULUM_GROWTHS)}, "
                             f"got {self.curriculum_growth!r}")
        if not 0.0 <= self.curriculum_hold <= self.curriculum_end <= 1.0:
            raise ValueError(f"{owner}: need 0 <= curriculum_hold ({self.curriculum_hold}) <= curriculum_end "
                             f"({self.curriculum_end}) <= 1")
        unknown = sorted(set(self.objective_mix) - set(OBJECTIVES))
        if unknown or sum(self.objective_mix.values()) <= 0 or min(self.objective_mix.values()) < 0:
            raise ValueError(f"{owner}.objective_mix needs non-negative weights of {', '.join(OBJECTIVES)} with a "
                             f"positive sum, got {self.objective_mix!r}")

    @property
    def target_length(self) -> int:
        """The longest copy target in tokens, ``</s>`` included."""
        return self.max_target_length or self.max_source_length

    @property
    def sentinel_count(self) -> int:
        """Sentinel tokens the tokenizer gets: T5's 100, or the noise spans of a full-length window if more."""
        return max(DEFAULT_SENTINELS, noise_span_counts(
            self.max_source_length - 1, noise_density=self.noise_density, mean_span_length=self.mean_span_length)[1])

    def check_steps(self, max_steps: int) -> None:
        """Reject a curriculum that does not fit ``max_steps`` (:func:`srformer.training.curriculum.check_curriculum`).

        Raises:
            ValueError: naming the curriculum setting and the fix.
        """
        check_curriculum(max_steps, start=self.curriculum_start, final=self.max_source_length,
                         hold=self.curriculum_hold, ramp=self.curriculum_end - self.curriculum_hold,
                         growth=self.curriculum_growth)

    def source_length(self, step: int, max_steps: int) -> int:
        """The curriculum's source length (tokens, ``</s>`` included) at optimizer step ``step`` (0-based)."""
        return curriculum_length(step, max_steps, start=self.curriculum_start, final=self.max_source_length,
                                 hold=self.curriculum_hold, ramp=self.curriculum_end - self.curriculum_hold,
                                 growth=self.curriculum_growth)

    @property
    def needs_sentences(self) -> bool:
        """True when an objective of the mix works on sentences (:data:`SENTENCE_OBJECTIVES`)."""
        return any(self.objective_mix.get(name, 0) > 0 for name in SENTENCE_OBJECTIVES)

    def to_dict(self) -> dict[str, Any]:
        """The recipe as JSON-ready ``dict``."""
        return dataclasses.asdict(self)


class PretrainExamples(Sequence[dict[str, list[int]]]):
    """The examples of a pretraining run, made on demand: ``input_ids`` and ``labels`` (both end with ``</s>``).

    Args:
        documents: the training documents' token ids (without ``</s>``), at least one non-empty.
        recipe: objectives, lengths and curriculum.
        max_steps: optimizer steps of the run (the curriculum's time axis).
        examples_per_step: examples per optimizer step (batch size x accumulation x processes).
        seed: the example stream (example ``i`` draws from ``random.Random(f"pretrain:{seed}:{i}")``).
        sentinel_ids: ids of ``<extra_id_0>``, ``<extra_id_1>``, ...
        eos_id: id of ``</s>``.
        sentence_starts: per document, the token offsets where its sentences start (increasing; 0 need not be
            listed), aligned with ``documents``; required when the mix holds a sentence objective
            (:data:`SENTENCE_OBJECTIVES`). The cued copy's separator is ``<extra_id_0>``, the gap mask
            ``<extra_id_1>``, the marked copy's marker ``<extra_id_2>``.

    Raises:
        ValueError: no non-empty document; a sentence objective without ``sentence_starts``, or ``sentence_starts``
            of another length than ``documents``; fewer than three sentinel ids for the sentence objectives.
    """

    def __init__(self, documents: Sequence[Sequence[int]], recipe: PretrainRecipe, *, max_steps: int,
                 examples_per_step: int, seed: int, sentinel_ids: Sequence[int], eos_id: int,
                 sentence_starts: Sequence[Sequence[int]] | None = None):
        if sentence_starts is not None and len(sentence_starts) != len(documents):
            raise ValueError(f"sentence_starts has {len(sentence_starts)} entries for {len(documents)} documents")
        if recipe.needs_sentences and sentence_starts is None:
            raise ValueError(f"the objective mix {recipe.objective_mix} holds a sentence objective "
                             f"({', '.join(SENTENCE_OBJECTIVES)}): give sentence_starts")
        if recipe.needs_sentences and len(sentinel_ids) < 3:
            raise ValueError("the sentence objectives need three sentinel ids (separator, gap mask and marker)")
        kept = [index for index, tokens in enumerate(documents) if tokens]
        self.documents = [list(documents[index]) for index in kept]
        self.sentence_starts = ([sorted({0, *sentence_starts[index]}) for index in kept]
                                if sentence_starts is not None else None)
        if not self.documents:
            raise ValueError("no training document has any token; nothing to pretrain on")
        self.recipe = recipe
        self.max_steps = max_steps
        self.examples_per_step = examples_per_step
        self.seed = seed
        self.sentinel_ids = list(sentinel_ids)
        self.eos_id = eos_id
        self._ends = list(itertools.accumulate(len(tokens) for tokens in self.documents))
        names = [name for name in OBJECTIVES if recipe.objective_mix.get(name, 0) > 0]
        total = sum(recipe.objective_mix[name] for name in names)
        self._objectives = names
        self._bounds = list(itertools.accumulate(recipe.objective_mix[name] / total for name in names))

    def __len__(self) -> int:
        return self.max_steps * self.examples_per_step

    @overload
    def __getitem__(self, index: int) -> dict[str, list[int]]: ...

    @overload
    def __getitem__(self, index: slice) -> list[dict[str, list[int]]]: ...

    def __getitem__(self, index):
        if isinstance(index, slice):
            return [self[i] for i in range(*index.indices(len(self)))]
        if index < 0:
            index += len(self)
        if not 0 <= index < len(self):
            raise IndexError(f"example {index} of {len(self)}")
        return self.example(index)[1]

    def objective_of(self, rng: random.Random) -> str:
        """Draw an objective name by the normalized mix."""
        draw = rng.random()
        return self._objectives[min(bisect.bisect_right(self._bounds, draw), len(self._objectives) - 1)]

    def example(self, index: int) -> tuple[str, dict[str, list[int]]]:
        """``(objective, {"input_ids", "labels"})`` of example ``index``."""
        rng = random.Random(f"pretrain:{self.seed}:{index}")
        length = self.recipe.source_length(index // self.examples_per_step, self.max_steps)
        document, start = self.place(rng, length - 1)
        objective = self.objective_of(rng)
        target_length = self.recipe.target_length - 1
        pair: tuple[list[int], list[int]] | None = None
        if objective in SENTENCE_OBJECTIVES:
            size = length - 1 - SOURCE_EXTRA.get(objective, 0)
            sentences = self.sentences(document, start, size) if size >= 2 else []
            if objective == "cued":
                pair = cued_copy(sentences, rng, separator_id=self.sentinel_ids[0], max_target_length=target_length,
                                 max_cue=MAX_CUE)
            elif objective == "marked":
                pair = marked_copy(sentences, rng, marker_id=self.sentinel_ids[2], max_target_length=target_length)
            elif objective == "gap":
                pair = gap_sentences(sentences, mask_id=self.sentinel_ids[1], max_target_length=target_length)
            else:
                pair = sentence_reordering(sentences, rng, max_target_length=target_length)
        window = self.documents[document][start:start + length - 1]
        if objective == "span" and len(window) >= 2:
            pair = span_corruption(window, self.sentinel_ids, rng, noise_density=self.recipe.noise_density,
                                   mean_span_length=self.recipe.mean_span_length)
        if objective == "passage" and window:
            pair = window, passage_target(window, rng, max_target_length=target_length)
        if pair is None:
            objective = "copy"
            pair = window, copy_target(window, rng, max_target_length=target_length)
        source, target = pair
        return objective, {"input_ids": [*source, self.eos_id], "labels": [*target, self.eos_id]}

    def place(self, rng: random.Random, size: int) -> tuple[int, int]:
        """``(document, start)`` of a window of ``size`` tokens: the document is drawn with probability proportional
        to its length, the start uniformly (0 when the document is shorter)."""
        document = bisect.bisect_right(self._ends, rng.randrange(self._ends[-1]))
        return document, rng.randint(0, max(0, len(self.documents[document]) - size))

    def window(self, rng: random.Random, size: int) -> list[int]:
        """``size`` consecutive tokens of one document (all of it when shorter), placed by :meth:`place`."""
        document, start = self.place(rng, size)
        return self.documents[document][start:start + size]

    def sentences(self, document: int, start: int, size: int) -> list[list[int]]:
        """The tokens ``[start, start + size)`` of ``document`` cut at its sentence starts (the first and last pieces
        may be parts of sentences)."""
        assert self.sentence_starts is not None
        tokens = self.documents[document]
        stop = min(start + size, len(tokens))
        starts = self.sentence_starts[document]
        cuts = [start, *starts[bisect.bisect_right(starts, start):bisect.bisect_left(starts, stop)], stop]
        return [tokens[a:b] for a, b in itertools.pairwise(cuts) if b > a]
