"""pytest plugin: run transformers' own modeling tests on srformer-converted models.

Load it with ``-p srformer_suite_plugin`` (this folder on ``PYTHONPATH``). With ``SRFORMER_SUITE_VARIANT`` unset it
does nothing at all (not even ``import srformer``): the plain baseline. With it set:

- ``SRFORMER_SUITE_VARIANT``: a variant or named setting (``srformer``, ``knn-rows``, ``full``, ``knn-loki``, ...;
  a name in ``srformer.NAMED_SETTINGS`` is built with ``srformer.named_config``, anything else with
  ``SRformerConfig(variant=...)``).
- ``SRFORMER_SUITE_SEGMENT_SIZE`` / ``SRFORMER_SUITE_TARGET_LENGTH``: optional (``auto`` allowed for the segment
  size); unset means srformer's defaults.
- ``SRFORMER_SUITE_SHARED_CONFIG=1``: convert the model with the very config object the test built it from.
  By default the plugin first gives the model (and every sub-module holding the same config object) a deep copy,
  because ``srformer.convert`` rewrites the config in place (model type, config class, ``config.srformer``)
  and transformers' tests build several model classes from one config: without the copy, every model after
  the first is refused by ``convert`` ("config says it was saved as an SRformer model").
- ``SRFORMER_SUITE_STATS``: a JSON file to write the counts to at the end of the session.

``transformers.PreTrainedModel.post_init`` is wrapped: after the original ``post_init``, a model that is not
being built inside another model's ``__init__`` (the outermost model; sub-models such as ``T5Stack`` or
``BartDecoder`` built by their parent are left to the parent's conversion) is converted, unless it has no
decoder cross attention (``srformer.models.cross_attention_modules``), is already converted
(``srformer.models.is_converted``) or is one of srformer's own classes (built by srformer's loading code, which
converts it itself). A ``ValueError`` from ``convert`` (an unsupported family, or a config that already holds
SRformer settings) is counted and the model left plain; any other exception propagates and fails the test.
"""

from __future__ import annotations

import collections
import copy
import json
import os
import sys
from collections.abc import Callable
from types import FrameType
from typing import TYPE_CHECKING, Any, Protocol, cast

if TYPE_CHECKING:  # annotations only: with the plugin off nothing of transformers or srformer is imported
    import pytest
    from transformers import PreTrainedModel

    from srformer import SRformerConfig

_VARIANT = os.environ.get("SRFORMER_SUITE_VARIANT", "").strip()

_stats: collections.Counter[str] = collections.Counter()
_refused: collections.Counter[tuple[str, str]] = collections.Counter()  # (class, message) -> count
_classes: collections.Counter[str] = collections.Counter()  # converted class names
_tests_converting: set[str] = set()
_tests_refused: set[str] = set()
_current_test: list[str] = [""]
_settings: SRformerConfig | None = None


class _SuitePostInit(Protocol):
    """The wrapper this plugin puts in place of ``PreTrainedModel.post_init``: marked, and pointing at the original."""

    _srformer_suite: bool
    __wrapped__: Callable[..., Any]

    def __call__(self, model: PreTrainedModel, *args: Any, **kwargs: Any) -> Any: ...


def _build_settings() -> SRformerConfig:
    """The SRformer settings the environment asks for (``ValueError`` from srformer for unknown ones)."""
    import srformer

    settings_kwargs: dict[str, Any] = {}
    segment_size = os.environ.get("SRFORMER_SUITE_SEGMENT_SIZE", "").strip()
    target_length = os.environ.get("SRFORMER_SUITE_TARGET_LENGTH", "").strip()
    if segment_size:
        settings_kwargs["segment_size"] = segment_size if segment_size == "auto" else int(segment_size)
    if target_length:
        settings_kwargs["target_length"] = int(target_length)
    if _VARIANT in srformer.NAMED_SETTINGS:
        return srformer.named_config(_VARIANT, **settings_kwargs)
    return srformer.SRformerConfig(variant=_VARIANT, **settings_kwargs)


def _built_inside_another(model: PreTrainedModel) -> bool:
    """True if ``model`` is being constructed inside the ``__init__`` of another PreTrainedModel."""
    from transformers import PreTrainedModel

    frame: FrameType | None = sys._getframe(2)
    while frame is not None:
        if frame.f_code.co_name == "__init__":
            owner = frame.f_locals.get("self")
            if owner is not model and isinstance(owner, PreTrainedModel):
                return True
        frame = frame.f_back
    return False


def _own_config(model: PreTrainedModel) -> None:
    """Give ``model`` a private deep copy of its config (shared with the test) before ``convert`` rewrites it."""
    old = getattr(model, "config", None)
    if old is None:
        return
    new = copy.deepcopy(old)
    for module in model.modules():
        if getattr(module, "config", None) is old:
            module.config = new


