"""Process setup for multi-process training under ``torchrun`` or ``accelerate launch``.

Distributed work itself (process group, data sharding, gradient all-reduce, gathering, DeepSpeed and
FSDP) is done by transformers' Trainer through accelerate; this module only makes sure accelerate sees
the processes the launcher started, and checks the mixed-precision mode and the scaling backend
against the device before any work.
"""

from __future__ import annotations

import importlib.util
import os
from typing import Any

import torch
from accelerate import PartialState
from accelerate.state import AcceleratorState
from accelerate.utils import DistributedType, broadcast_object_list

from srformer.training.settings import MIXED_PRECISION_MODES, TrainingSettings

__all__ = ["check_backend", "check_mixed_precision", "from_main_process", "launched_world_size", "process_state"]


def launched_world_size() -> int:
    """The number of processes the launcher started (``WORLD_SIZE``, set by torchrun and ``accelerate
    launch --multi_gpu``); 1 when the program was not started by such a launcher."""
    try:
        return max(int(os.environ.get("WORLD_SIZE", "1")), 1)
    except ValueError:
        return 1


def process_state() -> PartialState:
    """accelerate's state of this process (created on first use; every process must call it).

    On a machine without a GPU, ``torchrun --nproc_per_node N`` and ``accelerate launch --multi_gpu
    --num_processes N`` start N processes, but accelerate only joins them into one CPU (gloo) group
    when asked for CPU training; otherwise every process would silently run a separate
    single-process training on all the data, writing the same files. When the launcher started
    several processes and accelerate found no device backend for them, the state is therefore
    created again for CPU processes (``PartialState(cpu=True)``, accelerate's multi-CPU mode).

    Returns:
        The ``accelerate.PartialState`` (``num_processes``, ``process_index``, ``is_main_process``,
        ``device``, ``wait_for_everyone()``, ``main_process_first()``).

    Raises:
        RuntimeError: the launcher started several processes but accelerate still sees a different
            number (an unsupported launcher setup); the message names both numbers.
    """
    state = PartialState()
    launched = launched_world_size()
    if state.num_processes == 1 and launched > 1 and state.distributed_type == DistributedType.NO:
        AcceleratorState._reset_state(reset_partial_state=True)  # nothing distributed was set up yet
        state = PartialState(cpu=True)
    if state.num_processes != launched and launched > 1:
        raise RuntimeError(
            f"The launcher started {launched} processes (WORLD_SIZE={launched}) but accelerate joined "
            f"{state.num_processes}; check the launcher's settings (e.g. `accelerate config`)."
        )
    return state


def from_main_process(value: Any) -> Any:
    """The main process's ``value``, returned on every process (accelerate's ``broadcast_object_list``; a
    collective call: every process must make it). ``value`` must pickle; in one process it is returned as is."""
    box = [value]
    broadcast_object_list(box, from_process=0)
    return box[0]


def check_mixed_precision(mixed_precision: str, device: torch.device) -> None:
    """Reject a mixed-precision mode that cannot work on ``device``, before any work is done.

    Args:
        mixed_precision: ``"no"``, ``"bf16"`` or ``"fp16"``.
        device: the device training will run on (e.g. ``process_state().device``).

    Raises:
        ValueError: for an unknown mode, or for ``"fp16"`` on a CPU: accelerate would silently train
            in float32 there (fp16 autocast and loss scaling need a GPU). The message says to use
            ``bf16`` (works on CPUs and recent GPUs) or ``no``.
    """
    if mixed_precision not in MIXED_PRECISION_MODES:
        raise ValueError(
            f"--mixed-precision must be one of {', '.join(MIXED_PRECISION_MODES)}, got {mixed_precision!r}."
        )
    if mixed_precision == "fp16" and torch.device(device).type == "cpu":
        raise ValueError(
            "--mixed-precision fp16 needs a CUDA GPU, but this process trains on the CPU "
            f"(torch.cuda.is_available() is {torch.cuda.is_available()}). Use --mixed-precision bf16 "
            "(bfloat16 autocast works on CPUs) or --mixed-precision no (float32)."
        )


def check_backend(settings: TrainingSettings, device: torch.device) -> None:
    """Reject a DeepSpeed/FSDP request that cannot take effect on ``device``, before any work is done.

    Args:
        settings: the run's settings (``deepspeed``, ``fsdp``).
        device: the device training will run on (e.g. ``process_state().device``).

    Raises:
        ValueError: ``settings.deepspeed`` is set but the ``deepspeed`` package is not installed; or
            ``settings.fsdp`` on a CPU: accelerate shards only over GPU (or other accelerator) processes
            and would silently train CPU processes with plain DDP instead. The message names the option
            and the fix.
    """
    if settings.deepspeed is not None and importlib.util.find_spec("deepspeed") is None:
        raise ValueError(
            f"--deepspeed {settings.deepspeed} needs the deepspeed package, which is not installed "
            "(pip install deepspeed); or train without --deepspeed."
        )
    if settings.fsdp and torch.device(device).type == "cpu":
        raise ValueError(
            "--fsdp needs GPUs: this process trains on the CPU, where accelerate does not shard and would "
            "silently train with plain DDP. Drop --fsdp/--fsdp-config (several CPU processes under torchrun "
            "already train data-parallel)."
        )
