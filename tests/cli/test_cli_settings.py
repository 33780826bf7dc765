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


# ``--setting [VARIANT:]NAME=VALUE`` of the grid commands (compare, probe).

def test_variant_settings_without_prefix_go_to_every_variant_and_a_prefix_to_one():
    from srformer.cli.arguments import parse_variant_settings

    run = ("window", "srformer", "srformer-surrogate")
    assert parse_variant_settings([], run) == {}
    assert parse_variant_settings(["kv_clamp=10"], run) == {name: {"kv_clamp": 10.0} for name in run}
    settings = parse_variant_settings(["window:window_size=96", "srformer-surrogate:raf_surrogate_slope=4",
                                       "kv_clamp=10", "window:kv_clamp=none"], run)
    # the prefixed kv_clamp of window wins over the one of every variant, whatever the order of the flags
    assert settings == {"window": {"window_size": 96, "kv_clamp": None}, "srformer": {"kv_clamp": 10.0},
                        "srformer-surrogate": {"raf_surrogate_slope": 4.0, "kv_clamp": 10.0}}
    assert type(settings["window"]["window_size"]) is int


@pytest.mark.parametrize("item,message", [
    ("windowed:window_size=96", r"'windowed' is not a named setting; write VARIANT:NAME=VALUE"),
    ("strided:stride=4", r"'strided' is not among this run's variants \(window, srformer\); add it to --variants"),
    ("window:window_size", "write NAME=VALUE"),
    ("window:no_such_thing=3", "not an SRformerConfig setting"),
])
def test_bad_variant_prefixes_name_the_fix(item, message):
    from srformer.cli.arguments import parse_variant_settings

    with pytest.raises(ValueError, match=message):
        parse_variant_settings([item], ("window", "srformer"))


def test_an_explicit_setting_wins_over_the_named_settings_own_value():
    assert named_config("srformer-surrogate", segment_size=8, target_length=8).raf_surrogate_slope == 2.0
    config = named_config("srformer-surrogate", segment_size=8, target_length=8, raf_surrogate_slope=4.0)
    assert config.raf_surrogate_slope == 4.0 and config.variant == "srformer"


def test_check_variant_settings_names_the_rejecting_variant_and_the_prefix():
    from srformer.config import check_variant_settings

    shapes = lambda name: [(8, 16), (32, 16)]  # noqa: E731
    check_variant_settings({"window": {"window_size": 32}}, ("window", "full"), shapes)
    with pytest.raises(ValueError, match=r"Variant 'full' rejects the settings \{'window_size': 32\}.*VARIANT:"):
        check_variant_settings({"window": {"window_size": 32}, "full": {"window_size": 32}}, ("window", "full"),
                               shapes)
    # a window smaller than one of the grid's segment sizes is caught at that size
    with pytest.raises(ValueError, match="Variant 'window' rejects .* at segment size 32"):
        check_variant_settings({"window": {"window_size": 16}}, ("window",), shapes)
    with pytest.raises(ValueError, match="'strided', which is not among the grid's variants"):
        check_variant_settings({"strided": {"stride": 4}}, ("window",), shapes)


def test_setting_label_names_the_settings_in_sorted_order():
    from srformer.config import setting_label

    assert setting_label("window") == "window" and setting_label("window", {}) == "window"
    assert setting_label("window", {"window_size": 96, "kv_clamp": None}) == "window (kv_clamp=None, window_size=96)"


def _compare_args(*extra):
    from srformer.cli.main import build_parser

    return build_parser().parse_args(["compare", "--train-data", "no-such.jsonl", "--test-data", "no-such.jsonl",
                                      "--output", "x", "--variants", "full", "window", "--segment-sizes", "8",
                                      "--ablations", "ablation-III", *extra])


def test_compare_settings_reach_the_grid_per_variant():
    from srformer.cli.compare_command import settings_from_args

    settings = settings_from_args(_compare_args("--setting", "window:window_size=24", "--setting",
                                                "ablation-III:raf_threshold_init=0.2"))
    assert settings.variant_settings == {"window": {"window_size": 24}, "ablation-III": {"raf_threshold_init": 0.2}}
    # srformer runs next to the ablations, so it is one of the run's variants too
    assert settings_from_args(_compare_args("--setting", "srformer:kv_clamp=5")).variant_settings == {
        "srformer": {"kv_clamp": 5.0}}


