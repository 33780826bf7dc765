"""The registry of cross-attention mechanisms: one :class:`~srformer.core.schema.Mechanism` per variant name.

Every place that asks "which variants exist" or "which variants have capability X" reads this registry:
:mod:`srformer.core.config` (``NAMED_SETTINGS`` and the checks of ``SRformerConfig``),
:func:`srformer.attention.build_cross_attention` and the modules' own check of their variant,
:func:`keeps_own_attention` (asked by ``convert``, the evaluation and the training pipeline), ``srformer compare``,
``srformer probe`` and ``srformer bench`` (its variant list and Table 1 rows), and the test suite's
parametrisations.

It starts with the mechanisms the package ships (:data:`srformer.core.mechanisms.MECHANISMS`, in their order);
:func:`register` adds one more (a mechanism of another package, or a throwaway one in a test) and
:func:`unregister` removes it again (:func:`registered` does both around a block).

Names that follow the registry as it is now (*live*): :data:`REGISTRY`, :func:`with_capability`,
:data:`NAMED_SETTINGS`, :data:`ABLATIONS`, :data:`SEGMENT_FREE_VARIANTS`, :data:`LEAN_VARIANTS` and
:data:`SEGMENT_SOFTMAX_VARIANTS` (read-only views, recomputed after a registration). Two tuples are fixed when the
package is imported, because they name what the package itself ships: :data:`VARIANTS` (the shipped variants) and
:data:`TABLE1_VARIANTS` (the paper's Table 1 rows; a registered mechanism has no Table 1 row).

Modules, states, settings classes and references are named by their import paths, not imported here (the
mechanisms' modules import this registry, for their own check); the entries' methods import what they name when
they are called.
"""

from __future__ import annotations

from collections.abc import Callable, Collection, Iterator, Mapping, Sequence
from contextlib import contextmanager
from types import MappingProxyType
from typing import Any, Generic, TypeVar, overload

from srformer.core.mechanisms import MECHANISMS
from srformer.core.schema import Capabilities, Mechanism

__all__ = [
    "ABLATIONS", "LEAN_VARIANTS", "NAMED_SETTINGS", "NEURONS", "REGISTRY", "SEGMENT_FREE_VARIANTS",
    "SEGMENT_SOFTMAX_VARIANTS", "TABLE1_VARIANTS", "VARIANTS", "LiveMapping", "LiveNames", "ablation_owner",
    "generation", "keeps_own_attention", "mechanism", "register", "registered", "unregister", "with_capability",
]

_V = TypeVar("_V")
_T = TypeVar("_T", bound=Collection[str])

_entries: dict[str, Mechanism] = {entry.name: entry for entry in MECHANISMS}
_changes = 0

#: Variant name -> its :class:`~srformer.core.schema.Mechanism`, in the order the package lists them, then those
#: registered since (a read-only view of the registry as it is now).
REGISTRY: Mapping[str, Mechanism] = MappingProxyType(_entries)


def generation() -> int:
    """A number that changes whenever the registry does (:func:`register`, :func:`unregister`): what a cache of
    something derived from the registry is keyed by."""
    return _changes


class _Derived(Generic[_T]):
    """A collection of names computed from the registry, recomputed when it is read after a change of the
    registry."""

    def __init__(self, compute: Callable[[], _T]) -> None:
        self._compute = compute
        self._cached: tuple[int, _T] | None = None

    def _current(self) -> _T:
        if self._cached is None or self._cached[0] != _changes:
            self._cached = (_changes, self._compute())
        return self._cached[1]

    def __len__(self) -> int:
        return len(self._current())

    def __iter__(self) -> Iterator[str]:
        return iter(self._current())

    def __contains__(self, name: object) -> bool:
        return name in self._current()

    def __repr__(self) -> str:
        return repr(self._current())


