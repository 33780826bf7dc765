"""The shared state of one benchmark-suite run, handed to every section builder.

:class:`SuiteContext` holds the settings, the device and the log of a run, builds each (variant, segment size)
model once, lists the (variant, segment size) pairs a section measures, makes
:class:`~srformer.benchmarks.records.BenchRecord` objects with the run's device, and is the compile probe of the
compiled column (:meth:`SuiteContext.can_compile`, :meth:`SuiteContext.compiled_or_skip`). :data:`Task` is one unit
of the suite's work.
"""

from __future__ import annotations

from collections.abc import Callable
from dataclasses import dataclass, field

import torch

from srformer.benchmarks.records import BenchRecord
from srformer.benchmarks.suite_settings import SuiteSettings
from srformer.benchmarks.variants import build_model, variant_spec

#: One unit of the suite's work: a progress label and the call that measures and returns its records.
Task = tuple[str, Callable[[], list[BenchRecord]]]


@dataclass
class SuiteContext:
    """One run's settings, device and log, its models, and the compile probe.

    ``compile_reason`` is the probe: for a device type, None when inductor compiles there, else the reason
    (:func:`~srformer.benchmarks.compiled.compile_unavailable_reason`); it is called at most once per run.
    """

    settings: SuiteSettings
    device: torch.device
    log: Callable[[str], None]
    compile_reason: Callable[[str], str | None]
    models: dict = field(default_factory=dict)
    details: dict[str, list[dict]] = field(default_factory=dict)  # detail rows by file name (bytes by operator)
    compile_probe: list[str | None] = field(default_factory=list)  # [reason or None] once probed

    @property
    def device_name(self) -> str:
        return "cuda" if self.device.type == "cuda" else "cpu"

    @property
    def on_cpu(self) -> bool:
        return self.device.type == "cpu"

    def model(self, variant: str, segment_size: int | None):
        key = (variant, segment_size)
        if key not in self.models:
            self.models[key] = build_model(
                self.settings.model_shape,
                variant,
                segment_size=segment_size,
                target_length=self.settings.target_length,
                device=self.device,
                seed=self.settings.seed,
                longest_input=max(self.settings.encoder_lengths),
                settings=self.settings.variant_settings.get(variant),
            )
        return self.models[key]

    def configurations(self, variants, *, largest_segment_only: bool = False) -> list[tuple[str, int | None]]:
        """(variant, segment size) pairs of the selected variants, in the settings' order."""
        pairs: list[tuple[str, int | None]] = []
        all_sizes = (max(self.settings.segment_sizes),) if largest_segment_only else self.settings.segment_sizes
        for variant in self.settings.variants:
            if variant not in variants:
                continue
            sizes = all_sizes if variant_spec(variant).uses_segments else (None,)
            pairs.extend((variant, s) for s in sizes)
        return pairs

    def record(self, variant, k, s, batch, metric, value, unit, *, q=None, note="", device=None,
               compiled=False) -> BenchRecord:
        """One measurement; a variant run with settings of its own (``settings.variant_settings``) says so in the
        note (``settings: index_rank=11``), so its records are not read as the named setting's."""
        own = self.settings.variant_settings.get(variant)
        if own:
            note = "; ".join(part for part in (note, "settings: " + ", ".join(f"{n}={v}" for n, v in own.items()))
                             if part)
        return BenchRecord(
            variant=variant, encoder_length=k, segment_size=s, batch_size=batch, metric=metric, value=value,
            unit=unit, device=device or self.device_name, decoder_length=q, note=note, compiled=compiled,
        )

    def can_compile(self) -> bool:
        """Whether the compiled column is measured: ``settings.compiled`` and inductor works here (the
        first call probes it and logs the reason when it does not)."""
        if not self.settings.compiled:
            return False
        if not self.compile_probe:
            reason = self.compile_reason(self.device.type)
            self.compile_probe.append(reason)
            if reason is not None:
                self.log(f"compiled column skipped: inductor cannot compile on this machine ({reason})")
        return self.compile_probe[0] is None

    def compiled_or_skip(self, label: str, measure: Callable[[], list[BenchRecord]]) -> list[BenchRecord]:
        """``measure()``, or no records and a logged line when compiling this variant fails."""
        try:
            return measure()
        except torch.OutOfMemoryError:
            raise
        except Exception as error:  # a compiler failure skips this cell, not the run
            lines = str(error).strip().splitlines()
            self.log(f"{label}: compiled measurement skipped ({type(error).__name__}: {lines[0] if lines else ''})")
            return []
