"""The settings of the benchmark suite (``srformer bench``): what :func:`~srformer.benchmarks.suite.run_suite`
measures and how hard.

:class:`SuiteSettings` holds the shapes, variants, repeats and the CPU limits of a run; :data:`SECTIONS` names the
suite's sections in run order; :data:`MODEL_SHAPES` the model shapes; :func:`with_overrides` replaces the fields a
command line gave. Light (no torch or transformers): ``srformer bench --help`` reads it.
"""

from __future__ import annotations

from dataclasses import dataclass, field, replace
from typing import Any

from srformer.benchmarks.records import BENCH_VARIANTS, DEFAULT_BENCH_VARIANTS, VARIANT_SPECS
from srformer.models.named_configs import NAMED_CONFIGS

#: Benchmark model shapes: each names its ``family`` (the model class built: ``t5`` ``T5ForConditionalGeneration``,
#: ``led`` ``LEDForConditionalGeneration``, ``longt5`` ``LongT5ForConditionalGeneration``;
#: :func:`srformer.benchmarks.variants.shape_model`) and the keyword arguments of that family's config class.
#: ``srformer bench`` builds T5 shapes only; ``srformer long-bench`` builds every family.
#:
#: - ``t5-small``: t5-small's shape (d_model 512, 6 + 6 layers, 8 heads, d_kv 64, d_ff 2048, 32128 tokens), sizes
#:   from :data:`srformer.models.factory.NAMED_CONFIGS`.
#: - ``t5-tiny``: the ``--quick`` shape (d_model 128, 2 + 2 layers, 4 heads, d_kv 32, 512 tokens).
#: - ``led-base``: ``allenai/led-base-16384`` (``LEDConfig`` fields of its ``config.json``, as saved by allenai's own
#:   fine-tunes such as ``allenai/led-base-16384-ms2``, whose ``_name_or_path`` is it): d_model 768, 6 + 6 layers,
#:   12 heads (head size 64), FFN 3072, GELU, vocabulary 50265, ``attention_window`` 1024 in every encoder layer,
#:   ``max_encoder_position_embeddings`` 16384, ``max_decoder_position_embeddings`` 1024; pad 1, bos 0, eos 2,
#:   decoder start 2 (``LEDConfig``'s defaults in transformers 5.25, ``models/led/configuration_led.py``).
#: - ``longt5-base``: ``google/long-t5-tglobal-base`` (``LongT5Config`` fields of its ``config.json``, revision
#:   452ea23a, and of the configs saved from it since, which add ``tie_word_embeddings: false``): d_model 768,
#:   d_kv 64, 12 heads, d_ff 2048, 12 + 12 layers, ``encoder_attention_type`` "transient-global", ``local_radius``
#:   127, ``global_block_size`` 16, ``feed_forward_proj`` "gated-gelu", 32 relative buckets up to distance 128,
#:   vocabulary 32128; pad 0, eos 1, decoder start 0 (``models/longt5/configuration_longt5.py``).
#: - ``led-tiny``, ``longt5-tiny``: the same families at test sizes (d_model 64, 2 + 2 layers, 4 heads of 16; LED:
#:   ``attention_window`` 32 and 1024 positions; LongT5: transient-global, ``local_radius`` 15, ``global_block_size``
#:   4), seconds per run.
MODEL_SHAPES: dict[str, dict] = {
    "t5-small": dict(NAMED_CONFIGS["t5-small-random"], vocab_size=32128),
    "t5-tiny": dict(NAMED_CONFIGS["t5-tiny"], vocab_size=512),
    "led-base": dict(
        family="led", d_model=768, encoder_layers=6, decoder_layers=6, encoder_attention_heads=12,
        decoder_attention_heads=12, encoder_ffn_dim=3072, decoder_ffn_dim=3072, activation_function="gelu",
        vocab_size=50265, attention_window=[1024] * 6, max_encoder_position_embeddings=16384,
        max_decoder_position_embeddings=1024,
    ),
    "longt5-base": dict(
        family="longt5", d_model=768, d_kv=64, d_ff=2048, num_layers=12, num_decoder_layers=12, num_heads=12,
        encoder_attention_type="transient-global", local_radius=127, global_block_size=16,
        feed_forward_proj="gated-gelu", relative_attention_num_buckets=32, relative_attention_max_distance=128,
        vocab_size=32128, tie_word_embeddings=False,
    ),
    "led-tiny": dict(
        family="led", d_model=64, encoder_layers=2, decoder_layers=2, encoder_attention_heads=4,
        decoder_attention_heads=4, encoder_ffn_dim=128, decoder_ffn_dim=128, vocab_size=512, attention_window=[32] * 2,
        max_encoder_position_embeddings=1024, max_decoder_position_embeddings=128,
    ),
    "longt5-tiny": dict(
        family="longt5", d_model=64, d_kv=16, d_ff=128, num_layers=2, num_decoder_layers=2, num_heads=4,
        encoder_attention_type="transient-global", local_radius=15, global_block_size=4,
        feed_forward_proj="gated-gelu", vocab_size=512,
    ),
}


