"""The probe grid: its settings and its cells of (protocol, task, size, length, variant, segment size, seed).

Protocols:

- ``scratch``: every variant is a T5 initialised with the cell's seed, converted with
  :func:`srformer.convert` and trained for ``steps`` steps with the length curriculum.
- ``convert`` (the paper's protocol, Sec. 4.1): the ``scratch`` full-attention model of the same task,
  size, length and seed is the base; it is converted to every variant (``full`` included, as the
  control that just trains longer) and fine-tuned for ``finetune_steps`` steps at the final length.
  Every variant gets the same fine-tuning budget. With ``finetune_steps = 0`` ("convert+0") every converted model
  is scored straight after conversion: no optimizer step, its record has ``"steps": 0`` and ``"final_loss": None``
  (its :func:`cell_budget` differs from a fine-tuned cell's, so the two are never taken for each other; as for any
  other budget change, the cell is run again in the same folder, so give a zero-step grid its own output).

:class:`ProbeSettings` holds the grid and the budget (the model's :class:`ModelShape` among it); :func:`grid_cells`
lists its :class:`ProbeCell` objects in run order; :func:`cell_shape`, :func:`cell_settings` and :func:`cell_folder`
give a cell's config shape, extra settings and folder; :func:`base_of` the ``scratch`` cell whose model a ``convert``
cell starts from. The module imports no torch (:func:`resolve_device` does, when called): ``srformer probe --help``
builds its options from :class:`ProbeSettings`.
"""

from __future__ import annotations

import json
from dataclasses import dataclass, field, replace
from typing import TYPE_CHECKING

from srformer.core import NAMED_SETTINGS, SEGMENT_FREE, check_variant_settings, settings_suffix
from srformer.probe.tasks import TASKS, ProbeVocabulary, TaskSpec
from srformer.training.settings_base import FineTuning, PeakLearningRate, SeedGrid

if TYPE_CHECKING:
    import torch

PROTOCOLS: tuple[str, ...] = ("scratch", "convert")

#: The default grid's variants: the paper's comparison (``--variants`` takes every name of
#: :data:`srformer.config.NAMED_SETTINGS`).
DEFAULT_VARIANTS: tuple[str, ...] = ("full", "segmented", "srformer")


@dataclass(frozen=True)
class ModelShape:
    """A T5 architecture for the probe (sizes in units; ``d_kv`` is the head_dim).

    The default is t5-tiny's shape (:data:`srformer.models.factory.NAMED_CONFIGS`).
    """

    d_model: int = 128
    d_ff: int = 512
    num_layers: int = 2
    num_decoder_layers: int = 2
    num_heads: int = 4
    d_kv: int = 32


