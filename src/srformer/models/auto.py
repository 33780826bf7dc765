"""Converted models in transformers' own machinery: model types of srformer's own, Auto-class registration
and weight initialisation.

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

The srformer classes also own the initialisation of srformer's parameters on transformers' path
(``init_weights()``, meta-device construction then ``to_empty()``, missing keys in ``from_pretrained``):
their ``_init_weights`` gives the RAF ``W`` srformer's ``raf_linear_init_scale``, the RAF leak and threshold
their initial values and the Eq. 10 mix logit ``logit(mix_init)``, and passes every other module to the
family's own ``_init_weights``.
"""

from __future__ import annotations

import importlib
from functools import cache
from typing import TYPE_CHECKING, Any

import torch
from torch import nn
from transformers import (
    AutoConfig,
    AutoModel,
    AutoModelForSeq2SeqLM,
    AutoTokenizer,
    BartConfig,
    BartForConditionalGeneration,
    BartModel,
    MarianConfig,
    MarianModel,
    MarianMTModel,
    MBartConfig,
    MBartForConditionalGeneration,
    MBartModel,
    MT5Config,
    MT5ForConditionalGeneration,
    MT5Model,
    PegasusConfig,
    PegasusForConditionalGeneration,
    PegasusModel,
    PretrainedConfig,
    PreTrainedModel,
    T5Config,
    T5ForConditionalGeneration,
    T5Model,
)
from transformers import initialization as init
from transformers.models.auto.tokenization_auto import TOKENIZER_MAPPING

from srformer.attention.initialization import OwnInitialization


def _recordable_outputs_registry() -> Any:
    """transformers' registry of recordable outputs (``output_hidden_states``, ...) keyed by model class, or
    None for a transformers version that records outputs another way."""
    try:
        module = importlib.import_module("transformers.utils.output_capturing")
    except ImportError:
        return None
    return getattr(module, "_CAN_RECORD_REGISTRY", None)


_CAN_RECORD_REGISTRY = _recordable_outputs_registry()

# mypy sees the mixin as a PreTrainedModel (for super()._init_weights); at run time it is a plain mixin
# placed before the transformers class in each srformer class's bases.
_MixinBase: Any = PreTrainedModel if TYPE_CHECKING else object


def initialize_srformer_module(module: nn.Module) -> bool:
    """srformer's initialisation of one module of a converted model's cross attention (its own parameters only):
    the module's ``initialize_parameters`` (:class:`~srformer.attention.initialization.OwnInitialization`: every
    cross-attention mechanism, the RAF and its ``W``), called with transformers' guarded init functions
    (``transformers.initialization``), so parameters already loaded from a checkpoint are left alone. Each
    mechanism's method documents its values (e.g. the RAF ``W`` uniform in ``±raf_linear_init_scale / sqrt(d)``,
    the RAF leak and threshold their initial values, the Eq. 10 mix logit ``logit(mix_init)``).

    Returns:
        True if ``module`` initialises itself this way (and was initialised), False for any other module.
    """
    if isinstance(module, OwnInitialization):
        module.initialize_parameters(init)
        return True
    return False


class SRformerModelMixin(_MixinBase):
    """What every srformer model class adds to its transformers class.

    - ``__init__(config)`` builds the transformers model, then converts it with the settings stored in
      ``config.srformer`` (so ``from_pretrained``/``from_config`` of a converted checkpoint rebuild the
      converted model).
    - ``_init_weights(module)`` initialises srformer's modules with srformer's own scheme
      (:func:`initialize_srformer_module`) and every other module with the family's own.

    Raises:
        ValueError: from ``__init__``, if ``config`` has no ``srformer`` settings.
    """

    def __init__(self, config: PretrainedConfig, *args: Any, **kwargs: Any) -> None:
        from srformer.models.convert import convert, srformer_config_of

        settings = srformer_config_of(config)
        if settings is None:
            raise ValueError(
                f"{type(self).__name__} is a converted model and needs SRformer settings in `config.srformer`; "
                "convert a plain model with srformer.convert(model, SRformerConfig(...)) instead."
            )
        super().__init__(config, *args, **kwargs)
        convert(self, settings, _loading=True)

    @torch.no_grad()
    def _init_weights(self, module: nn.Module) -> None:
        if not initialize_srformer_module(module):
            super()._init_weights(module)


