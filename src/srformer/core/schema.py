"""The mechanism schema: what one registry entry says about a cross-attention mechanism.

A :class:`Mechanism` names the mechanism's module, state, settings class and float64 reference by import path and
states its :class:`Capabilities` and costs; :mod:`srformer.core.mechanisms` holds the entries of the mechanisms
the package ships and :mod:`srformer.core.registry` the registry built from them.

Nothing here imports a mechanism: :meth:`Mechanism.module_class`, :meth:`Mechanism.state_class`,
:meth:`Mechanism.settings_class` and :attr:`Mechanism.reference` import what they name (``importlib``) when they are
called.
"""

from __future__ import annotations

import importlib
from collections.abc import Callable, Mapping
from dataclasses import dataclass, field
from typing import TYPE_CHECKING, Any

from srformer.core.settings import MechanismSettings

if TYPE_CHECKING:
    from torch import nn

__all__ = [
    "ATTENTION_WEIGHTS", "WEIGHTS_OF_OUTPUT", "WEIGHTS_OF_SEGMENT", "WEIGHTS_POOLED", "Capabilities", "Mechanism",
    "Reference", "import_path",
]

#: The common signature of the float64 references in :mod:`srformer.attention.naive`.
Reference = Callable[..., Any]

#: :attr:`Capabilities.attention_weights`: the weights are the output's linear map from the values, ``O = A V``
#: (every term of the output reads the values through ``A`` and nothing else).
WEIGHTS_OF_OUTPUT = "output"
#: :attr:`Capabilities.attention_weights`: the weights are the softmax over the scheduled segment (``segmented``'s
#: weights) and the output adds a term of its own, ``O = g A V + R``: ``g`` a factor per query in (0, 1] and ``R`` a
#: term, neither depending on ``A`` (``srformer``'s ``O_R`` and its Eq. 10 mix; ``srformer-gated``'s memory).
WEIGHTS_OF_SEGMENT = "segment"
#: :attr:`Capabilities.attention_weights`: a distribution over the encoder positions (rows sum to 1) that is not
#: the output's map from the values (``fastformer`` pools keys and values with it; ``compressed`` convolves the
#: rows it spreads).
WEIGHTS_POOLED = "pooled"
#: Every value of :attr:`Capabilities.attention_weights`.
ATTENTION_WEIGHTS: tuple[str, ...] = (WEIGHTS_OF_OUTPUT, WEIGHTS_OF_SEGMENT, WEIGHTS_POOLED)


@dataclass(frozen=True)
class Capabilities:
    """What a mechanism can do and what its output is made of.

    Attributes:
        segment_free: ``segment_size`` and the schedule do not change it (no segments).
        lean_layout: its generation state may use the lean layout (``lean_cache=True``).
        state_grows_with_input: its standard-layout generation state holds encoder-length tensors
            (projected keys/values), so a lean layout, where offered, saves memory.
        training_time_saving: its parallel (training) path costs less than full attention's
            ``O(q*k*d)`` per head: it never forms a ``q x k`` score matrix.
        has_softmax_part: its output has a softmax attention term (``O_S`` or a baseline's softmax).
        recurrent_term: its output has a term carried across segments by a recurrence (the RAF).
        global_term: its output reads a fixed-size summary of encoder positions outside the attended
            segment (``P_i`` / ``K^T V``, global tokens, linear attention's sums).
        attention_weights: what ``output_attentions=True`` returns, one of :data:`ATTENTION_WEIGHTS`:
            :data:`WEIGHTS_OF_OUTPUT`, :data:`WEIGHTS_OF_SEGMENT` or :data:`WEIGHTS_POOLED`
            (``srformer/attention/weights.py`` documents each mechanism's).
        selects_keys: each query reads, per head, a budget of keys it chooses by their content (the top keys,
            blocks or leaves); its settings class gives the longest input read whole
            (:meth:`~srformer.core.settings.MechanismSettings.whole_input_length`), on which it is full attention.

    Raises:
        ValueError: for an ``attention_weights`` outside :data:`ATTENTION_WEIGHTS`.
    """

    segment_free: bool
    lean_layout: bool
    state_grows_with_input: bool
    training_time_saving: bool
    has_softmax_part: bool
    recurrent_term: bool
    global_term: bool
    attention_weights: str = WEIGHTS_OF_OUTPUT
    selects_keys: bool = False

    def __post_init__(self) -> None:
        if self.attention_weights not in ATTENTION_WEIGHTS:
            raise ValueError(
                f"`attention_weights` must be one of {', '.join(ATTENTION_WEIGHTS)}, got {self.attention_weights!r}."
            )


