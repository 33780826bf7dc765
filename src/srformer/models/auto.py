"""Converted models in transformers' own machinery: model types of srformer's own and their Auto-class
registration (the classes themselves: :mod:`srformer.models.classes`).

A converted checkpoint must never reload as the unconverted model. :func:`~srformer.models.convert` therefore
gives a converted model (variants other than ``full``) a config class with a model type of srformer's own,
one per family (``srformer_t5``, ``srformer_mt5``, ``srformer_bart``, ``srformer_mbart``,
``srformer_pegasus``, ``srformer_marian``), and re-classes the model to the matching subclass
(``SRformerT5ForConditionalGeneration``, ``SRformerBartModel``, ...). ``save_pretrained`` then writes that
model type and class name into ``config.json``. Importing srformer registers the types with transformers'
extension points (``AutoConfig.register``, ``AutoTokenizer.register``, and the ``register`` of every Auto model
class of :data:`AUTO_CLASSES` that maps the family), so ``AutoModelForSeq2SeqLM.from_pretrained(dir)``,
``AutoModel.from_pretrained(dir)`` and the other heads' Auto classes rebuild the converted model (a head with a
decoder with converted cross attention; an encoder-only head, which has none, as the plain class with a warning).
transformers' concrete classes load a converted checkpoint converted too (:mod:`srformer.models.concrete`). Where
srformer is not imported, transformers does not know the model type and ``AutoConfig``/``AutoModel*`` raise
``ValueError`` (no checkpoint code is written, so ``trust_remote_code`` does not apply).

The srformer classes (:mod:`srformer.models.classes`) also own the initialisation of srformer's parameters on
transformers' path
(``init_weights()``, meta-device construction then ``to_empty()``, missing keys in ``from_pretrained``):
their ``_init_weights`` gives the RAF ``W`` srformer's ``raf_linear_init_scale``, the RAF leak and threshold
their initial values and the Eq. 10 mix logit ``logit(mix_init)``, and passes every other module to the
family's own ``_init_weights``.
"""

from __future__ import annotations

from typing import Any

import transformers
from transformers import (
    AutoConfig,
    AutoModel,
    AutoModelForCausalLM,
    AutoModelForMaskedLM,
    AutoModelForPreTraining,
    AutoModelForQuestionAnswering,
    AutoModelForSeq2SeqLM,
    AutoModelForSequenceClassification,
    AutoModelForTextEncoding,
    AutoModelForTokenClassification,
    AutoTokenizer,
    PretrainedConfig,
    PreTrainedModel,
)
from transformers.models.auto import modeling_auto
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
from srformer.models.concrete import install as install_concrete_loading
from srformer.models.install import initialize_srformer_module

__all__ = [
    "AUTO_CLASSES", "CONFIG_CLASSES", "MODEL_CLASSES", "REGISTERED_MODELS", "SRformerModelMixin", "adopt_class",
    "family_heads", "initialize_srformer_module", "srformer_config_class", "srformer_model_class",
]

#: Every Auto model class of transformers that maps a supported family (t5, mt5, bart, mbart, pegasus, marian) to a
#: class, with the name of its table of class names in ``transformers.models.auto.modeling_auto``.
AUTO_CLASSES: tuple[tuple[Any, str], ...] = (
    (AutoModel, "MODEL_MAPPING_NAMES"),
    (AutoModelForSeq2SeqLM, "MODEL_FOR_SEQ_TO_SEQ_CAUSAL_LM_MAPPING_NAMES"),
    (AutoModelForSequenceClassification, "MODEL_FOR_SEQUENCE_CLASSIFICATION_MAPPING_NAMES"),
    (AutoModelForQuestionAnswering, "MODEL_FOR_QUESTION_ANSWERING_MAPPING_NAMES"),
    (AutoModelForTokenClassification, "MODEL_FOR_TOKEN_CLASSIFICATION_MAPPING_NAMES"),
    (AutoModelForCausalLM, "MODEL_FOR_CAUSAL_LM_MAPPING_NAMES"),
    (AutoModelForMaskedLM, "MODEL_FOR_MASKED_LM_MAPPING_NAMES"),
    (AutoModelForPreTraining, "MODEL_FOR_PRETRAINING_MAPPING_NAMES"),
    (AutoModelForTextEncoding, "MODEL_FOR_TEXT_ENCODING_MAPPING_NAMES"),
)


def family_heads(config_class: type[PretrainedConfig]) -> list[tuple[Any, type[PreTrainedModel]]]:
    """``(Auto class, transformers class)`` for every Auto class of :data:`AUTO_CLASSES` that maps the family of
    ``config_class`` (a transformers config class, e.g. ``T5Config``) to a class in this transformers version."""
    heads = []
    for auto_class, table in AUTO_CLASSES:
        name = getattr(modeling_auto, table, {}).get(config_class.model_type)
        model_class = getattr(transformers, name, None) if isinstance(name, str) else None
        if isinstance(model_class, type) and issubclass(model_class, PreTrainedModel):
            heads.append((auto_class, model_class))
    return heads


def _register() -> None:
    """Register every srformer config and model class with transformers' Auto classes, and wrap the concrete
    classes' ``from_pretrained`` (idempotent)."""
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
    heads = []
    for config_class, srformer_config in CONFIG_CLASSES.items():
        for auto_class, model_class in family_heads(config_class):
            # a head with decoder cross attention loads converted; an encoder-only one as the plain class, with a
            # warning (SRformerModelMixin)
            auto_class.register(srformer_config, srformer_model_class(model_class), exist_ok=True)
            heads.append(model_class)
    install_concrete_loading(heads)


_register()
