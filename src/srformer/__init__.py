"""srformer: Segmented Recurrent Transformer cross attention for Hugging Face seq2seq models.

``import srformer`` is light: it imports the ground floor (:mod:`srformer.core`) and no torch or transformers.
:func:`convert`, :func:`from_pretrained` and :func:`set_runtime_options` import :mod:`srformer.models.convert` on
first use (PEP 562), and srformer's model types are registered with transformers' Auto classes as soon as
transformers is imported too (:mod:`srformer.models.registration`).
"""

from __future__ import annotations

from typing import TYPE_CHECKING

from srformer.core import ABLATIONS, NAMED_SETTINGS, VARIANTS, SRformerConfig, named_config
from srformer.core.lazy import lazy_exports
from srformer.models.registration import register_with_transformers

if TYPE_CHECKING:
    from srformer.models.convert import convert, from_pretrained, set_runtime_options

__version__ = "0.1.0"

__all__ = [
    "ABLATIONS", "NAMED_SETTINGS", "VARIANTS", "SRformerConfig", "__version__",
    "convert", "from_pretrained", "named_config", "set_runtime_options",
]

__getattr__, __dir__ = lazy_exports(
    __name__, {"srformer.models.convert": ("convert", "from_pretrained", "set_runtime_options")}
)

register_with_transformers()