@dataclass
class ProbeSettings(FineTuning, PeakLearningRate, SeedGrid):
    """The grid and the budget (lengths in tokens, steps are optimizer steps).

    The defaults are the grid that ``srformer probe`` runs with no options: every task at k = 128, s = 8
    (16 segments), recall with 4 and 16 queried facts, the paper's three variants, both protocols, 1,000 steps
    per scratch cell: 30 cells, under 30 minutes on 2 CPU cores with two workers (docs/probe.md, "Default grid").

    Inherited (:mod:`srformer.training.settings_base`): ``batch_size``, ``progress``, ``finetune_steps`` (of a
    ``convert`` cell; 0 scores the converted model without fine-tuning), ``finetune_learning_rate``
    (:class:`~srformer.training.settings_base.FineTuning`);
    ``learning_rate`` (of a ``scratch`` cell, :class:`~srformer.training.settings_base.PeakLearningRate`); ``seeds``
    (model initialisation and data-stream seeds, :class:`~srformer.training.settings_base.SeedGrid`).

    Attributes:
        tasks: task names (:data:`srformer.probe.tasks.TASKS`).
        recall_sizes: ``n`` values of ``recall`` (the capacity curve).
        size: ``n`` of ``copy``, ``reverse`` and ``aggregate``.
        lengths: document lengths ``k``.
        segment_sizes: ``s`` values (segment-free variants run once).
        variants: names of :data:`srformer.config.NAMED_SETTINGS`, as ``srformer compare`` takes them (default
            :data:`DEFAULT_VARIANTS`).
        protocols: :data:`PROTOCOLS` to run.
        steps: training steps of a ``scratch`` cell.
        curriculum_start, curriculum_hold, curriculum_ramp: see :class:`srformer.probe.training.TrainSettings`.
        min_curriculum_segments: the ``scratch`` curriculum's documents hold at least this many segments of the
            cell's shape (:func:`cell_shape`: a segment-free variant gets the grid's smallest segment size, so every
            variant of a problem and segment size trains on the same documents), capped at the cell's length; 1 = no
            floor (the behaviour before the setting: at s = 8 the first half of training then has one segment and
            no recurrent term). A saved record without it counts as 1 (:func:`cell_budget`).
        eval_examples: held-out examples per cell (their own seeded stream).
        diagnostics_every: measure the recurrent term of cells with SRformer layers every this many training
            steps and at the last one (:func:`srformer.probe.training.train_model`); 0 disables. Not part of
            :func:`cell_budget` (it does not change the training), so saved cells stay valid.
        shape: the T5 architecture.
        vocabulary: the probe vocabulary.
        workers: cells trained at once, each in its own process with ``cpu_count // workers`` torch threads
            (at least 1); 0 = one per available CPU core on the CPU, 1 on CUDA. A ``convert`` cell starts once the
            ``scratch`` full-attention base of its problem is saved. Not part of :func:`cell_budget`.
        device: ``"auto"`` (CUDA when available, else the CPU), ``"cpu"``, ``"cuda"`` or ``"cuda:N"``. Not part
            of :func:`cell_budget`.
        variant_settings: extra :class:`~srformer.config.SRformerConfig` settings per named setting of
            ``variants`` (``{"window": {"window_size": 96}}``; ``srformer probe --setting``); they win over the named
            setting's own values and are recorded with every cell.
    """

    tasks: tuple[str, ...] = TASKS
    recall_sizes: tuple[int, ...] = (4, 16)
    size: int = 4
    lengths: tuple[int, ...] = (128,)
    segment_sizes: tuple[int, ...] = (8,)
    variants: tuple[str, ...] = DEFAULT_VARIANTS
    protocols: tuple[str, ...] = PROTOCOLS
    steps: int = 1000
    finetune_steps: int = 100
    batch_size: int = 32
    learning_rate: float = 1e-3
    curriculum_start: int = 8
    curriculum_hold: float = 0.5
    curriculum_ramp: float = 0.3
    min_curriculum_segments: int = 2
    eval_examples: int = 256
    diagnostics_every: int = 100
    shape: ModelShape = field(default_factory=ModelShape)
    vocabulary: ProbeVocabulary = field(default_factory=ProbeVocabulary)
    workers: int = 0
    device: str = "auto"
    variant_settings: dict[str, dict] = field(default_factory=dict)

    def validate(self) -> None:
        super().validate()
        unknown = [t for t in self.tasks if t not in TASKS]
        if unknown:
            raise ValueError(f"Unknown probe tasks {unknown}: choose from {', '.join(TASKS)}.")
        names = [n for n in self.variants if n not in NAMED_SETTINGS]
        if names:
            raise ValueError(f"Unknown variant names {names}: choose from {', '.join(NAMED_SETTINGS)}.")
        protocols = [p for p in self.protocols if p not in PROTOCOLS]
        if protocols:
            raise ValueError(f"Unknown protocols {protocols}: choose from {', '.join(PROTOCOLS)}.")
        for name in ("tasks", "variants", "protocols", "lengths", "segment_sizes"):
            if not getattr(self, name):
                raise ValueError(f"`{name}` is empty: give at least one value.")
        if "recall" in self.tasks and not self.recall_sizes:
            raise ValueError("`recall_sizes` is empty: give at least one recall size.")
        for name in ("steps", "eval_examples", "size", "min_curriculum_segments"):
            if getattr(self, name) < 1:
                raise ValueError(f"`{name}` must be >= 1, got {getattr(self, name)}.")
        if self.diagnostics_every < 0:
            raise ValueError(f"`diagnostics_every` must be >= 0 (0 disables), got {self.diagnostics_every}.")
        if self.workers < 0:
            raise ValueError(f"`workers` must be >= 0 (0 = one per CPU core), got {self.workers}.")
        if self.device != "auto":  # always valid; resolving it imports torch, which ``srformer probe --help`` avoids
            resolve_device(self.device)
        if any(s < 1 for s in self.segment_sizes) or any(k < 2 for k in self.lengths):
            raise ValueError("segment sizes must be >= 1 and lengths >= 2 tokens.")
        cells = grid_cells(self)
        check_variant_settings(self.variant_settings, self.variants,
                               lambda name: {cell_shape(c, self) for c in cells if c.name == name})


