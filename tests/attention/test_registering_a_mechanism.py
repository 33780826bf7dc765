"""A mechanism is one module file and one registry entry: a throwaway one, written to a temporary folder and
registered through :func:`srformer.core.registered`, is in every parametrisation of the suite that its capabilities
put it in (:mod:`tests.registry_cases`), passes the suite's registry-parametrised checks, and is offered by
``srformer bench --variants``; unregistered, it is gone from all of them."""

from __future__ import annotations

import dataclasses
import sys
import textwrap

import pytest

import srformer.config
from srformer.benchmarks.records import BENCH_VARIANTS, KNOWN_VARIANTS, BenchRecord
from srformer.benchmarks.suite import SuiteSettings
from srformer.benchmarks.variants import build_model, first_cross_attention, variant_spec
from srformer.cli.main import build_parser
from srformer.core import (
    NAMED_SETTINGS,
    REGISTRY,
    SEGMENT_FREE_VARIANTS,
    SEGMENT_SOFTMAX_VARIANTS,
    VARIANTS,
    Capabilities,
    Mechanism,
    SRformerConfig,
    named_config,
    register,
    registered,
    unregister,
)
from tests import registry_cases
from tests.attention import test_registry
from tests.attention import test_variants as attention_variants
from tests.models import test_variants as model_variants

MODULE = "throwaway_lookback"
NAME = "throwaway-lookback"
NAMED = "throwaway-lookback-2"

#: The mechanism's one file: its module, settings and float64 reference (docs/adding-a-mechanism.md's example).
SOURCE = '''
from __future__ import annotations

from dataclasses import dataclass

import torch

from srformer.attention.naive.common import (
    check_call, num_segments, per_query, segment_of, segment_rows, softmax_attention,
)
from srformer.attention.segmented import SegmentedCrossAttention
from srformer.core import MechanismSettings, integer_setting


@dataclass(frozen=True)
class LookbackSettings(MechanismSettings):
    lookback: int | None = integer_setting(0, None, "segments read before the scheduled one")

    def resolved_lookback(self, config) -> int:
        return self.lookback if self.lookback is not None else 1


class LookbackCrossAttention(SegmentedCrossAttention):
    def context_blocks(self, segments, index, max_segments):
        blocks = [(index, None, False)]
        for back in range(1, self.settings.resolved_lookback() + 1):
            exists = segments >= back
            blocks.append((index - back * exists.to(index.dtype), exists, False))
        return blocks


def lookback_attention(queries, keys, values, key_valid, settings, *, scale=1.0, parameters=None, start_position=0):
    check_call(settings, parameters, lookback_attention)
    s, target, back = settings.resolved_segment_size(), settings.target_length, settings.resolved_lookback()

    def one_query(query, k, v, t):
        i = segment_of(t, num_segments(len(k), s), target)
        rows = slice(segment_rows(max(i - back, 0), len(k), s).start, segment_rows(i, len(k), s).stop)
        return softmax_attention(query, k[rows], v[rows], scale)

    return per_query(queries, keys, values, key_valid, start_position, one_query)
'''

#: Its one registry entry.
ENTRY = Mechanism(
    name=NAME,
    doc="Softmax over the scheduled segment i(t) and the L segments before it.",
    citation="Dai et al. 2019, Transformer-XL (a memory of L segments, without the stop-gradient)",
    module=f"{MODULE}.LookbackCrossAttention",
    state="srformer.attention.segmented.SegmentState",
    lean_state=None,
    settings=f"{MODULE}.LookbackSettings",
    reference_path=f"{MODULE}.lookback_attention",
    capabilities=Capabilities(
        segment_free=False, lean_layout=False, state_grows_with_input=True, training_time_saving=True,
        has_softmax_part=True, recurrent_term=False, global_term=False,
    ),
    step_cost="O((L + 1)·s·d)",
    build_cost="O(k·d) (segment-major copy of keys/values)",
    state_size="2·k·d (keys and values, segment-major)",
    named_settings={NAMED: {"lookback": 2}},
)


@pytest.fixture
def module_file(tmp_path, monkeypatch):
    """The mechanism's file, importable as :data:`MODULE` (removed again afterwards)."""
    (tmp_path / f"{MODULE}.py").write_text(textwrap.dedent(SOURCE))
    monkeypatch.syspath_prepend(str(tmp_path))
    yield tmp_path
    sys.modules.pop(MODULE, None)


def _lists() -> dict[str, list[str]]:
    """Every registry-derived parametrisation of the suite, by helper."""
    return {
        "variants": registry_cases.variants(),
        "shipped_variants": registry_cases.shipped_variants(),
        "mechanisms": registry_cases.mechanisms(),
        "segmented_mechanisms": registry_cases.segmented_mechanisms(),
        "lean_variants": registry_cases.lean_variants(),
        "named_settings": registry_cases.named_settings(),
        "weights_of_output": registry_cases.weights_of_output(),
        "full_attention_at": registry_cases.full_attention_at(24, segment_size=4, target_length=12),
        "bench_variants": registry_cases.bench_variants(),
    }


def _bench_variants(*names: str) -> tuple[str, ...]:
    """``srformer bench --variants NAMES`` as the command line parses it."""
    args = build_parser().parse_args(["bench", "--output", "unused", "--variants", ",".join(names)])
    return tuple(name for part in args.variants for name in part)


