"""The base of every mechanism's own settings: one frozen dataclass per mechanism, held by
:class:`srformer.core.config.SRformerConfig` as its ``settings``.

A mechanism with hyper-parameters of its own (``window``'s ``window_size``, ``reformer``'s ``num_buckets``, ...)
declares a subclass of :class:`MechanismSettings` in its module, next to the module and its state, and its
registry entry names it by import path (:attr:`srformer.core.schema.Mechanism.settings`). Each field is
None by default, meaning "the mechanism's default", which may depend on the shared settings (``window_size``
defaults to ``3 * segment_size``): the subclass's ``resolved_*`` methods give the value in use, from the field and
the shared :class:`~srformer.core.config.SRformerConfig`; :meth:`MechanismSettings.validate` checks the fields
against it. A mechanism without settings of its own uses :class:`MechanismSettings` itself (no fields).

This module is the lowest of :mod:`srformer.core`: it imports nothing of the package, not even for typing. The
config a method receives is therefore typed ``Any`` here; a subclass, in its mechanism's module, annotates it
as :class:`~srformer.core.config.SRformerConfig`.
"""

from __future__ import annotations

from collections.abc import Mapping
from dataclasses import asdict, dataclass, field, fields
from typing import Any, ClassVar, TypeVar

__all__ = ["MechanismSettings", "integer_setting", "require_integer", "require_setting"]

_Settings = TypeVar("_Settings", bound="MechanismSettings")


@dataclass(frozen=True)
class MechanismSettings:
    """The settings of one mechanism (none in this base class); a subclass adds fields, each None by default.

    Fields hold what the user gave (None: the mechanism's default), so two configs compare, hash and serialise
    equal exactly when they were given the same settings; the value in use comes from the subclass's
    ``resolved_*`` methods, which take the shared config (``resolved_window_size(config)``).

    Attributes:
        runtime: class attribute, the settings that change how the mechanism runs, not what it learns (``knn``'s
            search index): like the shared runtime options they may differ between a checkpoint and its
            loading and change after conversion (:func:`srformer.set_runtime_options`).
    """

    runtime: ClassVar[tuple[str, ...]] = ()

    @classmethod
    def names(cls) -> tuple[str, ...]:
        """The names of the settings (the dataclass fields), in declaration order."""
        return tuple(f.name for f in fields(cls))

    def validate(self, config: Any) -> None:
        """Check the settings against the shared ones of ``config`` (e.g. its ``segment_size``); called once by
        :class:`~srformer.core.config.SRformerConfig` when it is built. Here: every field declared with
        :func:`integer_setting` is None or an integer in its range; a subclass with more to check extends this.

        Raises:
            ValueError: naming the setting and its allowed range, for a value out of range.
        """
        for f in fields(self):
            bounds = f.metadata.get(_INTEGER)
            if bounds is not None:
                require_setting(f.name, getattr(self, f.name), *bounds)

    def whole_input_length(self, config: Any) -> int | None:
        """For a mechanism that reads a budget of keys it chooses per query and head
        (:attr:`srformer.core.schema.Capabilities.selects_keys`): the longest input, in real encoder tokens, that
        every query reads whole under these settings and the shared ones of ``config``. On such an input the
        mechanism computes full attention. None here: the mechanism has no such budget.
        """
        return None

    def to_dict(self) -> dict[str, Any]:
        """Plain-JSON form: ``{name: value}`` for every setting, None where not given."""
        return asdict(self)

    @classmethod
    def from_dict(cls: type[_Settings], data: Mapping[str, Any]) -> _Settings:
        """Inverse of :meth:`to_dict`; a missing name takes its default (None).

        Raises:
            ValueError: for names that are not settings of this class (the message lists the known ones).
        """
        unknown = sorted(set(data) - set(cls.names()))
        if unknown:
            raise ValueError(
                f"Unknown settings {unknown} for {cls.__name__}; known settings are {list(cls.names())}."
            )
        return cls(**data)


_INTEGER = "srformer_integer_setting"


def integer_setting(minimum: int, maximum: int | None = None, meaning: str = "") -> Any:
    """A settings field that is None (the mechanism's default) or an integer in ``[minimum, maximum]``, checked
    by :meth:`MechanismSettings.validate`: ``span_nodes: int | None = integer_setting(1)``.

    Args:
        minimum: the smallest allowed value.
        maximum: the largest allowed value, or None for no upper bound.
        meaning: what the setting is, for the error message; may be empty.
    """
    return field(default=None, metadata={_INTEGER: (minimum, maximum, meaning)})


def require_integer(name: str, value: object, minimum: int, maximum: int | None = None, meaning: str = "") -> None:
    """Check that the setting ``name`` is an integer (not a bool) in ``[minimum, maximum]``.

    Args:
        name: the setting's name, for the message.
        value: its value.
        minimum: the smallest allowed value.
        maximum: the largest allowed value, or None for no upper bound.
        meaning: what the setting is (e.g. ``"BigBird's global tokens"``), for the message; may be empty.

    Raises:
        ValueError: naming the setting and its allowed range.
    """
    in_range = isinstance(value, int) and minimum <= value and (maximum is None or value <= maximum)
    if in_range and not isinstance(value, bool):
        return
    what = f" ({meaning})" if meaning else ""
    upper = "" if maximum is None else f" and <= {maximum}"
    raise ValueError(f"`{name}`{what} must be an integer >= {minimum}{upper}, got {value!r}.")


def require_setting(name: str, value: object, minimum: int, maximum: int | None = None, meaning: str = "") -> None:
    """:func:`require_integer` for a setting that may be None (the mechanism's default, not checked here)."""
    if value is not None:
        require_integer(name, value, minimum, maximum, meaning)
