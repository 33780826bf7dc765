"""``srformer long-bench``: what generating from a very long input costs, per cross attention, against input length.

For each input length (default 4k, 16k, 64k and 256k tokens) a fresh child process
(:mod:`srformer.benchmarks.long_input_probe`) builds a randomly initialised model of the chosen shape (t5-small by
default; a shape names its family, :data:`~srformer.benchmarks.suite_settings.MODEL_SHAPES`: T5, LED or LongT5),
encodes one random input, and generates ``new_tokens`` tokens greedily from that encoding with every variant. A T5
shape's encoder reads the input in windows (chunked encoding, :mod:`srformer.models.chunked_encoding`; 512 tokens
by default); LED's and LongT5's read it natively, as srformer converts them by default (LED up to its
``max_encoder_position_embeddings``, LongT5 at any length), unless an ``encoder_window`` is given. It measures:

- encoding: wall seconds and peak resident memory (the encoder's working set, its output included);
- decoding: time to the first token (it builds every layer's cross-attention state), then seconds per token; peak
  resident memory above what the process held before (the weights and the encoder output); the bytes of the
  cross-attention cache after generate() (for a lean state: its tensors plus the encoder output it reads);
- optionally, ``generate(input_ids=...)`` end to end for some variants;
- optionally (``operators``), the aten operator calls of the first step and per generated token
  (:mod:`srformer.benchmarks.operator_count`), as an accelerator runs the step and as this device does.

A variant whose estimated memory (:func:`srformer.models.memory_estimate.estimate_decode_memory`) exceeds the
budget (default: the memory available when the run starts) is not run; its row says so, with the estimate. Results
are appended to ``long_input.json`` as they come, so an interrupted run resumes where it stopped; ``long_input.md``
and ``long_input.png`` (each quantity against input length, log axes) are written from it. Synthetic: random
weights and tokens, costs only (``docs/long-inputs.md``).
"""

from __future__ import annotations

import importlib.util
import json
import os
import subprocess
import sys
import warnings
from collections.abc import Callable, Sequence
from dataclasses import asdict, dataclass, field, replace
from pathlib import Path
from typing import Any

import torch

from srformer.attention.knn_index import INDEX_KINDS, faiss_available
from srformer.benchmarks.long_input_variants import DTYPES, LONG_INPUT_VARIANTS
from srformer.benchmarks.suite_settings import MODEL_SHAPES, shape_family
from srformer.benchmarks.timing import resolve_device
from srformer.core import check_window_settings
from srformer.models.chunked_encoding import encoder_input_limit
from srformer.models.families.t5 import PRETRAINED_LENGTH
from srformer.models.memory_estimate import available_memory

#: Environment of the child process: the C library's default allocator, as in a user's process (no pinned mmap
#: threshold: :mod:`srformer.benchmarks.long_input_probe` says why).
LONG_INPUT_CHILD_ENVIRONMENT = {"PYTHONWARNINGS": "ignore"}
#: Variants whose generation state does not grow with the input (beyond the encoder output a lean state reads).
STREAMING = ("segmented-lean", "srformer-lean", "linear")


