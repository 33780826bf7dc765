"""Converted models in transformers' own machinery: model types of srformer's own and their Auto-class
registration (the classes themselves: :mod:`srformer.models.classes`).

A converted checkpoint must never reload as the unconverted model. :func:`~srformer.models.convert` therefore
gives a converted model (variants other than ``full``) a config class with a model type of srformer's own,
one per family (``srformer_t5``, ``srformer_mt5``, ``srformer_bart``, ``srformer_mbart``,
``srformer_pegasus``, ``srformer_marian``), and re-classes the model to the matching subclass
(``SRformerT5ForConditionalGeneration``, ``SRformerBartModel``, ...). ``save_pretrained`` then writes that
model type and class name into ``config.json``. Importing srformer registers the types with transformers'
extension points (``AutoConfig.register``, ``AutoModel.register``, ``AutoModelForSeq2SeqLM.register``,
``AutoTokenizer.register``), so ``AutoModelForSeq2SeqLM.from_pretrained(dir)`` and
``AutoModel.from_pretrained(dir)`` rebuild the converted model. Where srformer is not imported, transformers
does not know the model type and ``AutoConfig``/``AutoModel*`` raise ``ValueError`` (no checkpoint code is
written, so ``trust_remote_code`` does not apply).

The srformer classes (:mod:`srformer.models.classes`) also own the initialisation of srformer's parameters on
transformers' path
(``init_weights()``, meta-device construction then ``to_empty()``, missing keys in ``from_pretrained``):
their ``_init_weights`` gives the RAF ``W`` srformer's ``raf_linear_init_scale``, the RAF leak and threshold
their initial values and the Eq. 10 mix logit ``logit(mix_init)``, and passes every other module to the
family's own ``_init_weights``.
"""

from __future__ import annotations

from transformers import AutoConfig, AutoTokenizer
from transformers.models.auto.tokenization_auto import TOKENIZER_MAPPING

from srformer.models.classes import (
    CONFIG_CLASSES,
    MODEL_CLASSES,
    REGISTERED_MODELS,
    SRformerModelMixin,
    adopt_class,
    srformer_config_class,
    srformer_model_class,
)
from srformer.models.install import initialize_srformer_module

__all__ = [
    "CONFIG_CLASSES", "MODEL_CLASSES", "REGISTERED_MODELS", "SRformerModelMixin", "adopt_class",
    "initialize_srformer_module", "srformer_config_class", "srformer_model_class",
]


def _register() -> None:
    """Register every srformer config and model class with transformers' Auto classes (idempotent)."""
    for config_class, srformer_config in CONFIG_CLASSES.items():
        AutoConfig.register(srformer_config.model_type, srformer_config, exist_ok=True)
        try:
            tokenizer = TOKENIZER_MAPPING[config_class]
        except (KeyError, ImportError):  # no tokenizer (library) for this family here: nothing to map
            continue
        if tokenizer is not None:
            AutoTokenizer.register(srformer_config, tokenizer_class=tokenizer, exist_ok=True)
    for _, srformer_model, auto_class in REGISTERED_MODELS:
        auto_class.register(srformer_model.config_class, srformer_model, exist_ok=True)


_register()
