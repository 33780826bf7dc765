"""The settings of the ACLSum main job (``srformer aclsum``, :mod:`srformer.experiments.aclsum`).

Light (no torch or transformers), so that ``srformer aclsum --help`` builds its options from the dataclass; also
public from :mod:`srformer.experiments.aclsum`.
"""

from __future__ import annotations

from dataclasses import dataclass

from srformer.core.registry import TABLE1_VARIANTS
from srformer.training.settings_base import BaseModelBudget, Decoding, Seed, SummaryShapes

__all__ = ["ComparisonSettings"]


@dataclass
class ComparisonSettings(BaseModelBudget, SummaryShapes, Decoding, Seed):
    """Budget and shapes of the ACLSum comparison (defaults: about 20 minutes on 2 CPU cores).

    Lengths are in tokens, times in seconds, steps are optimizer steps of ``batch_size`` examples. The fields shared
    with ``srformer compare`` and training are declared in :mod:`srformer.training.settings_base`
    (:class:`~srformer.training.settings_base.BaseModelBudget`, :class:`~srformer.training.settings_base.SummaryShapes`,
    :class:`~srformer.training.settings_base.Decoding`, :class:`~srformer.training.settings_base.Seed`, the seed of
    every stage); here only this job's defaults differ.

    Attributes:
        variants: the cross-attention variants, each fine-tuned from the same base (the paper's main rows: full,
            segmented, srformer).
        segment_size: segment size ``s`` in tokens.
        max_test_examples: score the first N test documents (None: all).
    """

    variants: tuple[str, ...] = TABLE1_VARIANTS
    segment_size: int = 32
    target_length: int = 128
    max_source_length: int = 512
    max_target_length: int = 128
    base_steps: int = 500
    finetune_steps: int = 200
    base_learning_rate: float = 1e-3
    max_new_tokens: int = 128
    max_test_examples: int | None = None
