"""The length curricula of srformer.training.curriculum: monotone, reaching the input length, checked up front."""

from __future__ import annotations

import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from srformer.training.curriculum import check_curriculum, curriculum_length, curriculum_levels


def test_doubling_levels():
    assert curriculum_levels(8, 256) == [8, 16, 32, 64, 128, 256]
    assert curriculum_levels(24, 256) == [24, 48, 96, 192, 256]
    assert curriculum_levels(256, 256) == [256]
    with pytest.raises(ValueError, match="at least 1 token"):
        curriculum_levels(0, 256)


def test_doubling_schedule_of_the_issue():
    """8 tokens for 10% of 3000 steps, then doubling, 256 from 70% on."""
    lengths = [curriculum_length(s, 3000, start=8, final=256, hold=0.1, ramp=0.6, growth="doubling")
               for s in range(3000)]
    assert lengths[0] == lengths[299] == 8
    assert lengths[300] == 16
    assert lengths[2099] == 128 and lengths[2100] == 256 == lengths[-1]
    assert sorted(set(lengths)) == [8, 16, 32, 64, 128, 256]
    # every intermediate length gets an equal share (720 steps) of the ramp
    assert [lengths.count(n) for n in (16, 32, 64, 128)] == [450, 450, 450, 450]


@settings(max_examples=60, deadline=None)
@given(steps=st.integers(10, 500), start=st.integers(4, 64), final=st.integers(4, 512),
       hold=st.floats(0, 0.4), ramp=st.floats(0.05, 0.5), growth=st.sampled_from(["linear", "doubling"]))
def test_schedule_is_monotone_and_reaches_the_final_length(steps, start, final, hold, ramp, growth):
    lengths = [curriculum_length(s, steps, start=start, final=final, hold=hold, ramp=ramp, growth=growth)
               for s in range(steps)]
    assert all(a <= b for a, b in zip(lengths, lengths[1:], strict=False))
    assert all(min(start, final) <= n <= final for n in lengths)
    if (hold + ramp) * steps < steps - 1:
        assert lengths[-1] == final


def test_check_rejects_a_curriculum_that_does_not_fit():
    check_curriculum(100, start=32, final=256, hold=0.1, ramp=0.6)
    with pytest.raises(ValueError, match="curriculum_end"):
        check_curriculum(100, start=32, final=256, hold=0.1, ramp=0.9)
    with pytest.raises(ValueError, match="intermediate lengths"):
        check_curriculum(10, start=8, final=256, hold=0.1, ramp=0.2, growth="doubling")
    with pytest.raises(ValueError, match="curriculum_hold"):
        check_curriculum(5, start=8, final=64, hold=0.1, ramp=0.5)
    with pytest.raises(ValueError, match="curriculum_growth"):
        check_curriculum(100, start=8, final=64, hold=0.1, ramp=0.5, growth="cubic")
    check_curriculum(3, start=256, final=256, hold=0.1, ramp=0.9)  # no curriculum: nothing to fit
