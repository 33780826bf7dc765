"""The compiled column of ``srformer bench --compiled``: how the step and ``generate()`` are compiled, and
whether this machine can compile at all.

* **Step**: the cross-attention module is wrapped in ``torch.compile(module, fullgraph=True, dynamic=False,
  backend="inductor")``. Its self-attention cache is a ``StaticCache``, so the decoder position the module
  reads is a 0-d tensor on the device (as in ``generate()`` with a static cache) and one graph serves every
  position. ``fullgraph=True``: the step paths of every variant (and transformers' own attention) have no
  graph break, so a break is an error, not a silent fallback to eager.
* **generate()**: ``cache_implementation="static"`` with ``CompileConfig(fullgraph=True, dynamic=False,
  backend="inductor")``, transformers' own way of compiling the decoding step. Its mode is ``None`` on the
  CPU (inductor without CUDA graphs) and transformers' default ``"reduce-overhead"`` (CUDA graphs) on CUDA.
  transformers compiles only on accelerators unless ``compile_config._compile_all_devices`` is set, which
  is done here on the CPU.

Compilation happens in the warm-up runs (never timed); every compiled measurement starts from
``torch._dynamo.reset()`` so that the graphs of earlier variants and shapes do not fill dynamo's
recompilation limit.
"""

from __future__ import annotations

import functools
from typing import Any, cast

import torch
from transformers import CompileConfig

#: The torch.compile backend of the compiled column.
BACKEND = "inductor"


def compile_config(device: torch.device) -> CompileConfig:
    """The ``CompileConfig`` of the compiled ``generate()`` measurement on ``device`` (see the module docstring)."""
    # mode None (plain inductor) is accepted by torch.compile although CompileConfig annotates `mode: str`
    mode: Any = "reduce-overhead" if device.type == "cuda" else None
    config = CompileConfig(fullgraph=True, dynamic=False, backend=BACKEND, mode=mode)
    if device.type != "cuda":
        # transformers' switch to compile off accelerators (declared as a class attribute `= None`)
        config._compile_all_devices = True  # type: ignore[assignment]
    return config


def compile_step(module: torch.nn.Module) -> torch.nn.Module:
    """``module`` wrapped in ``torch.compile(fullgraph=True, dynamic=False, backend="inductor")`` (an
    ``OptimizedModule``, whose ``_orig_mod`` is ``module``)."""
    return cast(torch.nn.Module, torch.compile(module, fullgraph=True, dynamic=False, backend=BACKEND))


@functools.cache
def compile_unavailable_reason(device_type: str) -> str | None:
    """None when inductor compiles and runs a tiny function on ``device_type`` here, else why not.

    inductor needs a working C++ compiler (CPU) or Triton (CUDA); without one, ``torch.compile`` fails at
    the first call. One tiny probe per process tells the suite to skip the compiled column with a
    logged reason instead of failing in the middle of a run.

    Args:
        device_type: ``"cpu"`` or ``"cuda"``.

    Returns:
        None, or the first line of the probe's error.
    """
    def probe(x: torch.Tensor) -> torch.Tensor:
        return torch.relu(x) * 2.0 + 1.0

    try:
        torch._dynamo.reset()
        x = torch.arange(8, dtype=torch.float32, device=device_type)
        compiled = torch.compile(probe, fullgraph=True, backend=BACKEND)
        if not torch.equal(compiled(x), probe(x)):
            return "inductor's compiled probe returned another result than eager"
        return None
    except Exception as error:  # any failure of the toolchain means: no compiled column here
        lines = str(error).strip().splitlines()
        return f"{type(error).__name__}: {lines[0] if lines else ''}"
    finally:
        torch._dynamo.reset()