class LiveNames(_Derived[tuple[str, ...]], Sequence[str]):
    """A read-only sequence of names derived from the registry, recomputed after each change of the registry:
    a tuple that follows registrations. It compares equal to a tuple or list of the same names; pickling stores a
    plain tuple of the names of the moment.

    Args:
        names: computes the names from the registry as it is now.
    """

    def __init__(self, names: Callable[[], Sequence[str]]) -> None:
        super().__init__(lambda: tuple(names()))

    @overload
    def __getitem__(self, index: int) -> str: ...

    @overload
    def __getitem__(self, index: slice) -> tuple[str, ...]: ...

    def __getitem__(self, index: int | slice) -> str | tuple[str, ...]:
        return self._current()[index]

    def __eq__(self, other: object) -> bool:
        if isinstance(other, LiveNames | tuple | list):
            return self._current() == tuple(other)
        return NotImplemented

    __hash__ = None  # type: ignore[assignment]  # it changes with the registry, as a list would

    def __add__(self, other: Sequence[str]) -> tuple[str, ...]:
        return self._current() + tuple(other)

    def __radd__(self, other: Sequence[str]) -> tuple[str, ...]:
        return tuple(other) + self._current()

    def __reduce__(self) -> tuple[type[tuple], tuple[tuple[str, ...]]]:
        return tuple, (self._current(),)


class LiveMapping(_Derived[dict[str, _V]], Mapping[str, _V]):
    """A read-only mapping derived from the registry, recomputed after each change of the registry (see
    :class:`LiveNames`). A value that is a dict is handed out as a copy, so no reader changes what others read.

    Args:
        items: computes the mapping from the registry as it is now.
    """

    def __init__(self, items: Callable[[], Mapping[str, _V]]) -> None:
        super().__init__(lambda: dict(items()))

    def __getitem__(self, key: str) -> _V:
        value = self._current()[key]
        return dict(value) if isinstance(value, dict) else value  # type: ignore[return-value]

    def __reduce__(self) -> tuple[type[dict], tuple[dict[str, _V]]]:
        return dict, ({key: self[key] for key in self._current()},)


def mechanism(name: str) -> Mechanism:
    """The registry entry of variant ``name``.

    Raises:
        ValueError: for an unknown name (the message lists the known ones).
    """
    if name not in _entries:
        raise ValueError(f"Unknown SRformer variant {name!r}: `variant` must be one of {', '.join(_entries)}.")
    return _entries[name]


def keeps_own_attention(name: str | None) -> bool:
    """True for a registered variant whose entry has no module (``full``): a converted model keeps the wrapped
    model's own cross attention, and ``segment_size``/``target_length`` do not apply. False for any other
    name, None or an unknown name included."""
    entry = _entries.get(name) if name is not None else None
    return entry is not None and entry.module is None


def with_capability(capability: str, value: object = True) -> tuple[str, ...]:
    """Names of the variants whose :class:`~srformer.core.schema.Capabilities` field ``capability`` equals
    ``value``, in registry order (the registry as it is now).

    Raises:
        ValueError: for a name that is not a field of :class:`~srformer.core.schema.Capabilities`.
    """
    if capability not in Capabilities.__dataclass_fields__:
        raise ValueError(
            f"Unknown capability {capability!r}; capabilities are {', '.join(Capabilities.__dataclass_fields__)}."
        )
    return tuple(name for name, entry in _entries.items() if getattr(entry.capabilities, capability) == value)


def _named_settings() -> dict[str, dict[str, Any]]:
    return {
        **{name: {"variant": name} for name in _entries},
        **{
            setting: {"variant": name, **extra}
            for name, entry in _entries.items()
            for setting, extra in entry.named_settings.items()
        },
    }


