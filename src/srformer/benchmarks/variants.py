"""What the benchmark compares: the variants, the model shapes, and building a model of each.

A benchmark variant is a cross-attention variant of :mod:`srformer` plus the settings that change
its cost: the attention implementation of the unmodified model (``sdpa`` or ``eager``), and the
lean generation cache of the converted ones. Every model of ``srformer bench`` is a randomly initialised T5 (the
same seed for every variant, so all share the weights of the unmodified model): random weights are
fine for timing, and a fixed number of new tokens is forced in generation. :func:`shape_model` builds a shape of
any family (T5, LED, LongT5), for ``srformer long-bench``.
"""

from __future__ import annotations

import contextlib
import warnings
from collections.abc import Iterator, Mapping
from typing import Any

import torch
import transformers
from torch import nn
from transformers import PretrainedConfig, PreTrainedModel, T5Config, T5ForConditionalGeneration

from srformer.benchmarks.records import VARIANT_SPECS, VariantSpec  # defined with the variant list (registry)
from srformer.benchmarks.suite_settings import MODEL_SHAPES, shape_family  # with the settings (light)
from srformer.core import SRformerConfig, named_config
from srformer.models import cross_attention_modules
from srformer.models.convert import convert
from srformer.models.families import family_named


def variant_spec(name: str) -> VariantSpec:
    """The :class:`VariantSpec` called ``name``.

    Raises:
        ValueError: for an unknown name.
    """
    if name not in VARIANT_SPECS:
        raise ValueError(f"Unknown benchmark variant {name!r}; known variants are {', '.join(VARIANT_SPECS)}.")
    return VARIANT_SPECS[name]


def t5_config(shape: str, attn_implementation: str = "sdpa") -> T5Config:
    """The ``T5Config`` of a :data:`MODEL_SHAPES` entry of the ``t5`` family (pad = decoder start = 0, eos = 1).

    Raises:
        ValueError: for an unknown shape, or a shape of another family (:func:`shape_config` builds those).
    """
    family = shape_family(shape)
    if family != "t5":
        raise ValueError(f"Model shape {shape!r} is a {family} shape, not a T5 one: use shape_config/shape_model.")
    settings = {key: value for key, value in MODEL_SHAPES[shape].items() if key != "family"}
    # decoder_start_token_id is a generation setting the config takes as an extra keyword (not in its typed signature)
    generation: dict[str, Any] = {"decoder_start_token_id": 0}
    config = T5Config(pad_token_id=0, eos_token_id=1, **generation, **settings)
    config._attn_implementation = attn_implementation
    return config


#: Config keywords a family's shapes leave to the benchmark (LongT5's decoder start token: its config takes it as an
#: extra keyword, as T5's does). The classes come from the family's entry (:mod:`srformer.models.families`); LED's and
#: LongT5's attention implementation is their classes' default (neither has an ``sdpa`` path).
_FAMILY_EXTRAS: dict[str, dict[str, Any]] = {"led": {}, "longt5": {"decoder_start_token_id": 0}}


def shape_config(shape: str, attn_implementation: str = "sdpa") -> PretrainedConfig:
    """The config of a :data:`MODEL_SHAPES` entry, of its family's class: :func:`t5_config` for a ``t5`` shape
    (``attn_implementation`` applies there only), ``LEDConfig`` for ``led`` (pad 1, bos 0, eos = decoder start =
    2: the class's defaults, as in ``allenai/led-base-16384``), ``LongT5Config`` for ``longt5`` (pad = decoder
    start = 0, eos 1).

    Raises:
        ValueError: for an unknown shape or family.
    """
    family = shape_family(shape)
    if family == "t5":
        return t5_config(shape, attn_implementation)
    if family not in _FAMILY_EXTRAS:
        raise ValueError(f"Model shape {shape!r} names family {family!r}; shapes build t5, "
                         f"{', '.join(_FAMILY_EXTRAS)}.")
    settings = {key: value for key, value in MODEL_SHAPES[shape].items() if key != "family"}
    config: PretrainedConfig = family_named(family).config_type(**_FAMILY_EXTRAS[family], **settings)
    return config


def shape_model(shape: str, attn_implementation: str = "sdpa") -> PreTrainedModel:
    """A randomly initialised model of a :data:`MODEL_SHAPES` entry (from torch's current random state), of its
    family's class (the first of its entry's ``heads``: ``T5ForConditionalGeneration``,
    ``LEDForConditionalGeneration`` or ``LongT5ForConditionalGeneration``), in eval mode on the CPU, float32.

    Raises:
        ValueError: for an unknown shape or family.
    """
    config = shape_config(shape, attn_implementation)
    model_class = getattr(transformers, family_named(shape_family(shape)).heads[0][0])
    model: PreTrainedModel = model_class(config).eval()
    return model