@dataclass(frozen=True)
class LongInputSettings:
    """What :func:`run_long_input` measures.

    Attributes:
        lengths: input lengths in tokens.
        variants: names of :data:`LONG_INPUT_VARIANTS` (default: all; ``knn-flat``/``knn-ivf`` only where faiss
            is installed; ``knn-rows`` needs none).
        end_to_end: variants also timed with ``generate(input_ids=...)`` (the encoder inside generate()).
        shape: model shape (:data:`srformer.benchmarks.suite_settings.MODEL_SHAPES`): it names the family built (T5,
            LED, LongT5) and its sizes.
        new_tokens: tokens generated per input.
        segment_size: ``s`` in tokens, or ``"auto"``.
        target_length: ``T`` of the segment schedule, in tokens.
        encoder_window: tokens per encoder window (chunked encoding). None (the default): srformer's default for
            the shape's family: a T5 shape's windows of 512 tokens (the length T5 was pretrained on; stored as 512,
            as this benchmark always encoded T5 shapes), LED's and LongT5's own encoder reading the whole input
            (stored as None): LED up to its ``max_encoder_position_embeddings`` (a longer length is refused unless
            a window is given), LongT5 at any length.
        window_overlap: share of a window shared with the next, in ``[0, 1)``.
        window_batch_size: windows per encoder call.
        memory_budget: bytes a variant's estimate may use; None: the memory available when the run starts (on
            CUDA: when the length's child process starts).
        seed: seed of the random weights and tokens.
        device: ``cpu``, ``cuda`` (``cuda:N``) or ``auto``; peak memory is the resident set's on the CPU and CUDA's
            allocator's on a GPU.
        dtype: the model's and its encoder output's dtype: ``float32``, ``bfloat16`` or ``float16``.
        batch_size: inputs decoded together (copies of one encoded input).
        compiled: decode with a static cache and transformers' compiled step (``torch.compile``, fullgraph; CUDA
            graphs on a GPU); an untimed call compiles first.
        max_batch: also find each variant's largest batch that fits (measured on CUDA, estimated on the CPU).
        operators: also count each variant's aten operator calls, first step and per generated token, on the
            encoder output it decodes from (as an accelerator runs the step and as this device does).
    """

    lengths: tuple[int, ...] = (4096, 16384, 65536, 262144)
    variants: tuple[str, ...] = field(default_factory=lambda: tuple(
        name for name, options in LONG_INPUT_VARIANTS.items()
        if options.get("knn_index") not in INDEX_KINDS or faiss_available()))
    end_to_end: tuple[str, ...] = ("srformer-lean",)
    shape: str = "t5-small"
    new_tokens: int = 64
    segment_size: int | str = 64
    target_length: int = 128
    encoder_window: int | None = None
    window_overlap: float = 0.5
    window_batch_size: int = 8
    memory_budget: int | None = None
    seed: int = 0
    device: str = "cpu"
    dtype: str = "float32"
    batch_size: int = 1
    compiled: bool = False
    max_batch: bool = False
    operators: bool = False

    def __post_init__(self) -> None:
        unknown = [name for name in (*self.variants, *self.end_to_end) if name not in LONG_INPUT_VARIANTS]
        if unknown:
            raise ValueError(f"Unknown long-input variant(s) {unknown}; choose from {', '.join(LONG_INPUT_VARIANTS)}.")
        if self.shape not in MODEL_SHAPES:
            raise ValueError(f"Unknown model shape {self.shape!r}; known shapes are {', '.join(MODEL_SHAPES)}.")
        if not self.lengths or any(not isinstance(n, int) or n < 1 for n in self.lengths):
            raise ValueError(f"`lengths` must be positive numbers of tokens, got {self.lengths!r}.")
        if not isinstance(self.new_tokens, int) or self.new_tokens < 2:
            raise ValueError(f"`new_tokens` must be an int >= 2 (one step builds the state), got {self.new_tokens!r}.")
        if self.encoder_window is None and shape_family(self.shape) == "t5":
            object.__setattr__(self, "encoder_window", PRETRAINED_LENGTH)  # srformer's default window for T5
        check_window_settings(1 if self.encoder_window is None else self.encoder_window, self.window_overlap,
                              self.window_batch_size)
        _check_input_limit(self.shape, self.encoder_window, self.lengths)
        if self.dtype not in DTYPES:
            raise ValueError(f"`dtype` must be one of {', '.join(DTYPES)}, got {self.dtype!r}.")
        if not isinstance(self.batch_size, int) or self.batch_size < 1:
            raise ValueError(f"`batch_size` must be an int >= 1, got {self.batch_size!r}.")
        if self.device != "auto" and self.device != "cpu" and not self.device.startswith("cuda"):
            raise ValueError(f"Unknown device {self.device!r}: use cpu, cuda or auto.")

    @classmethod
    def quick(cls, **overrides: Any) -> LongInputSettings:
        """Seconds-long settings for tests: the t5-tiny shape, inputs of 1k and 4k tokens, 4 new tokens, encoder
        windows of 256 tokens; ``overrides`` replace any field (another family's shape keeps its own encoder, the
        default, unless ``encoder_window`` is among them).

        Raises:
            ValueError: for bad settings, e.g. a shape whose encoder cannot read the lengths whole without a window
                (led-tiny: 1,024 positions).
        """
        quick: dict[str, Any] = dict(lengths=(1024, 4096), shape="t5-tiny", new_tokens=4, segment_size=16,
                                     target_length=16)
        quick.update(overrides)
        shape = quick["shape"]
        if "encoder_window" not in overrides and shape in MODEL_SHAPES and shape_family(shape) == "t5":
            quick["encoder_window"] = 256
        return cls(**quick)

    def job(
        self, length: int, variants: Sequence[str], end_to_end: Sequence[str], budget: int | None
    ) -> dict[str, Any]:
        """The child's job for one input length (:mod:`srformer.benchmarks.long_input_probe`)."""
        shared = {"segment_size": self.segment_size, "target_length": self.target_length}
        options = {name: {**shared, **LONG_INPUT_VARIANTS[name]} for name in (*variants, *end_to_end)}
        windows = {"encoder_window": self.encoder_window, "window_overlap": self.window_overlap,
                   "window_batch_size": self.window_batch_size}
        return {"length": length, "variants": list(variants), "end_to_end": list(end_to_end), "options": options,
                "windows": windows, "shape": self.shape, "new_tokens": self.new_tokens, "seed": self.seed,
                "memory_budget": budget, "device": self.device, "dtype": self.dtype, "batch_size": self.batch_size,
                "compiled": self.compiled, "max_batch": self.max_batch, "operators": self.operators}

    def measured_as(self) -> dict[str, Any]:
        """The settings that change what a record measures: a run folder holds records of one such setting."""
        return {name: value for name, value in asdict(self).items()
                if name not in ("lengths", "variants", "end_to_end", "memory_budget", "max_batch", "operators")}

    def stored(self) -> dict[str, Any]:
        """The settings as ``long_input.json`` keeps them: every field, but ``operators`` only when set (a file of
        a run without it reads as it did before the field existed)."""
        return {name: value for name, value in asdict(self).items() if name != "operators" or value}