def shape_family(shape: str) -> str:
    """The family a :data:`MODEL_SHAPES` entry builds (``t5``, ``led``, ``longt5``).

    Raises:
        ValueError: for an unknown shape.
    """
    if shape not in MODEL_SHAPES:
        raise ValueError(f"Unknown model shape {shape!r}; known shapes are {', '.join(MODEL_SHAPES)}.")
    return str(MODEL_SHAPES[shape].get("family", "t5"))

#: Sections of the suite, in run order.
SECTIONS: tuple[str, ...] = ("flops", "operators", "step", "generate", "training", "memory")


@dataclass(frozen=True)
class SuiteSettings:
    """What :func:`~srformer.benchmarks.suite.run_suite` measures and how hard.

    Attributes:
        encoder_lengths: ``k`` values (tokens).
        segment_sizes: ``s`` values (tokens).
        batch_sizes: batch sizes of the step and generation measurements.
        variants: benchmark variants (a subset of :data:`BENCH_VARIANTS`; default
            :data:`~srformer.benchmarks.records.DEFAULT_BENCH_VARIANTS`, without the baselines).
        target_length: ``T`` (tokens): the schedule's decoder length, and the label length of the
            training step and the ``q`` of the FLOP counts.
        model_shape: a key of :data:`MODEL_SHAPES` of the ``t5`` family (the suite builds T5 models).
        device: ``cpu``, ``cuda`` or ``auto``.
        repeats: timed repeats (medians are reported).
        warmup: discarded runs before them.
        step_positions: decoder positions timed per step run (``t = 1 .. n``).
        new_tokens: tokens per sequence in the timed ``generate()`` calls.
        training_batch_size: sequences per training step.
        training_repeats: timed training steps (at most ``repeats``).
        cpu_training_max_encoder_length: on the CPU, training steps are skipped above this ``k`` (logged).
        cpu_training_single_step_encoder_length: on the CPU, from this ``k`` on, training is timed
            for the largest segment size only, one step per variant after one warm-up step shared by
            the variants (noted in the record and the log).
        memory_new_tokens: tokens per sequence in the CPU peak-memory ``generate()`` calls.
        memory_batch_size: batch size of the CPU peak-memory measurements (default: the largest batch size).
        memory_segment_size: ``s`` of the CPU peak-memory measurements (default: 64 if measured, else the largest).
        memory_one_process: measure all variants' CPU peak memory in one child process (default: one
            child per variant).
        cpu_large_encoder_length: on the CPU, from this ``k`` on: step repeats at most 3; ``generate()``
            for the largest segment size only, with half the tokens, one timed call per variant after
            one warm-up call shared by the variants. (On the CPU ``generate()`` is otherwise timed at
            most twice, after a warm-up call of 4 tokens.)
        figure5_qs: summary lengths ``q`` of the Figure 5 theoretical curves.
        figure5_measured_qs: the ``q`` values with FlopCounterMode points in Figure 5.
        sections: which of :data:`SECTIONS` to run.
        seed: seed of the weights and the random inputs.
        variant_settings: SRformerConfig settings per benchmark variant on top of its named setting's (e.g.
            ``{"knn-loki": {"index_rank": 11}}``); only converted variants of ``variants`` take them.
        compiled: also time the step and ``generate()`` compiled (``torch.compile`` with inductor, fullgraph;
            :mod:`~srformer.benchmarks.compiled`). Off by default: compiling every variant and shape takes
            seconds to minutes each.
    """

    encoder_lengths: tuple[int, ...] = (512, 1024, 4096, 16384)
    segment_sizes: tuple[int, ...] = (16, 64)
    batch_sizes: tuple[int, ...] = (1, 8)
    variants: tuple[str, ...] = DEFAULT_BENCH_VARIANTS
    target_length: int = 128
    model_shape: str = "t5-small"
    device: str = "auto"
    repeats: int = 5
    warmup: int = 1
    step_positions: int = 32
    new_tokens: int = 64
    training_batch_size: int = 1
    training_repeats: int = 2
    cpu_training_max_encoder_length: int = 4096
    cpu_training_single_step_encoder_length: int = 2048
    memory_new_tokens: int = 16
    memory_batch_size: int | None = None
    memory_segment_size: int | None = None
    memory_one_process: bool = False
    cpu_large_encoder_length: int = 8192
    figure5_qs: tuple[int, ...] = (128, 256, 384, 512, 640, 768, 896, 1024)
    figure5_measured_qs: tuple[int, ...] = (128, 256, 512, 1024)
    sections: tuple[str, ...] = SECTIONS
    seed: int = 0
    compiled: bool = False
    variant_settings: dict[str, dict[str, Any]] = field(default_factory=dict)

    def __post_init__(self) -> None:
        for name in ("encoder_lengths", "segment_sizes", "batch_sizes", "figure5_qs", "figure5_measured_qs"):
            values = getattr(self, name)
            if not values or any(isinstance(v, bool) or not isinstance(v, int) or v < 1 for v in values):
                raise ValueError(f"`{name}` must be a non-empty list of positive integers, got {values!r}.")
        for name in ("target_length", "repeats", "step_positions", "new_tokens", "training_batch_size",
                     "training_repeats", "memory_new_tokens"):
            if getattr(self, name) < 1:
                raise ValueError(f"`{name}` must be >= 1, got {getattr(self, name)!r}.")
        if self.warmup < 0:
            raise ValueError(f"`warmup` must be >= 0, got {self.warmup!r}.")
        unknown = [v for v in self.variants if v not in BENCH_VARIANTS]
        if unknown or not self.variants:
            raise ValueError(f"Unknown benchmark variant(s) {unknown}; known variants are {', '.join(BENCH_VARIANTS)}.")
        stray = [name for name in self.variant_settings if name not in self.variants]
        if stray:
            raise ValueError(f"`variant_settings` names {stray}, which are not among `variants` "
                             f"({', '.join(self.variants)}).")
        unmodified = [name for name in self.variant_settings if VARIANT_SPECS[name].srformer_variant == "full"]
        if unmodified:
            raise ValueError(f"`variant_settings` names {unmodified}: the unmodified model takes no settings.")
        unknown = [s for s in self.sections if s not in SECTIONS]
        if unknown:
            raise ValueError(f"Unknown section(s) {unknown}; sections are {', '.join(SECTIONS)}.")
        if shape_family(self.model_shape) != "t5":
            raise ValueError(f"`srformer bench` builds T5 models; model shape {self.model_shape!r} is a "
                             f"{shape_family(self.model_shape)} shape (`srformer long-bench --shape` measures it).")

    @classmethod
    def quick(cls, **overrides) -> SuiteSettings:
        """The ``--quick`` settings (CI): a t5-tiny-sized model, k in {64, 128}, s = 16, batch 1,
        one repeat, a few positions and tokens; ``overrides`` replace any field."""
        quick: dict[str, Any] = dict(
            encoder_lengths=(64, 128),
            segment_sizes=(16,),
            batch_sizes=(1,),
            target_length=32,
            model_shape="t5-tiny",
            repeats=1,
            warmup=1,
            step_positions=8,
            new_tokens=8,
            training_repeats=1,
            memory_new_tokens=4,
            memory_one_process=True,
            figure5_measured_qs=(128,),
        )
        quick.update(overrides)
        return cls(**quick)

    def summary(self) -> dict:
        """The settings as a plain dict (for reports)."""
        return {name: getattr(self, name) for name in self.__dataclass_fields__}


def with_overrides(settings: SuiteSettings, **overrides) -> SuiteSettings:
    """``settings`` with the given fields replaced (None values are ignored)."""
    return replace(settings, **{key: value for key, value in overrides.items() if value is not None})
