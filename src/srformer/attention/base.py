"""The base class of every cross-attention mechanism: what the converted decoder layers call.

A mechanism is an ``nn.Module`` built as ``Mechanism(config, head_dim, scale)`` for one decoder layer. It turns
the layer's projected encoder keys and values into a per-sequence state once (:meth:`CrossAttentionMechanism.
init_state`), then reads it for decoder queries: all positions at once in training and teacher forcing
(:meth:`~CrossAttentionMechanism.forward`), or one position per generation step
(:meth:`~CrossAttentionMechanism.step`). :meth:`~CrossAttentionMechanism.lean` gives the state's lean layout
where the mechanism offers one (``lean_cache=True``), and :meth:`~CrossAttentionMechanism.initialize_parameters`
the initial values of its own parameters (:mod:`srformer.attention.initialization`).

Two families derive from it: :class:`~srformer.attention.segmented.SegmentedCrossAttention` (the segment
schedule: ``segmented``, ``srformer``, ``window``, ...) and :class:`~srformer.attention.segment_free.
SegmentFreeCrossAttention` (output independent of the decoder position: ``linear``, ``performer``, ...).
"""

from __future__ import annotations

from collections.abc import Callable
from dataclasses import fields, replace
from typing import TYPE_CHECKING

import torch
from torch import nn

from srformer.attention.initialization import TORCH_INIT, InitFunctions
from srformer.attention.projection import HeadProjection
from srformer.attention.state import CrossAttentionState, accumulation_dtype
from srformer.core import REGISTRY

if TYPE_CHECKING:
    from srformer.core import SRformerConfig

__all__ = ["CrossAttentionMechanism", "ProjectBlock", "ProjectRows", "sum_over_blocks"]

#: Projects encoder rows on demand (lean layout): (B, s) long encoder positions -> (keys, values), each (B, H, s, d);
#: or (B, H, s) positions, head ``h`` reading its own rows (the indexed ``knn``), -> each (B, H, s, d).
ProjectRows = Callable[[torch.Tensor], tuple[torch.Tensor, torch.Tensor]]

#: Projects a block of encoder positions for a streamed state build: ``(start, end)`` (tokens) -> (keys, values),
#: each (B, H, end - start, d).
ProjectBlock = Callable[[int, int], tuple[torch.Tensor, torch.Tensor]]


def sum_over_blocks(
    project_block: ProjectBlock,
    key_length: int,
    key_valid: torch.Tensor | None,
    block: int,
    parts: Callable[[torch.Tensor, torch.Tensor, torch.Tensor | None], tuple[torch.Tensor, ...]],
) -> tuple[torch.Tensor, ...]:
    """Sums over the encoder positions, taken ``block`` at a time: each block's keys and values are projected
    (under the caller's autocast), widened to the accumulation dtype, and ``parts(keys, values, real)`` computes its
    terms with autocast off (``real``: (B, n) bool, True at the block's real positions, or None); the terms of all
    blocks are added. Memory: one block's projections at a time (a streamed state build,
    :meth:`CrossAttentionMechanism.streamed_state`).

    Args:
        project_block: projects positions ``[start, end)`` to (keys, values), each (B, H, end - start, d).
        key_length: ``k``, encoder positions.
        key_valid: (B, k) bool, True at real positions, or None.
        block: positions per block (>= 1).
        parts: the block's terms (same shapes for every block).

    Returns:
        The summed terms.
    """
    totals: tuple[torch.Tensor, ...] | None = None
    for start in range(0, max(1, key_length), block):
        keys, values = project_block(start, min(key_length, start + block))
        wide = accumulation_dtype(keys.dtype)
        with torch.autocast(device_type=keys.device.type, enabled=False):  # sums in float32 or wider
            real = None if key_valid is None else (
                key_valid[:, start:start + keys.shape[2]].to(device=keys.device, dtype=torch.bool)
            )
            terms = parts(keys.to(wide), values.to(wide), real)
            totals = terms if totals is None else tuple(a + b for a, b in zip(totals, terms, strict=True))
    assert totals is not None  # at least one block: range(0, max(1, k), block) is never empty
    return totals