def _check_input_limit(shape: str, encoder_window: int | None, lengths: Sequence[int]) -> None:
    """Refuse lengths that ``shape``'s encoder cannot read whole when no ``encoder_window`` is given, and a window
    larger than its positions (LED: ``max_encoder_position_embeddings``; T5 and LongT5 have no limit).

    Raises:
        ValueError: naming the limit in tokens.
    """
    from srformer.benchmarks.variants import shape_config  # transformers' config classes: where a shape is checked

    limit = encoder_input_limit(shape_config(shape))
    if limit is None:
        return
    if encoder_window is None and max(lengths) > limit:
        longer = [n for n in lengths if n > limit]
        raise ValueError(
            f"Model shape {shape!r} ({shape_family(shape)}) has encoder positions for {limit:,} tokens, and lengths "
            f"{longer} exceed them: its own encoder cannot read them whole. Give an encoder window of at most "
            f"{limit:,} tokens (--encoder-window) to encode them in windows, or lengths up to {limit:,}.")
    if encoder_window is not None and encoder_window > limit:
        raise ValueError(f"`encoder_window` is {encoder_window:,} tokens but model shape {shape!r} has encoder "
                         f"positions for {limit:,} tokens: use encoder_window <= {limit:,}.")


def _key(record: dict) -> tuple:
    return record["kind"], record.get("variant"), record["length"]


def run_long_input(
    settings: LongInputSettings, output: str | Path, *, log: Callable[[str], None] = print
) -> list[dict]:
    """Measure every length and variant not yet in ``output/long_input.json``; append each record as it comes.

    Returns:
        Every record of the file (earlier ones included).

    Raises:
        RuntimeError: if a child process fails (its standard error is in the message); the records it finished
            are kept.
    """
    settings = replace(settings, device=str(resolve_device(settings.device)))  # "auto" -> cuda or cpu; checked
    folder = Path(output)
    folder.mkdir(parents=True, exist_ok=True)
    path = folder / "long_input.json"
    payload = json.loads(path.read_text()) if path.exists() else {"records": []}
    if payload["records"]:
        _check_same_measurement(payload.get("settings", {}), settings, path)
    payload["settings"] = settings.stored()
    on_cpu = settings.device == "cpu"
    # on CUDA the child reads the free device memory itself (the parent does not touch the GPU)
    budget = settings.memory_budget or (available_memory(torch.device("cpu")) or 2**62 if on_cpu else None)
    payload["memory_budget"] = budget
    records: list[dict] = payload["records"]
    done = {_key(r) for r in records}
    for length in settings.lengths:
        variants = [v for v in settings.variants if ("decode", v, length) not in done
                    or (settings.max_batch and ("max_batch", v, length) not in done)
                    or (settings.operators and ("operators", v, length) not in done
                        and not _refused(records, v, length))]
        end_to_end = [v for v in settings.end_to_end if ("end_to_end", v, length) not in done]
        if not variants and not end_to_end and ("encode", None, length) in done:
            continue
        log(f"long-bench: {length:,} tokens: {', '.join(variants + [v + ' (end to end)' for v in end_to_end])}")
        job = settings.job(length, variants, end_to_end, budget)
        environment = {**os.environ, **LONG_INPUT_CHILD_ENVIRONMENT}
        child = subprocess.Popen([sys.executable, "-m", "srformer.benchmarks.long_input_probe"], stdin=subprocess.PIPE,
                                 stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True, env=environment)
        assert child.stdin is not None and child.stdout is not None
        child.stdin.write(json.dumps(job))
        child.stdin.close()
        for line in child.stdout:
            record = json.loads(line)
            if _key(record) in done:
                continue
            records.append(record)
            done.add(_key(record))
            path.write_text(json.dumps(payload, indent=2))
            log("  " + _describe(record))
        error = child.stderr.read() if child.stderr is not None else ""
        if child.wait() != 0:
            raise RuntimeError(f"The long-input child for {length} tokens failed:\n{error[-4000:]}")
    path.write_text(json.dumps(payload, indent=2))
    return records