@dataclass(frozen=True)
class ProbeCell:
    """One training run: a named setting on one task instance, under one protocol."""

    protocol: str
    task: str
    n: int
    length: int
    name: str
    segment_size: int | None
    seed: int

    @property
    def problem(self) -> str:
        return f"{self.task}-n{self.n}-k{self.length}"

    @property
    def key(self) -> str:
        size = "" if self.segment_size is None else f"-s{self.segment_size}"
        return f"{self.protocol}/{self.problem}/{self.name}{size}-seed{self.seed}"


def schedule_length(spec: TaskSpec, length: int, segment_size: int) -> int:
    """The schedule's ``T`` for a cell: the target length with ``</s>``, at least the number of segments
    ``ceil(k / s)`` so that every segment is some step's segment."""
    return max(spec.target_tokens + 1, -(-length // segment_size))


def grid_cells(settings: ProbeSettings) -> list[ProbeCell]:
    """Every cell in run order: problems outermost; within a problem ``scratch`` before ``convert``
    (whose base is the ``scratch`` full model), and ``full`` first."""
    names = sorted(settings.variants, key=lambda n: n != "full")
    cells = []
    for task in settings.tasks:
        sizes = settings.recall_sizes if task == "recall" else (settings.size,)
        for n in sizes:
            for length in settings.lengths:
                for seed in settings.seeds:
                    for protocol in PROTOCOLS:
                        if protocol not in settings.protocols:
                            continue
                        for name in names:
                            for s in ([None] if name in SEGMENT_FREE else settings.segment_sizes):
                                cells.append(ProbeCell(protocol, task, n, length, name, s, seed))
    return list(dict.fromkeys(cells))


def cell_shape(cell: ProbeCell, settings: ProbeSettings) -> tuple[int, int]:
    """``(segment_size, target_length)`` of a cell's config in tokens: a segment-free cell gets the smallest segment
    size; ``T`` is the largest :func:`schedule_length` over the segment sizes (one ``T`` per problem)."""
    spec = TaskSpec(cell.task, cell.n)
    return (cell.segment_size or min(settings.segment_sizes),
            max(schedule_length(spec, cell.length, s) for s in settings.segment_sizes))


def cell_settings(cell: ProbeCell, settings: ProbeSettings) -> dict:
    """What a cell's result depends on in its named setting's extra settings: ``{"settings": ...}``, plus the
    ``full`` base's as ``base_settings`` for a ``convert`` cell when it has any (kept out when empty, so that a
    record written before the option existed still matches)."""
    own = {"settings": settings.variant_settings.get(cell.name, {})}
    base = settings.variant_settings.get("full", {})
    if cell.protocol == "convert" and base:
        own["base_settings"] = base
    return json.loads(json.dumps(own))


def cell_folder(cell: ProbeCell, settings: ProbeSettings) -> str:
    """The folder of ``cell`` under ``cells/``: its key, followed by :func:`~srformer.config.settings_suffix` of
    its extra settings (:func:`cell_settings`; nothing when none, the folder of a grid without ``--setting``)."""
    extra = cell_settings(cell, settings)
    return cell.key + settings_suffix(extra["settings"], extra.get("base_settings"))


def base_of(cell: ProbeCell) -> ProbeCell:
    """The ``scratch`` full-attention cell whose model is the base of ``cell``'s ``convert`` protocol."""
    return replace(cell, protocol="scratch", name="full", segment_size=None)


def resolve_device(device: str) -> torch.device:
    """The torch device of ``ProbeSettings.device``: ``"auto"`` is CUDA when available, else the CPU.

    Raises:
        ValueError: for a name torch does not know, or CUDA asked for where none is available.
    """
    import torch  # here, not at the top: the parser of ``srformer probe`` imports this module

    if device == "auto":
        return torch.device("cuda" if torch.cuda.is_available() else "cpu")
    try:
        resolved = torch.device(device)
    except RuntimeError as error:
        raise ValueError(f"`device` {device!r} is not a torch device: give auto, cpu, cuda or cuda:N.") from error
    if resolved.type not in ("cpu", "cuda"):
        raise ValueError(f"`device` {device!r}: the probe runs on cpu or cuda.")
    if resolved.type == "cuda" and not torch.cuda.is_available():
        raise ValueError(f"`device` {device!r}: CUDA is not available here; give --device cpu (or auto).")
    return resolved
