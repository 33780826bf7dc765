"""What a probe cell's saved result depends on besides its key: the training settings of its protocol and its budget.

A saved cell is reused only when its recorded budget (:func:`saved_budget` of it) equals :func:`cell_budget` of the
grid's settings; :func:`train_settings` gives the :class:`~srformer.probe.training.TrainSettings` a cell trains with.
"""

from __future__ import annotations

import json
from dataclasses import asdict

from srformer.probe.grid import ProbeSettings
from srformer.probe.training import TrainSettings


def train_settings(settings: ProbeSettings, protocol: str) -> TrainSettings:
    """The training settings of a ``protocol`` cell: ``steps`` with the warm-up and curriculum of ``settings`` for
    ``scratch``, ``finetune_steps`` at the final length for ``convert``."""
    if protocol == "scratch":
        return TrainSettings(steps=settings.steps, batch_size=settings.batch_size,
                             learning_rate=settings.learning_rate, warmup=min(100, settings.steps // 10),
                             curriculum_start=settings.curriculum_start, curriculum_hold=settings.curriculum_hold,
                             curriculum_ramp=settings.curriculum_ramp,
                             min_curriculum_segments=settings.min_curriculum_segments)
    return TrainSettings(steps=settings.finetune_steps, batch_size=settings.batch_size,
                         learning_rate=settings.finetune_learning_rate, warmup=min(50, settings.finetune_steps // 10),
                         curriculum_start=0, curriculum_ramp=0.0)


def cell_budget(settings: ProbeSettings, protocol: str) -> dict:
    """What a cell's result depends on besides its key: training budget, evaluation size, model shape,
    vocabulary and every segment size (they set ``T``). A saved cell with another budget is re-run; a
    ``convert`` cell also records its base's budget. A saved budget whose training settings lack
    ``min_curriculum_segments`` was made before the setting existed, without a floor: it is read as 1
    (:func:`saved_budget`), so it matches ``min_curriculum_segments=1`` only."""
    budget = {
        "train": asdict(train_settings(settings, protocol)), "eval_examples": settings.eval_examples,
        "shape": asdict(settings.shape), "vocabulary": asdict(settings.vocabulary),
        "segment_sizes": list(settings.segment_sizes),
    }
    if protocol == "convert":
        budget["base"] = cell_budget(settings, "scratch")
    return budget


def saved_budget(budget: dict | None) -> dict | None:
    """A saved record's budget with the defaults of settings added after it was written: a ``train`` entry (its
    own, and its base's under ``base``) without ``min_curriculum_segments`` gets 1, the behaviour it was trained
    with. Returns a new dict (None for None)."""
    if budget is None:
        return None
    budget = json.loads(json.dumps(budget))
    for part in (budget, budget.get("base")):
        if isinstance(part, dict) and isinstance(part.get("train"), dict):
            part["train"].setdefault("min_curriculum_segments", 1)
    return budget
