"""The parameter-initialisation hook of srformer's modules.

Every module with parameters or seeded buffers of its own (each cross-attention mechanism, the RAF's
:class:`~srformer.attention.raf.ScaledLinear` and :class:`~srformer.attention.raf.RecurrentAccumulateAndFire`)
gives their initial values in one method, ``initialize_parameters(init)``, written against a namespace of
in-place init functions (:class:`InitFunctions`) rather than against ``torch.nn.init`` directly. The module calls
it with :data:`TORCH_INIT` at construction; a converted model's weight initialisation
(:func:`srformer.models.install.initialize_srformer_module`) calls it with transformers' guarded
``transformers.initialization``, whose functions leave a tensor already loaded from a checkpoint alone. Both give
the same numbers for a tensor that is not loaded.
"""

from __future__ import annotations

from types import SimpleNamespace
from typing import Any, Protocol, runtime_checkable

import torch
from torch import nn

__all__ = ["TORCH_INIT", "InitFunctions", "OwnInitialization"]


class InitFunctions(Protocol):
    """The in-place init functions a module's ``initialize_parameters`` may call (the names and signatures of
    ``torch.nn.init``, plus ``copy_``); each returns the tensor it filled."""

    def uniform_(self, tensor: torch.Tensor, a: float = 0.0, b: float = 1.0) -> torch.Tensor: ...

    def normal_(self, tensor: torch.Tensor, mean: float = 0.0, std: float = 1.0) -> torch.Tensor: ...

    def constant_(self, tensor: torch.Tensor, val: float) -> torch.Tensor: ...

    def zeros_(self, tensor: torch.Tensor) -> torch.Tensor: ...

    def copy_(self, tensor: torch.Tensor, other: torch.Tensor) -> torch.Tensor: ...


def _copy_(tensor: torch.Tensor, other: torch.Tensor) -> torch.Tensor:
    """``tensor.copy_(other)`` without recording it for autograd (as the ``torch.nn.init`` functions)."""
    with torch.no_grad():
        return tensor.copy_(other)


#: ``torch.nn.init``'s functions (unguarded: they always write) and ``copy_``: the namespace a module initialises
#: itself with at construction.
TORCH_INIT: Any = SimpleNamespace(
    uniform_=nn.init.uniform_, normal_=nn.init.normal_, constant_=nn.init.constant_, zeros_=nn.init.zeros_,
    copy_=_copy_,
)


@runtime_checkable
class OwnInitialization(Protocol):
    """A module that initialises its own parameters and seeded buffers (not its children's: each module is called
    on its own, children first)."""

    def initialize_parameters(self, init: InitFunctions) -> None:
        """Give this module's own parameters and seeded buffers their initial values through ``init``'s functions
        (in place; with transformers' guarded functions a loaded tensor keeps its value)."""
        ...