class CrossAttentionMechanism(nn.Module):
    """One decoder layer's cross attention of one mechanism.

    Args:
        config: the SRformer settings; ``config.variant`` must be a variant whose registry entry names this class
            (:meth:`variant_names`).
        head_dim: ``d``, size of one attention head.
        scale: the wrapped model's attention scale (T5: 1.0, BART: head_dim^-0.5), applied to the query-key
            products where the mechanism forms them.

    The settings are kept as ``.settings`` (by transformers' convention the ``.config`` of any submodule is the
    model's ``PretrainedConfig``); the mechanism's own settings are ``.settings.settings``.

    Attributes:
        has_softmax: a softmax term is part of the output (False for the kernel mechanisms and under
            ``srformer``'s ablation I).
        has_recurrence: a recurrent term ``O_R`` is part of the output (``srformer`` only).

    Raises:
        ValueError: for a variant this class does not compute (use
            :func:`srformer.attention.build_cross_attention`, which reads the registry).
    """

    has_softmax: bool = True
    has_recurrence: bool = False

    def __init__(self, config: SRformerConfig, head_dim: int, scale: float = 1.0) -> None:
        super().__init__()
        entry = REGISTRY.get(config.variant)
        if entry is None or entry.module is None or entry.module_class() is not type(self):
            raise ValueError(
                f"{type(self).__name__} computes the variants {self.variant_names()}, not {config.variant!r}; "
                "use srformer.attention.build_cross_attention(config, ...) to get the right module."
            )
        self.configure(config)
        self.head_dim = head_dim
        self.scale = float(scale)

    @classmethod
    def variant_names(cls) -> tuple[str, ...]:
        """The variants this class computes: those whose registry entry names it as their ``module``
        (:data:`srformer.core.REGISTRY`, where a variant's name is written). Empty for a base class."""
        path = f"{cls.__module__}.{cls.__qualname__}"
        return tuple(name for name, entry in REGISTRY.items() if entry.module == path)

    def configure(self, config: SRformerConfig) -> None:
        """Use ``config`` from now on (the runtime options of :func:`srformer.set_runtime_options`). With
        ``segment_size="auto"`` the settings in use (``.settings``) hold the segment size of the last input, set by
        :meth:`adapt_to_input` whenever a state is built; ``.configured`` keeps ``config`` itself."""
        self.configured = config
        # until the first input: s = 2 tokens, as the settings were checked with (SRformerConfig.__init__)
        self.settings = config if config.segment_size != "auto" else replace(config, segment_size=2)

    def adapt_to_input(self, key_valid: torch.Tensor | None, key_length: int) -> None:
        """Resolve ``segment_size="auto"`` for a batch whose real encoder positions are ``key_valid`` ((B, k) bool, or
        None: every example ``key_length`` tokens long): ``s = ceil(longest / target_length)``
        (:meth:`srformer.config.SRformerConfig.for_input_length`). Called before each state is built; nothing
        happens for an int ``segment_size``.

        Raises:
            ValueError: under ``torch.compile``/``torch.export`` (the longest length needs a host sync): give an
                int ``segment_size`` there.
        """
        if self.configured.segment_size != "auto":
            return
        if torch.compiler.is_compiling():
            raise ValueError(
                "segment_size='auto' reads the longest input length on the host, which torch.compile/torch.export "
                "cannot trace: compile a model with an int segment_size."
            )
        longest = key_length if key_valid is None or key_valid.numel() == 0 else int(key_valid.sum(dim=1).max())
        self.settings = self.configured.for_input_length(longest)

    def streamed_state(
        self, project_block: ProjectBlock, key_length: int, key_valid: torch.Tensor | None, block: int
    ) -> CrossAttentionState | None:
        """The generation state built block by block, for a mechanism whose generation state does not hold the
        encoder's keys and values (``lean_cache=True``, or a state of fixed size): the keys and values of ``block``
        positions at a time are projected by ``project_block``, folded into the state and dropped, so building it
        needs O(block) memory instead of O(k) (``docs/long-inputs.md``). Equal to the state built from every
        projection at once, up to the order of floating-point sums.

        Args:
            project_block: projects positions ``[start, end)`` of the encoder output.
            key_length: ``k``, encoder positions.
            key_valid: (B, k) bool, True at real positions, or None.
            block: positions per block (>= 1).

        Returns:
            The state, or None where this mechanism (with these settings) builds its state from all the keys at
            once (the default).
        """
        return None

    def indexed_state(
        self, encoder_states: torch.Tensor, key_valid: torch.Tensor | None, projection: HeadProjection
    ) -> CrossAttentionState | None:
        """The generation state of a mechanism that searches the encoder output itself (``knn`` with
        ``knn_index``): built from the encoder output and the layer's per-head projections instead of every projected
        key and value. Called before :meth:`streamed_state` at the first generation step.

        Args:
            encoder_states: (B, k, D) the encoder output.
            key_valid: (B, k) bool, True at real positions, or None.
            projection: the layer's key and value projections per head.

        Returns:
            The state, or None (the default) where the state is built otherwise.
        """
        return None

    def init_state_from_donated(
        self, keys: torch.Tensor, values: torch.Tensor, key_valid: torch.Tensor | None
    ) -> CrossAttentionState:
        """:meth:`init_state` for a caller that hands over the memory of ``keys`` and ``values`` (the layer's own
        projections at the first generation step, read by nothing after the build, as ``nn.ReLU(inplace=True)``
        treats its input): the build may overwrite them and keep their memory in the state, instead of
        allocating (and page-faulting) a buffer of its own. Same arguments, result and errors as
        :meth:`init_state`, which this default calls; a mechanism whose state needs a buffer the size of the keys
        overrides it."""
        return self.init_state(keys, values, key_valid)

    def finite_check_fields(self, state: CrossAttentionState) -> tuple[str, ...]:
        """The fields of ``state`` the NaN/inf check at the state build reads where they hold floating-point
        tensors (:func:`srformer.models.cross_attention.check_finite_state`): every field here. A mechanism
        overrides it to leave out fields that another checked field witnesses (one that is non-finite whenever
        they are), since each checked field costs one read of its memory at the first step.

        Args:
            state: the state this module built.

        Returns:
            Field names of ``state``.
        """
        return tuple(field.name for field in fields(state))

    def initialize_parameters(self, init: InitFunctions) -> None:
        """Give this module's own parameters and seeded buffers their initial values through ``init``'s functions
        (:mod:`srformer.attention.initialization`); a mechanism with any overrides it (none here).

        It is never the only source of those values: ``__init__`` gives them too (where the module has storage), so
        a module built while transformers skips its weight initialisation holds them; a seeded buffer gets the same
        values from both (``tests/models/test_transformers_contract.py`` checks every registered mechanism)."""

    def reset_parameters(self) -> None:
        """:meth:`initialize_parameters` with ``torch.nn.init``'s functions (in place)."""
        self.initialize_parameters(TORCH_INIT)

    def init_state(
        self, keys: torch.Tensor, values: torch.Tensor, key_valid: torch.Tensor | None
    ) -> CrossAttentionState:
        """The per-sequence state in the standard layout, built once per sequence from the projected encoder
        ``keys`` and ``values`` (each (B, H, k, d)) and ``key_valid`` ((B, k) bool, True at real encoder
        positions; None when nothing is padded).

        Returns:
            The mechanism's state (a :class:`~srformer.attention.state.CrossAttentionState`, tensors with the batch
            on axis 0), the class its registry entry names as ``state``.
        """
        raise NotImplementedError(f"{type(self).__name__} does not define init_state.")

    def forward(
        self, queries: torch.Tensor, state: CrossAttentionState, *, start_position: int | torch.Tensor = 0,
        dropout: float = 0.0,
    ) -> tuple[torch.Tensor, CrossAttentionState]:
        """Cross attention for ``q`` consecutive decoder positions at once (training, teacher forcing).

        Args:
            queries: (B, H, q, d) projected decoder queries at positions ``start_position .. start_position + q - 1``.
            state: a standard-layout state from :meth:`init_state`.
            start_position: absolute decoder position of the first query (an int or a 0-d long tensor).
            dropout: attention-probability dropout (training only), where the mechanism forms probabilities.

        Returns:
            ``(output, state)``: output (B, H, q, d) in the queries' dtype, and the state after the last position.
        """
        raise NotImplementedError(f"{type(self).__name__} does not define forward.")

    def step(
        self, queries: torch.Tensor, state: CrossAttentionState, *, position: int | torch.Tensor,
        project_rows: ProjectRows | None = None,
    ) -> tuple[torch.Tensor, CrossAttentionState]:
        """Cross attention for one decoder position (generation); the same output as :meth:`forward` there.

        Args:
            queries: (B, H, 1, d) projected decoder query at ``position``.
            state: the state after ``position - 1`` (a fresh one at position 0), either layout.
            position: absolute decoder position ``t`` (an int or a 0-d long tensor).
            project_rows: lean layout only, for a mechanism that re-projects encoder rows: maps (B, s) encoder
                positions to the projected ``(keys, values)``, each (B, H, s, d); or (B, H, s) positions, each head
                its own rows (:data:`ProjectRows`).

        Returns:
            ``(output, state)``: output (B, H, 1, d) in the queries' dtype, and the updated state.
        """
        raise NotImplementedError(f"{type(self).__name__} does not define step.")

    def output_from_weights(
        self, weights: torch.Tensor, queries: torch.Tensor, keys: torch.Tensor, values: torch.Tensor,
        state: CrossAttentionState, *, start_position: int | torch.Tensor, key_valid: torch.Tensor | None,
    ) -> torch.Tensor:
        """The output computed from the attention weights returned for ``output_attentions``
        (:func:`srformer.attention.weights.cross_attention_weights`), so that those weights are the autograd
        nodes the output depends on (``docs/design.md``, "Attention weights"). Used on that path only; it is the
        same function as :meth:`forward`/:meth:`step` (equal up to rounding), at the cost of eager attention,
        ``O(q*k*d)`` per head. Here: ``O = A V``, for the mechanisms whose output is exactly that; a mechanism
        with another form overrides it.

        Args:
            weights: (B, H, q, k) the returned weights (after attention dropout, in training).
            queries: (B, H, q, d) projected decoder queries at positions ``start_position ..``.
            keys, values: (B, H, k, d) projected encoder keys and values in encoder order.
            state: the layer's state after :meth:`forward` or :meth:`step`.
            start_position: absolute decoder position of the first query (an int or a 0-d long tensor).
            key_valid: (B, k) bool, True at real encoder positions, or None (nothing padded).

        Returns:
            (B, H, q, d) in the queries' dtype.
        """
        return torch.matmul(weights, values.to(weights.dtype)).to(queries.dtype)

    def lean(self, state: CrossAttentionState) -> CrossAttentionState:
        """The lean layout of a standard-layout ``state`` (no tensor of encoder length; the registry entry's
        ``lean_state`` class).

        Raises:
            ValueError: for a mechanism whose registry entry offers no lean layout.
        """
        raise ValueError(f"The lean cache layout is not implemented for variant {self.settings.variant!r}.")