def _refused(records: Sequence[dict], variant: str, length: int) -> bool:
    """Whether ``variant`` was refused at ``length`` (it has no operator count to wait for)."""
    return any(r["kind"] == "decode" and r.get("variant") == variant and r["length"] == length and r.get("refused")
               for r in records)


def _check_same_measurement(stored: dict, settings: LongInputSettings, path: Path) -> None:
    """Refuse to add records measured another way (device, dtype, batch, compiled, shape, ...) to ``path``'s; a
    stored setting that an older file lacks reads as its default."""
    defaults = asdict(LongInputSettings())
    wanted = settings.measured_as()
    changed = [f"{name}: {stored.get(name, defaults[name])!r} there, {value!r} now" for name, value in wanted.items()
               if _normal(stored.get(name, defaults[name])) != _normal(value)]
    if changed:
        raise ValueError(f"{path} holds records measured with other settings ({'; '.join(changed)}); use another "
                         "--output folder for these settings, or the same settings to resume.")


def _normal(value: Any) -> Any:
    return list(value) if isinstance(value, tuple) else value


def _describe(record: dict) -> str:
    if record["kind"] == "operators":
        return (f"{record['variant']}: {record['calls_per_token']:,.0f} operator calls per token as on an accelerator "
                f"({record['device_calls_per_token']:,.0f} on this device), first step {record['first_step_calls']:,}")
    if record["kind"] == "max_batch":
        return f"{record['variant']}: largest batch {record['max_batch']} ({record['how'].split(':')[0]})"
    if record["kind"] == "encode":
        return f"encode: {record['seconds']:.1f} s, peak {_mib(record['peak_bytes'])}"
    if record.get("refused"):
        return f"{record['variant']}: refused, estimated {_mib(record['estimated_bytes'])}"
    if record["kind"] == "end_to_end":
        return f"{record['variant']} end to end: {record['seconds']:.1f} s, peak {_mib(record['peak_bytes'])}"
    return (f"{record['variant']}: first token {record['first_token_seconds']:.2f} s, "
            f"{1000 * record['seconds_per_token']:.1f} ms/token, peak {_mib(record['peak_bytes'])}, "
            f"state {_mib(record['state_bytes'])}")


def _mib(value: float) -> str:
    return f"{value / 2**20:,.1f} MiB"


#: Columns of the decode tables: (record field, heading, formatter).
_DECODE_QUANTITIES: tuple[tuple[str, str, Callable[[float], str]], ...] = (
    ("peak_bytes", "decode-time peak memory above weights and encoder output (MiB)", lambda v: f"{v / 2**20:,.0f}"),
    ("state_bytes", "cross-attention cache after generate(), all layers; a lean state counts the encoder output "
                    "it reads (MiB)", lambda v: f"{v / 2**20:,.1f}"),
    ("seconds_per_token", "time per generated token (ms)", lambda v: f"{1000 * v:,.1f}"),
    ("first_token_seconds", "time to the first token: builds every layer's state (s)", lambda v: f"{v:,.2f}"),
)