def register(entry: Mechanism) -> Mechanism:
    """Add ``entry`` to the registry, after the mechanisms there: from now on the config accepts its name and
    settings, :data:`NAMED_SETTINGS` holds its names, and ``srformer compare``/``probe``/``bench`` offer it.

    Returns:
        ``entry``.

    Raises:
        ValueError: for a name (or a named setting or ablation of ``entry``) that is taken already, or a
            ``table1_row`` (the paper's Table 1 rows are the package's own).
    """
    if not isinstance(entry, Mechanism):
        raise TypeError(f"register() takes a srformer.core.Mechanism, got {type(entry).__name__}.")
    taken = set(_named_settings())
    clashes = sorted(({entry.name, *entry.named_settings} & taken) | (set(entry.ablations) & set(ABLATIONS)))
    if entry.name in entry.named_settings or clashes:
        raise ValueError(f"Mechanism {entry.name!r}: the names {clashes or [entry.name]} are taken already.")
    if entry.table1_row is not None:
        raise ValueError(f"Mechanism {entry.name!r}: Table 1 rows are the paper's; leave `table1_row` None.")
    global _changes
    _entries[entry.name] = entry
    _changes += 1
    return entry


def unregister(name: str) -> Mechanism:
    """Remove the mechanism that :func:`register` added as ``name``.

    Returns:
        Its entry.

    Raises:
        ValueError: for a name not registered, or a mechanism the package ships.
    """
    if name in VARIANTS:
        raise ValueError(f"{name!r} is one of the package's own mechanisms; it cannot be unregistered.")
    entry = mechanism(name)
    global _changes
    del _entries[name]
    _changes += 1
    return entry


@contextmanager
def registered(entry: Mechanism) -> Iterator[Mechanism]:
    """``with registered(entry):`` the block runs with ``entry`` registered (:func:`register`), and it is
    unregistered afterwards, however the block ends."""
    register(entry)
    try:
        yield entry
    finally:
        unregister(entry.name)


def ablation_owner(ablation: str) -> str:
    """The variant whose entry lists ``ablation``.

    Raises:
        ValueError: for an unknown ablation.
    """
    for name, entry in _entries.items():
        if ablation in entry.ablations:
            return name
    raise ValueError(f"Unknown ablation {ablation!r}: `ablation` must be None or one of {', '.join(ABLATIONS)}.")


#: The variants the package ships, in their order (fixed at import; ``tuple(REGISTRY)`` adds those registered since).
VARIANTS: tuple[str, ...] = tuple(entry.name for entry in MECHANISMS)

#: The variants that are rows of the paper's Table 1 (``full`` is the paper's "Transformer"); fixed, as the paper's.
TABLE1_VARIANTS: tuple[str, ...] = tuple(entry.name for entry in MECHANISMS if entry.table1_row is not None)

#: Every ablation name, of any variant (live).
ABLATIONS: Sequence[str] = LiveNames(lambda: [name for entry in _entries.values() for name in entry.ablations])

#: The RAF neurons of ``srformer`` (``SRformerConfig.raf_neuron``, :mod:`srformer.attention.raf`): ``paper`` is
#: Appendix A.2's; ``two_sided`` is a change beyond the paper (``docs/design.md``, "Two-sided neuron") that fires
#: on either sign and keeps the sign.
NEURONS: tuple[str, ...] = ("paper", "two_sided")

#: Variants without segments: ``segment_size`` does not change them (live).
SEGMENT_FREE_VARIANTS: Sequence[str] = LiveNames(lambda: with_capability("segment_free"))

#: Variants whose generation state may use the lean layout (``lean_cache=True``; live).
LEAN_VARIANTS: Sequence[str] = LiveNames(lambda: with_capability("lean_layout"))

#: Variants with a softmax term over the segment schedule (computed by
#: :class:`srformer.attention.segmented.SegmentedCrossAttention` and its subclasses): a softmax part and segments
#: (live).
SEGMENT_SOFTMAX_VARIANTS: Sequence[str] = LiveNames(
    lambda: [name for name in with_capability("has_softmax_part") if not _entries[name].capabilities.segment_free]
)

#: Named settings for ``srformer compare``/``probe`` and ``named_config``: every variant by its own name,
#: then each variant's further named settings (ablations, the Eq. 10 mix), each ``{"variant": name, **settings}``
#: (live; a value read is a copy).
NAMED_SETTINGS: Mapping[str, dict[str, Any]] = LiveMapping(_named_settings)
