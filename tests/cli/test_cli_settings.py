"""``--setting NAME=VALUE``: any SRformerConfig setting from the command line, with errors that name the fix."""

from __future__ import annotations

import pytest

from srformer.cli.arguments import parse_settings
from srformer.config import named_config


def test_settings_are_converted_by_their_field_type():
    settings = parse_settings(["window_size=192", "raf_threshold_init=0.05", "kv_clamp=none", "lean-cache=true",
                               "ablation=no_raf"])
    assert settings == {"window_size": 192, "raf_threshold_init": 0.05, "kv_clamp": None, "lean_cache": True,
                        "ablation": "no_raf"}
    assert type(settings["window_size"]) is int and type(settings["raf_threshold_init"]) is float
    config = named_config("window", segment_size=64, target_length=128, **parse_settings(["window_size=192"]))
    assert config.resolved_window_size() == 192


@pytest.mark.parametrize("item,message", [
    ("window_size", "write NAME=VALUE"),
    ("no_such_thing=3", "not an SRformerConfig setting"),
    ("segment_size=16", "use --segment-size instead"),
    ("lean_cache=maybe", "takes true or false"),
    ("raf_leak_init=fast", "takes a number"),
])
def test_bad_settings_name_the_fix(item, message):
    with pytest.raises(ValueError, match=message):
        parse_settings([item])


def test_a_setting_of_another_variant_is_rejected_by_the_config():
    with pytest.raises(ValueError, match="window_size"):
        named_config("segmented", segment_size=64, target_length=128, **parse_settings(["window_size=192"]))


def test_train_parser_accepts_repeated_settings():
    from srformer.cli.main import build_parser

    args = build_parser().parse_args(["train", "--model", "t5-small", "--data", "d.jsonl", "--variant", "window",
                                      "--output", "x", "--setting", "window_size=96",
                                      "--setting", "strict_schedule=false"])
    assert parse_settings(args.setting) == {"window_size": 96, "strict_schedule": False}
