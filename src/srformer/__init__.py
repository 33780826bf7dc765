"""srformer: Segmented Recurrent Transformer cross attention for Hugging Face seq2seq models."""

from srformer.config import VARIANTS, SRformerConfig
from srformer.models.convert import convert, from_pretrained

__version__ = "0.1.0"

__all__ = ["VARIANTS", "SRformerConfig", "__version__", "convert", "from_pretrained"]