def long_input_table(records: Sequence[dict], settings: dict) -> str:
    """The Markdown report of :func:`run_long_input`'s records."""
    lengths = sorted({r["length"] for r in records})
    variants = [v for v in LONG_INPUT_VARIANTS if any(r.get("variant") == v for r in records)]
    by_key = {_key(r): r for r in records}
    head = "| variant | " + " | ".join(f"{n:,}" for n in lengths) + " |\n|---|" + "---|" * len(lengths)
    lines = [
        "# Generating from very long inputs",
        "",
        f"Synthetic: random {_shape_words(settings['shape'])} weights and tokens, {_measured_on(settings)}, "
        f"{settings['new_tokens']} new tokens "
        f"(greedy), segment size {settings['segment_size']}, target length {settings['target_length']}, "
        f"{_encoder_words(settings)}. Columns: input "
        "length in tokens. \"refused (est. X)\": the variant's estimated memory exceeds the budget, so it was not run.",
        "",
        f"## Encoding ({'chunked' if settings.get('encoder_window', 512) is not None else 'native'}, once per length)",
        "",
        "| quantity | " + " | ".join(f"{n:,}" for n in lengths) + " |",
        "|---|" + "---|" * len(lengths),
    ]
    encode = [by_key.get(("encode", None, n)) for n in lengths]
    lines.append("| seconds | " + " | ".join(f"{r['seconds']:,.1f}" if r else "-" for r in encode) + " |")
    lines.append("| peak memory (MiB) | " + " | ".join(f"{r['peak_bytes'] / 2**20:,.0f}" if r else "-"
                                                         for r in encode) + " |")
    lines.append("| encoder output (MiB) | " + " | ".join(f"{r['output_bytes'] / 2**20:,.0f}" if r else "-"
                                                            for r in encode) + " |")
    for field_name, heading, fmt in _DECODE_QUANTITIES:
        lines += ["", f"## {heading[0].upper() + heading[1:]}", "", head]
        for variant in variants:
            cells = []
            for n in lengths:
                record = by_key.get(("decode", variant, n))
                if record is None:
                    cells.append("-")
                elif record.get("refused"):
                    cells.append(f"refused (est. {record['estimated_bytes'] / 2**30:,.1f} GiB)")
                else:
                    cells.append(fmt(record[field_name]))
            lines.append(f"| {variant} | " + " | ".join(cells) + " |")
    counts = {(r["variant"], r["length"]): r for r in records if r["kind"] == "operators"}
    if counts:
        for field_name, heading in _OPERATOR_QUANTITIES:
            lines += ["", f"## {heading}", "", "Aten calls as an accelerator runs the step (the convention of "
                      "`srformer bench`'s operators section); in parentheses, as this device runs it.", "", head]
            for variant in variants:
                found = [counts.get((variant, n)) for n in lengths]
                cells = [f"{r[field_name]:,.0f} ({r['device_' + field_name]:,.0f})" if r else "-" for r in found]
                lines.append(f"| {variant} | " + " | ".join(cells) + " |")
    largest = {(r["variant"], r["length"]): r for r in records if r["kind"] == "max_batch"}
    if largest:
        how = next(iter(largest.values()))["how"]
        lines += ["", "## Largest batch that fits", "", how[0].upper() + how[1:] + ".", "", head]
        for variant in variants:
            cells = [str(largest[(variant, n)]["max_batch"]) if (variant, n) in largest else "-" for n in lengths]
            lines.append(f"| {variant} | " + " | ".join(cells) + " |")
    end_to_end = [r for r in records if r["kind"] == "end_to_end"]
    if end_to_end:
        lines += ["", "## End to end: generate(input_ids=...)", "",
                  "| variant | tokens | seconds | peak memory (MiB) |", "|---|---|---|---|"]
        for r in sorted(end_to_end, key=lambda r: (r["variant"], r["length"])):
            lines.append(f"| {r['variant']} | {r['length']:,} | {r['seconds']:,.1f} | {r['peak_bytes'] / 2**20:,.0f} |")
    return "\n".join(lines) + "\n"


#: The operator-count tables: (record field, heading).
_OPERATOR_QUANTITIES: tuple[tuple[str, str], ...] = (
    ("calls_per_token", "Operator calls per generated token"),
    ("first_step_calls", "Operator calls of the first step (builds every layer's state)"),
)


def _shape_words(shape: str) -> str:
    """``t5-small`` for a T5 shape (as the report always read); ``led-base (LEDForConditionalGeneration)`` for
    another family's."""
    family = MODEL_SHAPES[shape].get("family", "t5") if shape in MODEL_SHAPES else "t5"
    classes = {"led": "LEDForConditionalGeneration", "longt5": "LongT5ForConditionalGeneration"}
    return f"{shape} ({classes[family]})" if family in classes else shape


def _encoder_words(settings: dict) -> str:
    """How the encoder read the input: windows (size, overlap), or the family's own encoder, whole."""
    window = settings.get("encoder_window", 512)
    if window is not None:
        return f"encoder windows of {window} tokens with overlap {settings['window_overlap']}"
    return "the model's own encoder reading each input whole (no chunked encoding)"