# ---------------------------------------------------------------------------------------------- configs
class SRformerT5Config(T5Config):
    """``T5Config`` of a converted T5 model (model type ``srformer_t5``); settings in ``config.srformer``."""

    model_type = "srformer_t5"


class SRformerMT5Config(MT5Config):
    """``MT5Config`` of a converted mT5 model (model type ``srformer_mt5``); settings in ``config.srformer``."""

    model_type = "srformer_mt5"


class SRformerBartConfig(BartConfig):
    """``BartConfig`` of a converted BART model (model type ``srformer_bart``); settings in ``config.srformer``."""

    model_type = "srformer_bart"


class SRformerMBartConfig(MBartConfig):
    """``MBartConfig`` of a converted mBART model (model type ``srformer_mbart``); settings in ``config.srformer``."""

    model_type = "srformer_mbart"


class SRformerPegasusConfig(PegasusConfig):
    """``PegasusConfig`` of a converted Pegasus model (model type ``srformer_pegasus``)."""

    model_type = "srformer_pegasus"


class SRformerMarianConfig(MarianConfig):
    """``MarianConfig`` of a converted Marian model (model type ``srformer_marian``)."""

    model_type = "srformer_marian"


# ----------------------------------------------------------------------------------------------- models
class SRformerT5ForConditionalGeneration(SRformerModelMixin, T5ForConditionalGeneration):
    """``T5ForConditionalGeneration`` with SRformer cross attention (``AutoModelForSeq2SeqLM``)."""

    config_class = SRformerT5Config


class SRformerT5Model(SRformerModelMixin, T5Model):
    """``T5Model`` with SRformer cross attention (``AutoModel``)."""

    config_class = SRformerT5Config


class SRformerMT5ForConditionalGeneration(SRformerModelMixin, MT5ForConditionalGeneration):
    """``MT5ForConditionalGeneration`` with SRformer cross attention (``AutoModelForSeq2SeqLM``)."""

    config_class = SRformerMT5Config


class SRformerMT5Model(SRformerModelMixin, MT5Model):
    """``MT5Model`` with SRformer cross attention (``AutoModel``)."""

    config_class = SRformerMT5Config


class SRformerBartForConditionalGeneration(SRformerModelMixin, BartForConditionalGeneration):
    """``BartForConditionalGeneration`` with SRformer cross attention (``AutoModelForSeq2SeqLM``)."""

    config_class = SRformerBartConfig


class SRformerBartModel(SRformerModelMixin, BartModel):
    """``BartModel`` with SRformer cross attention (``AutoModel``)."""

    config_class = SRformerBartConfig


class SRformerMBartForConditionalGeneration(SRformerModelMixin, MBartForConditionalGeneration):
    """``MBartForConditionalGeneration`` with SRformer cross attention (``AutoModelForSeq2SeqLM``)."""

    config_class = SRformerMBartConfig


class SRformerMBartModel(SRformerModelMixin, MBartModel):
    """``MBartModel`` with SRformer cross attention (``AutoModel``)."""

    config_class = SRformerMBartConfig


class SRformerPegasusForConditionalGeneration(SRformerModelMixin, PegasusForConditionalGeneration):
    """``PegasusForConditionalGeneration`` with SRformer cross attention (``AutoModelForSeq2SeqLM``)."""

    config_class = SRformerPegasusConfig


class SRformerPegasusModel(SRformerModelMixin, PegasusModel):
    """``PegasusModel`` with SRformer cross attention (``AutoModel``)."""

    config_class = SRformerPegasusConfig


class SRformerMarianMTModel(SRformerModelMixin, MarianMTModel):
    """``MarianMTModel`` with SRformer cross attention (``AutoModelForSeq2SeqLM``)."""

    config_class = SRformerMarianConfig