def test_a_registered_mechanism_is_in_every_list_its_capabilities_put_it_in(module_file):
    before = _lists()
    with registered(ENTRY):
        during = _lists()
        assert REGISTRY[NAME] is ENTRY and NAME not in VARIANTS  # VARIANTS: the shipped ones
        assert NAMED_SETTINGS[NAMED] == {"variant": NAME, "lookback": 2}
        assert NAME in SEGMENT_SOFTMAX_VARIANTS and NAME not in SEGMENT_FREE_VARIANTS
        assert NAME not in srformer.config.SEGMENT_FREE
    added = {helper: [name for name in names if name not in before[helper]] for helper, names in during.items()}
    assert added == {
        "variants": [NAME],
        "shipped_variants": [],
        "mechanisms": [NAME],
        "segmented_mechanisms": [NAME],
        "lean_variants": [],  # no lean layout
        "named_settings": [NAME, NAMED],
        "weights_of_output": [NAME, NAMED],  # a softmax over scheduled segments: O = A V
        "full_attention_at": [],  # selects no keys
        "bench_variants": [NAME, NAMED],  # the named setting changes the module's settings
    }
    assert _lists() == before  # unregistered: gone from every list
    assert NAME not in REGISTRY and NAMED not in NAMED_SETTINGS


def test_the_config_takes_its_name_and_settings(module_file):
    with registered(ENTRY):
        config = SRformerConfig(variant=NAME, segment_size=4, lookback=3)
        assert config.lookback == 3 and config.resolved_lookback() == 3
        assert SRformerConfig.from_dict(config.to_dict()) == config
        assert named_config(NAMED).settings.lookback == 2
        assert SRformerConfig(variant="window").lookback is None  # another mechanism's setting reads as unset
        with pytest.raises(ValueError, match="`lookback` is a setting of variant='throwaway-lookback'"):
            SRformerConfig(variant="window", lookback=2)
    with pytest.raises(ValueError, match="Unknown SRformer variant 'throwaway-lookback'"):
        SRformerConfig(variant=NAME)


@pytest.mark.filterwarnings("ignore:An encoder input has")
def test_the_suites_registry_checks_pass_for_it(module_file):
    """The checks the suite parametrises over the registry, called for the registered mechanism (what a new
    mechanism gets without a line in tests/)."""
    with registered(ENTRY):
        for check in (
            test_registry.test_every_entry_has_its_reference_module_docs_and_costs,
            test_registry.test_references_reject_another_variants_settings,
            test_registry.test_a_module_class_takes_its_variant_name_from_the_registry,
            test_registry.test_selects_keys_matches_the_settings_and_the_reference,
            test_registry.test_lean_layout_capability_matches_the_module_and_the_config,
            test_registry.test_state_classes_are_the_ones_the_module_builds,
            test_registry.test_state_grows_with_input_matches_the_state_size,
            test_registry.test_segment_free_capability_matches_the_reference,
            test_registry.test_global_term_capability_matches_the_reference,
            test_registry.test_recurrent_term_and_softmax_part_match_the_module,
        ):
            check(NAME)
        for name in (NAME, NAMED):
            attention_variants.test_parallel_incremental_lean_and_padding_match_the_reference(name, 3, 8)
            attention_variants.test_cache_layer_reorders_every_state_tensor(name)
        model_variants.test_parallel_equals_incremental_and_padding_does_not_matter("t5", NAMED)


def test_srformer_bench_offers_it(module_file, capsys):
    with registered(ENTRY):
        assert NAME in BENCH_VARIANTS and NAMED in BENCH_VARIANTS and NAME in KNOWN_VARIANTS
        assert _bench_variants(NAME, NAMED) == (NAME, NAMED)
        with pytest.raises(SystemExit):
            build_parser().parse_args(["bench", "--help"])
        assert NAMED in capsys.readouterr().out.replace("\n", " ").replace(" ", "")  # listed in --variants' help
        settings = dataclasses.replace(SuiteSettings.quick(), variants=(NAME, NAMED))  # the suite accepts them
        assert settings.variants == (NAME, NAMED) and variant_spec(NAMED).setting == NAMED
        model = build_model("t5-tiny", NAMED, segment_size=4, target_length=8)
        assert first_cross_attention(model).srformer.settings.lookback == 2
        BenchRecord(variant=NAME, encoder_length=64, segment_size=16, batch_size=1, metric="training_step_time",
                    value=0.5, unit="s", device="cpu")
    assert NAME not in BENCH_VARIANTS
    with pytest.raises(SystemExit):
        _bench_variants(NAME)
    capsys.readouterr()


def test_registration_refuses_taken_names_and_the_shipped_mechanisms_stay():
    with pytest.raises(ValueError, match="taken already"):
        register(dataclasses.replace(ENTRY, name="window"))
    with pytest.raises(ValueError, match="taken already"):
        register(dataclasses.replace(ENTRY, named_settings={"knn-4": {}}))
    with pytest.raises(ValueError, match="Table 1 rows are the paper's"):
        register(dataclasses.replace(ENTRY, table1_row="Look-back"))
    with pytest.raises(ValueError, match="one of the package's own mechanisms"):
        unregister("srformer")
    assert tuple(REGISTRY) == VARIANTS