def _measured_on(settings: dict) -> str:
    """``"CPU, float32, batch 1, eager"``-like words for a run's device, dtype, batch and compilation (an older file
    without them was measured on the CPU, in float32, batch 1, eager)."""
    device = str(settings.get("device", "cpu")).replace("cuda", "CUDA").replace("cpu", "CPU")
    compiled = "compiled (static cache)" if settings.get("compiled") else "eager"
    return f"{device}, {settings.get('dtype', 'float32')}, batch {settings.get('batch_size', 1)}, {compiled}"


_PLOT_TITLES = {
    "peak_bytes": "decode-time peak memory above weights and encoder output (MiB)",
    "state_bytes": "cross-attention cache after generate() (lean: + the encoder output) (MiB)",
    "seconds_per_token": "time per generated token (ms)",
    "first_token_seconds": "time to the first token (builds every layer's state) (s)",
}


def _plotted(field_name: str, value: float) -> float:
    """``value`` in the plot's unit (MiB, ms or s), at least 1e-3 so that it has a place on a log axis."""
    if field_name.endswith("bytes"):
        value = value / 2**20
    elif field_name == "seconds_per_token":
        value = value * 1000
    return max(value, 1e-3)


def plot_long_input(records: Sequence[dict], path: str | Path) -> Path:
    """Four panels against input length, log axes: decode-time peak memory, cache size, time per token and time to
    the first token, one line per variant; a refused variant's estimate is a hollow marker."""
    from srformer.benchmarks.plots import plt  # matplotlib: imported where a plot is drawn (write_long_input)

    path = Path(path)
    variants = [v for v in LONG_INPUT_VARIANTS if any(r.get("variant") == v for r in records)]
    fig, axes = plt.subplots(2, 2, figsize=(12, 8))
    for ax, (field_name, _, _) in zip(axes.flat, _DECODE_QUANTITIES, strict=True):
        plotted = False
        for index, variant in enumerate(variants):
            rows = sorted((r for r in records if r["kind"] == "decode" and r["variant"] == variant),
                          key=lambda r: r["length"])
            measured = [r for r in rows if not r.get("refused")]
            color = f"C{index % 10}"
            ax.plot([r["length"] for r in measured], [_plotted(field_name, r[field_name]) for r in measured], "o-",
                    color=color, label=variant)
            refused = [r for r in rows if r.get("refused")]
            if refused and field_name in ("peak_bytes", "state_bytes"):
                ax.plot([r["length"] for r in refused], [_plotted("bytes", r["estimated_bytes"]) for r in refused],
                        "o", mfc="none", color=color)
            plotted = plotted or bool(measured) or (bool(refused) and field_name in ("peak_bytes", "state_bytes"))
        if plotted:
            ax.set_xscale("log", base=2)
            ax.set_yscale("log")
        ax.set_xlabel("input length (tokens)")
        ax.set_title(_PLOT_TITLES[field_name], fontsize=9)
    axes.flat[0].legend(fontsize=8, loc="upper left")
    fig.suptitle("Long inputs (synthetic: random weights); hollow: estimate of a refused variant", fontsize=10)
    fig.tight_layout()
    fig.savefig(path, dpi=120)
    plt.close(fig)
    return path


def write_long_input(output: str | Path) -> dict[str, Path]:
    """Write ``long_input.md`` and ``long_input.png`` from ``output/long_input.json``.

    Without matplotlib the plot is left out, with a warning (the JSON and the table are written).

    Raises:
        FileNotFoundError: if the folder has no ``long_input.json``.
    """
    folder = Path(output)
    payload = json.loads((folder / "long_input.json").read_text())
    table = folder / "long_input.md"
    table.write_text(long_input_table(payload["records"], payload["settings"]))
    written = {"json": folder / "long_input.json", "markdown": table}
    if importlib.util.find_spec("matplotlib") is None:  # a machine with torch and transformers only (a GPU box)
        warnings.warn(f"long_input.png not written: matplotlib is not installed. The measurements are in "
                      f"{folder / 'long_input.json'}; where matplotlib is installed, `srformer long-bench --output "
                      f"{folder}` with the same settings draws it without measuring again.", stacklevel=2)
        return written
    return {**written, "plot": plot_long_input(payload["records"], folder / "long_input.png")}


def settings_with(base: LongInputSettings, **overrides: Any) -> LongInputSettings:
    """``base`` with the overrides that are not None."""
    return replace(base, **{k: v for k, v in overrides.items() if v is not None})