class SRformerMarianModel(SRformerModelMixin, MarianModel):
    """``MarianModel`` with SRformer cross attention (``AutoModel``)."""

    config_class = SRformerMarianConfig


#: transformers config class -> srformer config class (exact classes: a subclass of T5Config with its own
#: model type is another model).
CONFIG_CLASSES: dict[type[PretrainedConfig], type[PretrainedConfig]] = {
    T5Config: SRformerT5Config,
    MT5Config: SRformerMT5Config,
    BartConfig: SRformerBartConfig,
    MBartConfig: SRformerMBartConfig,
    PegasusConfig: SRformerPegasusConfig,
    MarianConfig: SRformerMarianConfig,
}

#: (transformers class, srformer class, the Auto class it is registered with).
REGISTERED_MODELS: tuple[tuple[type[PreTrainedModel], type[PreTrainedModel], Any], ...] = (
    (T5ForConditionalGeneration, SRformerT5ForConditionalGeneration, AutoModelForSeq2SeqLM),
    (T5Model, SRformerT5Model, AutoModel),
    (MT5ForConditionalGeneration, SRformerMT5ForConditionalGeneration, AutoModelForSeq2SeqLM),
    (MT5Model, SRformerMT5Model, AutoModel),
    (BartForConditionalGeneration, SRformerBartForConditionalGeneration, AutoModelForSeq2SeqLM),
    (BartModel, SRformerBartModel, AutoModel),
    (MBartForConditionalGeneration, SRformerMBartForConditionalGeneration, AutoModelForSeq2SeqLM),
    (MBartModel, SRformerMBartModel, AutoModel),
    (PegasusForConditionalGeneration, SRformerPegasusForConditionalGeneration, AutoModelForSeq2SeqLM),
    (PegasusModel, SRformerPegasusModel, AutoModel),
    (MarianMTModel, SRformerMarianMTModel, AutoModelForSeq2SeqLM),
    (MarianModel, SRformerMarianModel, AutoModel),
)

#: transformers model class -> srformer model class, for the registered classes.
MODEL_CLASSES: dict[type[PreTrainedModel], type[PreTrainedModel]] = {base: own for base, own, _ in REGISTERED_MODELS}


def srformer_config_class(config_class: type) -> type[PretrainedConfig] | None:
    """The srformer config class for ``config_class`` (itself if it already is one), or None for a config
    class srformer has no model type for."""
    if config_class in CONFIG_CLASSES.values():
        return config_class
    return CONFIG_CLASSES.get(config_class)


def srformer_model_class(model_class: type[PreTrainedModel]) -> type[PreTrainedModel]:
    """The srformer class of a transformers model class: the registered one (:data:`MODEL_CLASSES`), else a
    subclass ``SRformer<Name>`` with :class:`SRformerModelMixin` made here (not registered with an Auto class;
    used for inner models such as ``T5Stack`` and for other heads such as ``BartForSequenceClassification``).
    A class that already is an srformer class is returned unchanged."""
    if issubclass(model_class, SRformerModelMixin):
        return model_class
    if model_class in MODEL_CLASSES:
        return MODEL_CLASSES[model_class]
    hashable: type = model_class  # a class is hashable (the cache's key)
    return _made_class(hashable)


@cache
def _made_class(model_class: type) -> type[PreTrainedModel]:
    made: type[PreTrainedModel] = type(
        f"SRformer{model_class.__name__}", (SRformerModelMixin, model_class), {"__module__": __name__}
    )
    return made


def adopt_class(module: PreTrainedModel, model_class: type[PreTrainedModel]) -> None:
    """Re-class ``module`` (a built ``PreTrainedModel``) to ``model_class``, a subclass of its class.

    transformers' output recording (``output_hidden_states=True``, ...) looks a model's recordable outputs up
    by its class in a registry that ``PreTrainedModel.__init__`` fills; a module re-classed without running
    ``__init__`` is entered there the same way, else its hidden states would silently not be returned."""
    module.__class__ = model_class
    if _CAN_RECORD_REGISTRY is not None:
        _CAN_RECORD_REGISTRY[module] = module._can_record_outputs


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
