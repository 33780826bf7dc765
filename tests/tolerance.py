"""The suite's numerical tolerances, each derived from floating-point error bounds, never from what one
machine measured (the suite must pass on any CPU, whatever its SIMD width, BLAS blocking or thread
count changes in the order of floating-point operations).

Two kinds of comparison exist:

* **Exactness** (two computations of the same function: parallel == incremental, a reduction to full
  attention, padding invariance, cache on == off, checkpointed == plain gradients, a float64
  reference of a mechanism). These run in float64, where the only difference between the two sides
  is the order of rounding. A sum of ``n`` terms rounded in any order is within ``gamma_n * sum |x_i|``
  of the exact sum, ``gamma_n = n u / (1 - n u)`` with the unit roundoff ``u = 2**-53``
  (Higham, *Accuracy and Stability of Numerical Algorithms*, 2nd ed., Eq. 3.5). The tiny models and
  tensors of this suite never sum more than ``n = 1e3`` terms in one dot product (model width 32,
  feed-forward 64, at most 64 keys/positions, d*d = 64 state entries), and the layers, softmax and
  normalisations between a sum and the compared output amplify a relative error by far less than
  ``A = 1e3``; so two float64 evaluations agree to ``n * A * u ~= 1.1e-10`` relative to the
  magnitude of the compared tensor (or absolute below magnitude 1). :func:`exact_tolerance`.
  (T5's RMSNorm computes its variance in float32 even in a float64 model; the two sides round that
  variance to the same float32 number unless their float64 inputs straddle a float32 rounding
  boundary, which two inputs 1e-15 apart do with probability about 1e-8 per evaluation.)

* **Float32 accumulation** (where float32 itself is what is tested: a float32 state built from
  bf16 inputs, or ``torch.allclose`` checks on float32 tensors of an attention module):
  :func:`float32_tolerance` gives the worst-case ``gamma_n`` bound with ``u = 2**-24`` for sums of
  ``terms`` products, relative to the magnitude of the compared tensor.

Comparisons against bf16 autocast are not exactness checks; their tolerances are stated where they
are used (bf16 keeps 8 significant bits, so relative errors of a few 2**-8 are its resolution).
"""

from __future__ import annotations

import torch

FLOAT64_UNIT_ROUNDOFF = 2.0**-53
FLOAT32_UNIT_ROUNDOFF = 2.0**-24
LONGEST_SUM = 1e3  # terms in the longest dot product or reduction of the suite's tiny models
AMPLIFICATION = 1e3  # bound on the growth of a relative error between that sum and the compared output


def magnitude(reference: torch.Tensor | float) -> float:
    """``max(1, max |reference|)``: the scale that turns a relative bound into an absolute one."""
    if isinstance(reference, torch.Tensor):
        reference = reference.detach().abs().max().item() if reference.numel() else 0.0
    return max(1.0, abs(float(reference)))


def exact_tolerance(reference: torch.Tensor | float) -> float:
    """Absolute tolerance for two float64 evaluations of the same function (see the module docstring):
    ``LONGEST_SUM * AMPLIFICATION * u64 * max(1, |reference|)`` (about 1.1e-10 at magnitude 1)."""
    return LONGEST_SUM * AMPLIFICATION * FLOAT64_UNIT_ROUNDOFF * magnitude(reference)


def float32_tolerance(reference: torch.Tensor | float, terms: int) -> float:
    """Absolute worst-case error of float32 sums of ``terms`` products relative to ``max(1, |reference|)``:
    ``gamma_n = n u / (1 - n u)`` with ``u = 2**-24`` (Higham, Eq. 3.5), doubled because both compared
    sides round independently.

    Raises:
        ValueError: when ``terms`` is not positive or so large that ``n u >= 1`` (no bound holds).
    """
    nu = terms * FLOAT32_UNIT_ROUNDOFF
    if terms < 1 or nu >= 1:
        raise ValueError(f"terms must be a positive count with terms * 2**-24 < 1, got {terms}.")
    return 2 * nu / (1 - nu) * magnitude(reference)


def max_difference(a: torch.Tensor, b: torch.Tensor) -> float:
    """``max |a - b|`` as a Python float (0.0 for empty tensors)."""
    return (a - b).abs().max().item() if a.numel() else 0.0


def assert_exact(actual: torch.Tensor, expected: torch.Tensor, what: str = "") -> None:
    """Assert that two float64 evaluations of the same function agree to :func:`exact_tolerance`.

    Raises:
        AssertionError: naming ``what``, the largest difference and the tolerance.
    """
    assert actual.dtype == torch.float64 and expected.dtype == torch.float64, (
        f"{what}: exactness is checked in float64, got {actual.dtype} and {expected.dtype}"
    )
    assert actual.shape == expected.shape, f"{what}: shapes {tuple(actual.shape)} != {tuple(expected.shape)}"
    difference, tolerance = max_difference(actual, expected), exact_tolerance(expected)
    assert difference <= tolerance, f"{what}: max |difference| {difference:.3g} > derived tolerance {tolerance:.3g}"