@pytest.mark.parametrize("setting,message", [
    ("window_size=24", "Variant 'full' rejects the settings {'window_size': 24}"),
    ("strided:stride=4", "'strided' is not among this run's variants"),
    ("window:window_size=4", "Variant 'window' rejects"),
])
def test_compare_rejects_a_bad_setting_before_loading_data(setting, message, capsys):
    from srformer.cli.main import main

    args = ["compare", "--train-data", "no-such.jsonl", "--test-data", "no-such.jsonl", "--output", "x",
            "--variants", "full", "window", "--segment-sizes", "8", "--ablations", "--setting", setting]
    assert main(args) == 2  # the data files do not exist: the setting failed first
    assert message in capsys.readouterr().err


def test_probe_rejects_a_setting_a_variant_cannot_take_before_training(tmp_path, capsys):
    from srformer.cli.main import main

    out = tmp_path / "probe"
    assert main(["probe", "--quick", "--output", str(out), "--setting", "window_size=32"]) == 2
    error = capsys.readouterr().err
    assert "Variant 'full' rejects the settings {'window_size': 32}" in error and "VARIANT:" in error
    assert not out.exists()
    assert main(["probe", "--quick", "--output", str(out), "--setting", "window:window_size=32"]) == 2
    assert "'window' is not among this run's variants (full, segmented, srformer)" in capsys.readouterr().err


def test_window_options_convert_a_plain_checkpoint_to_full_attention_over_windows(tmp_path):
    import argparse

    import torch

    from srformer.cli.arguments import loading_settings
    from srformer.models import srformer_config_of
    from srformer.models.factory import load_model
    from tests.models.conftest import BUILDERS

    BUILDERS["t5"]().save_pretrained(tmp_path)
    options = argparse.Namespace(encoder_window=16, window_overlap=None, window_batch_size=4)
    model = load_model(str(tmp_path), runtime=loading_settings(options)[1])
    assert srformer_config_of(model).variant == "full" and model.get_encoder().srformer_windows.window == 16
    with torch.no_grad():
        assert model.get_encoder()(input_ids=torch.ones(1, 40, dtype=torch.long)).last_hidden_state.shape == (1, 40, 32)
    none = argparse.Namespace(encoder_window=None, window_overlap=None, window_batch_size=None)
    assert loading_settings(none) == (None, {})
    assert srformer_config_of(load_model(str(tmp_path), runtime=loading_settings(none)[1])) is None


def test_index_options_apply_to_a_knn_checkpoint_only(tmp_path):
    import argparse

    import pytest

    from srformer.cli.arguments import loading_settings
    from srformer.models import srformer_config_of
    from srformer.models.factory import load_model
    from tests.models.conftest import BUILDERS, converted

    pytest.importorskip("faiss")
    for name, variant in (("knn", "knn"), ("linear", "linear")):
        converted(BUILDERS["bart"](), variant=variant).save_pretrained(tmp_path / name)
    BUILDERS["bart"]().save_pretrained(tmp_path / "plain")
    _, runtime = loading_settings(argparse.Namespace(knn_index="ivf", index_probes=4, index_min_keys=None))
    config = srformer_config_of(load_model(str(tmp_path / "knn"), runtime=runtime))
    assert (config.knn_index, config.index_probes) == ("ivf", 4)
    _, exact = loading_settings(argparse.Namespace(knn_index="exact"))
    assert srformer_config_of(load_model(str(tmp_path / "knn"), runtime=exact)).knn_index is None
    with pytest.raises(ValueError, match="index_probes, knn_index cannot change on a model of variant 'linear'"):
        load_model(str(tmp_path / "linear"), runtime=runtime)
    with pytest.raises(ValueError, match="index_probes, knn_index cannot change on a model of variant 'full'"):
        load_model(str(tmp_path / "plain"), runtime=runtime)
