"""Length curricula: the source length (tokens) of the batch at each optimizer step.

A small model trained from scratch on full-length inputs at once often learns to ignore its input (one output
for every document). Starting on short inputs, where reading is easy, and growing them to the model's input
length fixes that. Two growth shapes:

* ``"linear"``: ``start`` for the first ``hold`` fraction of the steps, then linear to ``final`` over the next
  ``ramp`` fraction (rounded down to a multiple of ``multiple``), then ``final``;
* ``"doubling"``: ``start`` for the first ``hold`` fraction, then ``2 start, 4 start, ...`` (every length below
  ``final``) for equal shares of the next ``ramp`` fraction, then ``final``.
"""

from __future__ import annotations

import math

__all__ = ["CURRICULUM_GROWTHS", "check_curriculum", "curriculum_length", "curriculum_levels"]

#: The growth shapes of :func:`curriculum_length`.
CURRICULUM_GROWTHS: tuple[str, ...] = ("linear", "doubling")


def curriculum_levels(start: int, final: int) -> list[int]:
    """The lengths of a doubling curriculum: ``start, 2 start, 4 start, ...`` (all below ``final``), then ``final``.

    Raises:
        ValueError: ``start < 1``.
    """
    if start < 1:
        raise ValueError(f"curriculum start must be at least 1 token, got {start}")
    if start >= final:
        return [final]
    levels = [start]
    while levels[-1] * 2 < final:
        levels.append(levels[-1] * 2)
    return [*levels, final]


def curriculum_length(step: int, steps: int, *, start: int, final: int, ramp: float, hold: float = 0.0,
                      multiple: int = 8, growth: str = "linear") -> int:
    """Source length (tokens) of the batch at optimizer step ``step`` (0-based) of ``steps``.

    ``start`` for the first ``hold`` fraction of ``steps``; then, over the next ``ramp`` fraction, linear from
    ``start`` to ``final`` rounded down to a multiple of ``multiple`` (never below ``start``) for
    ``growth="linear"``, or the doubled lengths of :func:`curriculum_levels` between ``start`` and ``final``, each
    for an equal share, for ``growth="doubling"``; then ``final``. ``start >= final``, or no hold and no ramp,
    give ``final`` at every step. The length never decreases with ``step``.

    Raises:
        ValueError: an unknown ``growth``.
    """
    if growth not in CURRICULUM_GROWTHS:
        raise ValueError(f"curriculum growth must be one of {', '.join(CURRICULUM_GROWTHS)}, got {growth!r}")
    if start >= final or (ramp <= 0 and hold <= 0):
        return final
    if step < hold * steps:
        return start
    if ramp <= 0:
        return final
    fraction = min(1.0, (step - hold * steps) / max(1.0, ramp * steps))
    if fraction >= 1.0:
        return final
    if growth == "doubling":
        between = curriculum_levels(start, final)[1:-1]
        if not between:
            return final
        return between[min(len(between) - 1, int(fraction * len(between)))]
    length = start + (final - start) * fraction
    return max(start, min(final, int(length) // multiple * multiple))


def check_curriculum(steps: int, *, start: int, final: int, hold: float, ramp: float, growth: str = "doubling") -> None:
    """Reject a curriculum that does not fit ``steps`` optimizer steps, before any training.

    It fits when ``hold`` and ``ramp`` are fractions in [0, 1] with ``hold + ramp < 1`` (some steps are left at
    the full length ``final``), ``1 <= start``, the hold (when > 0) lasts at least one step, and, for
    ``"doubling"``, every intermediate length gets at least one step of the ramp.

    Raises:
        ValueError: naming the setting (``curriculum_start``, ``curriculum_hold``, ``curriculum_end`` =
            ``hold + ramp``, ``max_steps``) and the fix.
    """
    if growth not in CURRICULUM_GROWTHS:
        raise ValueError(f"curriculum_growth must be one of {', '.join(CURRICULUM_GROWTHS)}, got {growth!r}")
    if start < 1:
        raise ValueError(f"curriculum_start must be at least 1 token, got {start}")
    if not (0.0 <= hold <= 1.0 and 0.0 <= ramp <= 1.0):
        raise ValueError(f"curriculum_hold ({hold}) and the ramp ({ramp}) must be fractions of the steps in [0, 1]")
    if start >= final or (hold <= 0 and ramp <= 0):
        return
    end = hold + ramp
    if end >= 1.0 or math.ceil(end * steps) >= steps:
        raise ValueError(
            f"the curriculum reaches the full length {final} only at step {math.ceil(end * steps)} of max_steps "
            f"{steps} (curriculum_end {end:g}): no step would train at the full length. Lower curriculum_end or "
            "raise max_steps."
        )
    if hold > 0 and hold * steps < 1:
        raise ValueError(f"curriculum_hold {hold:g} of max_steps {steps} is less than one step; raise it (or set 0)")
    if growth == "doubling":
        between = len(curriculum_levels(start, final)) - 2
        if between and ramp * steps < between:
            raise ValueError(
                f"the doubling curriculum from curriculum_start {start} to {final} tokens has {between} intermediate "
                f"lengths but its ramp (curriculum_end - curriculum_hold = {ramp:g}) spans only {ramp * steps:.1f} of "
                f"max_steps {steps}; raise max_steps, widen the ramp, or raise curriculum_start."
            )