@dataclass(frozen=True)
class Mechanism:
    """One cross-attention variant.

    Attributes:
        name: the variant name (``SRformerConfig.variant``), written here only: the module class reads it from
            this entry (:meth:`srformer.attention.base.CrossAttentionMechanism.variant_names`).
        doc: one line saying what it computes.
        citation: the paper (and equations) it implements.
        module: import path ``package.module.Class`` of its ``nn.Module``, or None for ``full``, which
            keeps the model's own attention module.
        state: import path of the class of its generation state in the standard layout (a subclass of
            :class:`~srformer.attention.state.CrossAttentionState`, built by the module's ``init_state``
            with the default settings), or None for ``full`` (transformers' own cache).
        lean_state: import path of the class of its lean-layout state (built by the module's ``lean``), or
            None where :attr:`Capabilities.lean_layout` is False.
        settings: import path of the class of its own settings (a frozen dataclass subclassing
            :class:`~srformer.core.settings.MechanismSettings`, held as ``SRformerConfig.settings``), or None
            for a mechanism without settings of its own (the config then holds a plain ``MechanismSettings()``).
        reference_path: import path ``srformer.attention.naive.<family>.<function>`` (or its re-export from
            :mod:`srformer.attention.naive`) of its float64 per-query reference, with the references' common
            signature; :attr:`reference` imports it.
        capabilities: see :class:`Capabilities`.
        step_cost: work of one decoder step per head (standard layout), as a formula in ``k``
            (encoder tokens), ``s`` (segment size), ``m`` (segments) and ``d`` (head_dim), and the
            mechanism's own settings (``b`` buckets, ``R`` hash rounds, ``w`` chunk or cluster size, ``c`` clusters).
        build_cost: work of building the per-sequence state per head, once per sequence.
        state_size: numbers held per head by the standard-layout generation state.
        ablations: the ``SRformerConfig.ablation`` values that modify it, with one line each.
        named_settings: further names for ``srformer compare``/``probe``/``named_config`` (an ablation,
            a mix), each with its settings on top of ``variant=name``.
        table1_row: its row in the paper's Table 1, or None (the paper's baselines have none).
    """

    name: str
    doc: str
    citation: str
    module: str | None
    state: str | None
    lean_state: str | None
    reference_path: str
    capabilities: Capabilities
    step_cost: str
    build_cost: str
    state_size: str
    settings: str | None = None
    ablations: Mapping[str, str] = field(default_factory=dict)
    named_settings: Mapping[str, Mapping[str, Any]] = field(default_factory=dict)
    table1_row: str | None = None

    def module_class(self) -> type[nn.Module]:
        """The class named by :attr:`module` (a subclass of
        :class:`~srformer.attention.base.CrossAttentionMechanism`).

        Raises:
            ValueError: for ``full`` (no module of its own).
        """
        if self.module is None:
            raise ValueError(f"The {self.name!r} variant keeps the model's own attention; it has no SRformer module.")
        return import_path(self.module)

    def state_class(self, lean: bool = False) -> type:
        """The class named by :attr:`state` (``lean=False``) or :attr:`lean_state` (``lean=True``).

        Raises:
            ValueError: where the entry names none (``full``; ``lean=True`` without a lean layout).
        """
        path = self.lean_state if lean else self.state
        if path is None:
            layout = "lean" if lean else "standard"
            raise ValueError(f"The {self.name!r} variant has no SRformer state in the {layout} layout.")
        return import_path(path)

    @property
    def reference(self) -> Reference:
        """The float64 reference named by :attr:`reference_path` (imported on first use)."""
        return import_path(self.reference_path)

    def settings_class(self) -> type[MechanismSettings]:
        """The class named by :attr:`settings`, or :class:`~srformer.core.settings.MechanismSettings` (no
        settings) where it is None."""
        return MechanismSettings if self.settings is None else import_path(self.settings)


def import_path(path: str) -> Any:
    """The attribute named by the import path ``package.module.Name`` (its module imported on first use)."""
    module_name, _, name = path.rpartition(".")
    return getattr(importlib.import_module(module_name), name)