def _maybe_convert(model: PreTrainedModel) -> None:
    """Convert the outermost ``model`` with ``_settings`` unless it is skipped; count what happened."""
    from srformer.models import cross_attention_modules, is_converted

    _stats["post_init_outermost"] += 1
    if type(model).__module__.startswith("srformer"):
        _stats["skipped_srformer_class"] += 1
        return
    if not cross_attention_modules(model):
        _stats["skipped_no_cross_attention"] += 1
        return
    if is_converted(model):
        _stats["skipped_already_converted"] += 1
        return
    import srformer

    if os.environ.get("SRFORMER_SUITE_SHARED_CONFIG", "") != "1":
        _own_config(model)
    name = type(model).__name__
    if _settings is None:
        raise RuntimeError("srformer suite plugin: a model was built before the plugin's settings were made")
    try:
        srformer.convert(model, _settings)
    except ValueError as err:
        _stats["refused_value_error"] += 1
        _refused[(name, str(err).split(";")[0][:160])] += 1
        _tests_refused.add(_current_test[0])
        return
    _stats["converted"] += 1
    _classes[name] += 1
    _tests_converting.add(_current_test[0])


def _install() -> None:
    """Build the settings and wrap ``PreTrainedModel.post_init`` (once: a second call leaves the wrapper)."""
    global _settings
    from transformers import PreTrainedModel

    import srformer  # noqa: F401  (registers srformer's model types with transformers, as a user's import does)

    _settings = _build_settings()
    original = PreTrainedModel.post_init
    if getattr(original, "_srformer_suite", False):
        return

    def post_init(self: PreTrainedModel, *args: Any, **kwargs: Any) -> Any:
        result = original(self, *args, **kwargs)
        if _built_inside_another(self):
            _stats["skipped_nested"] += 1
        else:
            _maybe_convert(self)
        return result

    marked = cast(_SuitePostInit, post_init)  # the same function object, typed with its two extra attributes
    marked._srformer_suite = True
    marked.__wrapped__ = original
    PreTrainedModel.post_init = post_init  # type: ignore[method-assign]  # the monkeypatch is the plugin's job


def pytest_configure(config: pytest.Config) -> None:
    """pytest hook: install the ``post_init`` wrapper when ``SRFORMER_SUITE_VARIANT`` is set.

    Raises ``ValueError`` (from srformer) for an unknown variant or bad settings, ``ValueError`` for a segment
    size or target length that is not an integer (or ``auto``, for the segment size).
    """
    if _VARIANT:
        _install()


def pytest_report_header(config: pytest.Config) -> str:
    """pytest hook: one header line saying whether models are converted, and with which settings."""
    if not _VARIANT:
        return "srformer suite plugin: off (plain models)"
    return f"srformer suite plugin: converting with {_settings}"


def pytest_runtest_setup(item: pytest.Item) -> None:
    """pytest hook: remember the running test's node id, to attribute conversions to it."""
    _current_test[0] = item.nodeid


def pytest_runtest_teardown(item: pytest.Item) -> None:
    """pytest hook: forget the running test (models built between tests count under "")."""
    _current_test[0] = ""


def _summary() -> dict[str, Any]:
    """The settings and counts of the session, as written to ``SRFORMER_SUITE_STATS``."""
    return {
        "variant": _VARIANT,
        "segment_size": os.environ.get("SRFORMER_SUITE_SEGMENT_SIZE") or None,
        "target_length": os.environ.get("SRFORMER_SUITE_TARGET_LENGTH") or None,
        "settings": repr(_settings),
        "shared_config": os.environ.get("SRFORMER_SUITE_SHARED_CONFIG", "") == "1",
        "counts": dict(_stats),
        "converted_classes": dict(_classes),
        "refused": [
            {"class": class_name, "message": message, "count": count}
            for (class_name, message), count in _refused.most_common()
        ],
        "tests_with_a_converted_model": len(_tests_converting - {""}),
        "tests_with_a_refused_model": sorted(_tests_refused - {""}),
    }


def pytest_terminal_summary(
    terminalreporter: pytest.TerminalReporter, exitstatus: int, config: pytest.Config
) -> None:
    """pytest hook: print the settings, the counts, the converted classes and the refusals (plugin on only)."""
    if not _VARIANT:
        return
    summary = _summary()
    terminalreporter.write_sep("=", "srformer suite plugin")
    terminalreporter.write_line(f"settings: {summary['settings']}")
    terminalreporter.write_line(f"counts: {summary['counts']}")
    terminalreporter.write_line(f"converted classes: {summary['converted_classes']}")
    terminalreporter.write_line(f"tests that built a converted model: {summary['tests_with_a_converted_model']}")
    for refusal in summary["refused"]:
        terminalreporter.write_line(f"refused x{refusal['count']}: {refusal['class']}: {refusal['message']}")


def pytest_sessionfinish(session: pytest.Session, exitstatus: int) -> None:
    """pytest hook: write the summary as JSON to ``SRFORMER_SUITE_STATS`` when set (plugin on only).

    Raises ``OSError`` when the file cannot be written.
    """
    path = os.environ.get("SRFORMER_SUITE_STATS")
    if _VARIANT and path:
        with open(path, "w") as stats_file:
            json.dump(_summary(), stats_file, indent=1)
            stats_file.write("\n")
