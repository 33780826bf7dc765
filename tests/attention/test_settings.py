"""MechanismSettings: the base of each mechanism's own settings (declared ranges, the dict form)."""

from __future__ import annotations

from dataclasses import dataclass

import pytest

from srformer.config import SRformerConfig
from srformer.core import MechanismSettings, integer_setting


@dataclass(frozen=True)
class _Toy(MechanismSettings):
    width: int | None = integer_setting(1, 5, "the toy's width")
    label: str | None = None


@pytest.mark.parametrize("width", [None, 1, 3, 5])
def test_a_declared_integer_range_accepts_none_and_values_inside_it(width):
    _Toy(width=width).validate(SRformerConfig())


@pytest.mark.parametrize("width", [0, 6, True, 2.5, "3"])
def test_a_declared_integer_range_rejects_values_outside_it_naming_the_setting(width):
    with pytest.raises(ValueError, match=r"`width` \(the toy's width\) must be an integer >= 1 and <= 5"):
        _Toy(width=width).validate(SRformerConfig())


def test_the_dict_form_round_trips_and_rejects_unknown_names():
    settings = _Toy(width=2, label="a")
    assert settings.to_dict() == {"width": 2, "label": "a"} and _Toy.from_dict(settings.to_dict()) == settings
    assert _Toy.from_dict({}) == _Toy() and _Toy.names() == ("width", "label")
    with pytest.raises(ValueError, match=r"Unknown settings \['height'\] for _Toy; known settings are"):
        _Toy.from_dict({"height": 1})
    assert MechanismSettings().to_dict() == {} and MechanismSettings.names() == ()