def head_count_and_dim(shape: str) -> tuple[int, int]:
    """``(heads, d)`` of a model shape's attention."""
    settings = MODEL_SHAPES[shape]
    return settings["num_heads"], settings["d_kv"]


def _length_settings(variant: str, longest_input: int | None) -> dict:
    """Settings a variant needs to accept inputs of ``longest_input`` tokens (``linformer``'s ``max_source_length``)."""
    default = SRformerConfig(variant="linformer").resolved_max_source_length()
    if variant == "linformer" and longest_input is not None and longest_input > default:
        return {"max_source_length": longest_input}
    return {}


def build_model(
    shape: str,
    variant: str,
    *,
    segment_size: int | None,
    target_length: int,
    device: torch.device | str = "cpu",
    seed: int = 0,
    longest_input: int | None = None,
    settings: Mapping[str, Any] | None = None,
) -> T5ForConditionalGeneration:
    """A randomly initialised T5 of ``shape`` with the cross attention of benchmark ``variant``.

    ``full*`` variants are the unmodified model; the others are converted with
    :func:`srformer.models.convert.convert` (``named_config(setting or variant, segment_size, target_length,
    lean_cache)``: a named setting such as ``knn-4`` with its own module settings).

    Args:
        shape: a key of :data:`MODEL_SHAPES`.
        variant: a key of :data:`VARIANT_SPECS`.
        segment_size: ``s`` in tokens (ignored, and may be None, for ``full*`` variants).
        target_length: ``T`` in tokens, the segment schedule's decoder length.
        device: where the model lives.
        seed: the weights' random seed (the same seed gives the same weights to every variant).
        longest_input: the longest encoder input (tokens) the model will see, for a variant whose parameters
            depend on it: ``linformer`` gets ``max_source_length = longest_input`` (its ``E, F`` have one column
            per position) when it exceeds the default 4096. None: the defaults.
        settings: SRformerConfig settings on top of the named setting's own (e.g. ``{"index_rank": 11}`` for
            ``knn-loki``); None or empty: the named setting as it is.

    Returns:
        The model in eval mode.

    Raises:
        ValueError: for an unknown shape or variant, a missing ``segment_size`` on a converted variant,
            ``settings`` for a ``full*`` variant (the unmodified model has none), or a setting the variant's
            config rejects.
    """
    spec = variant_spec(variant)
    config = t5_config(shape, spec.attn_implementation)
    if settings and spec.srformer_variant == "full":
        raise ValueError(f"Variant {variant!r} is the unmodified model: it takes no settings, got {dict(settings)}.")
    torch.manual_seed(seed)
    model = T5ForConditionalGeneration(config)
    if spec.srformer_variant != "full":
        if segment_size is None and spec.uses_segments:
            raise ValueError(f"Variant {variant!r} needs a segment size.")
        convert(
            model,
            named_config(
                spec.setting or spec.srformer_variant,
                segment_size=segment_size or 1,  # unused by linear attention
                target_length=target_length,
                lean_cache=spec.lean_cache,
                **{**_length_settings(spec.srformer_variant, longest_input), **(settings or {})},
            ),
        )
    # transformers declares PreTrainedModel.to with @wraps(nn.Module.to), so its annotation keeps an unbound `self`
    return model.to(device).eval()  # type: ignore[arg-type]


def first_cross_attention(model: nn.Module) -> nn.Module:
    """The decoder's first cross-attention module (``layer_idx`` 0) of ``model``."""
    return cross_attention_modules(model)[0][2]


@contextlib.contextmanager
def quiet_schedule_warnings() -> Iterator[None]:
    """Silence the warning :mod:`srformer` raises when ``ceil(k / s) > T`` (segments never attended).

    Benchmarks at large ``k`` and small ``s`` hit it on purpose; the suite logs it once instead.
    """
    with warnings.catch_warnings():
        warnings.filterwarnings("ignore", message=r"An encoder input has \d+ segments")
        yield


def segments_exceed_target(encoder_length: int, segment_size: int, target_length: int) -> bool:
    """True when ``ceil(k / s) > T``: the schedule skips segments (paper Sec. 4.2: s should be >= k/T)."""
    return -(-encoder_length // segment_size) > target_length
