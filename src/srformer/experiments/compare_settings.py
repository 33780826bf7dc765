"""The settings of ``srformer compare`` (:mod:`srformer.experiments.compare`): the grid, the budget and the shapes
of one comparison (:class:`CompareSettings`), and the grid's cells (:class:`Cell`, :func:`grid_cells`).

Light (no torch or transformers), so that ``srformer compare --help`` builds its options from the dataclass; also
public from :mod:`srformer.experiments.compare`.
"""

from __future__ import annotations

from dataclasses import dataclass, field

from srformer.core import NAMED_SETTINGS, SEGMENT_FREE, VARIANTS, check_variant_settings
from srformer.models.named_configs import NAMED_CONFIGS
from srformer.training.settings_base import BaseModelBudget, Decoding, SeedGrid, SummaryShapes

__all__ = ["REFERENCE", "Cell", "CompareSettings", "grid_cells"]

REFERENCE = "srformer"
"""The setting the ablations are compared with, per document (and by default every other setting too)."""


@dataclass
class CompareSettings(BaseModelBudget, SummaryShapes, Decoding, SeedGrid):
    """The grid, the budget and the shapes of one comparison.

    Lengths are in tokens, steps are optimizer steps of ``batch_size`` pairs. The defaults are the
    CPU budget used for the real-data tables of docs/results.md (``k/T = 8`` as in the paper's Figure 4,
    where k = 1024 and T = 128: segment size 8 gives exactly T segments).

    Inherited (:mod:`srformer.training.settings_base`): ``model``, ``base_steps`` (0 = use ``model`` as is),
    ``base_learning_rate``, ``finetune_steps``, ``finetune_learning_rate``, ``batch_size``, ``progress``
    (:class:`~srformer.training.settings_base.BaseModelBudget`); ``target_length``, ``max_source_length``,
    ``max_target_length``, ``vocab_size`` (:class:`~srformer.training.settings_base.SummaryShapes`); ``num_beams``,
    ``max_new_tokens``, ``eval_batch_size`` (:class:`~srformer.training.settings_base.Decoding`); ``seeds``, the
    fine-tuning seeds: every cell runs once per seed (:class:`~srformer.training.settings_base.SeedGrid`).

    Attributes:
        variants: named settings run at every segment size (segment-free ones once); default: every
            registered variant (:mod:`srformer.core.registry`).
        segment_sizes: segment sizes ``s`` in tokens.
        ablations: named settings run only at ``ablation_segment_size`` (Table 3); default: every named
            setting that is not a variant: the ablations I-IV and the settings beyond the paper
            (``srformer-sigma``, ``srformer-two-sided``, ``block-topk-b4``, ``quest-tree``, ``knn-4``, ...), less
            those in ``variants``. ``--ablations`` with no name runs none.
        ablation_segment_size: segment size of the ablations; None = the largest of ``segment_sizes``.
        no_repeat_ngram_size: decoding forbids repeating an n-gram of this size (0 = off). Default
            3, the usual summarization setting (e.g. BART's CNN/DM config): small models trained
            briefly otherwise loop ("the new new new ..."), which measures the loop, not the attention.
        variant_settings: extra :class:`~srformer.config.SRformerConfig` settings per named setting of the grid
            (``{"window": {"window_size": 96}}``; ``srformer compare --setting``); they win over the named
            setting's own values and are recorded with every cell.
        reference: the setting of the grid every other one and the lead-3 row are paired with, per document, in
            the variants table (``srformer compare --reference``; e.g. ``full`` for each setting's gap to full
            attention). The ablations are always paired with ``srformer`` too.
    """

    variants: tuple[str, ...] = VARIANTS
    segment_sizes: tuple[int, ...] = (8, 16, 64)
    ablations: tuple[str, ...] = tuple(name for name in NAMED_SETTINGS if name not in VARIANTS)
    ablation_segment_size: int | None = None
    seeds: tuple[int, ...] = (0, 1)  # the default of this grid (SeedGrid's is one seed)
    source_prefix: str = ""
    no_repeat_ngram_size: int = 3
    base_seed: int = 0
    data: str = ""
    variant_settings: dict[str, dict] = field(default_factory=dict)
    reference: str = REFERENCE

    def validate(self) -> None:
        super().validate()
        # the default pairs with srformer when the grid runs it (and with nothing otherwise); a reference given on
        # purpose must be run by the grid
        if self.reference != REFERENCE and self.reference not in self.variants:
            raise ValueError(f"reference {self.reference!r} is not run by this grid: give one of its variants "
                             f"({', '.join(self.variants)}) to --reference")
        unknown = [n for n in (*self.variants, *self.ablations) if n not in NAMED_SETTINGS]
        if unknown:
            raise ValueError(f"Unknown variant names {unknown}: choose from {', '.join(NAMED_SETTINGS)}.")
        if not self.variants and not self.ablations:
            raise ValueError("The grid is empty: give at least one name in `variants` or `ablations`.")
        if not self.segment_sizes or any(s < 1 for s in self.segment_sizes):
            raise ValueError(f"`segment_sizes` must be positive token counts, got {self.segment_sizes!r}.")
        if self.base_steps == 0 and self.model in NAMED_CONFIGS:
            raise ValueError(
                f"base_steps=0 uses `model` as the trained base, but {self.model!r} is a randomly initialised "
                "named config: give a checkpoint or hub id (e.g. t5-small), or base_steps > 0."
            )
        cells = grid_cells(self)
        check_variant_settings(
            self.variant_settings, list(dict.fromkeys(c.name for c in cells)),
            lambda name: {(c.segment_size or min(self.segment_sizes), self.target_length)
                          for c in cells if c.name == name},
        )

    @property
    def ablation_size(self) -> int:
        return self.ablation_segment_size or max(self.segment_sizes)


@dataclass(frozen=True)
class Cell:
    """One fine-tuning run of the grid: a named setting at a segment size (None if segment-free) and seed."""

    name: str
    segment_size: int | None
    seed: int

    @property
    def key(self) -> str:
        size = "" if self.segment_size is None else f"-s{self.segment_size}"
        return f"{self.name}{size}-seed{self.seed}"

    @property
    def group(self) -> tuple[str, int | None]:
        return self.name, self.segment_size


def grid_cells(settings: CompareSettings) -> list[Cell]:
    """Every cell of the grid, in run order (seed-major, so a partial run already has one seed of everything)."""
    groups: list[tuple[str, int | None]] = []
    for name in settings.variants:
        if name in SEGMENT_FREE:
            groups.append((name, None))
        else:
            groups.extend((name, s) for s in settings.segment_sizes)
    if settings.ablations:
        for name in (REFERENCE, *settings.ablations):
            groups.append((name, settings.ablation_size))
    unique = list(dict.fromkeys(groups))
    return [Cell(name, size, seed) for seed in settings.seeds for name, size in unique]
