"""srformer: Segmented Recurrent Transformer cross attention for Hugging Face seq2seq models."""

from srformer.core import ABLATIONS, NAMED_SETTINGS, VARIANTS, SRformerConfig, named_config
from srformer.models.convert import convert, from_pretrained, set_runtime_options

__version__ = "0.1.0"

__all__ = [
    "ABLATIONS", "NAMED_SETTINGS", "VARIANTS", "SRformerConfig", "__version__",
    "convert", "from_pretrained", "named_config", "set_runtime_options",
]
