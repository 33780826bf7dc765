"""srformer's model classes: the converted models' config classes with model types of srformer's own
(``srformer_t5``, ``srformer_bart``, ...), the model classes (``SRformerT5ForConditionalGeneration``, ...) that
rebuild the SRformer cross attention from ``config.srformer`` and initialise its parameters with srformer's
scheme, and the re-classing of a converted model to them (:func:`attach_cross_attention`).

:mod:`srformer.models.auto` registers these classes with transformers' Auto classes;
:func:`srformer.models.convert` converts a plain model through :func:`attach_cross_attention`.
"""

from __future__ import annotations

import importlib
import warnings
from functools import cache
from typing import TYPE_CHECKING, Any

import torch
import transformers
from torch import nn
from transformers import PretrainedConfig, PreTrainedModel

from srformer.core import SRformerConfig
from srformer.models.chunked_encoding import (
    ChunkedEncoderMixin,
    check_expanded_memory,
    chunked_class,
    model_encoder,
    resolve_window_settings,
)
from srformer.models.families import FAMILIES, Family
from srformer.models.families.calls import MIXINS
from srformer.models.install import (
    cross_attention_modules,
    initialize_added_modules,
    initialize_srformer_module,
    install_cross_attention,
    srformer_config_of,
)


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


class SRformerModelMixin(_MixinBase):
    """What every srformer model class adds to its transformers class.

    - ``__init__(config)`` builds the transformers model, then converts it with the settings stored in
      ``config.srformer`` (so ``from_pretrained``/``from_config`` of a converted checkpoint rebuild the
      converted model).
    - ``_init_weights(module)`` initialises srformer's modules with srformer's own scheme
      (:func:`initialize_srformer_module`) and every other module with the family's own.
    - A class without decoder cross attention (an encoder-only head such as ``T5EncoderModel``) is built as the
      plain transformers class, with a ``UserWarning`` that the SRformer settings do not apply.

    Raises:
        ValueError: from ``__init__``, if ``config`` has no ``srformer`` settings.
    """

    def __init__(self, config: PretrainedConfig, *args: Any, **kwargs: Any) -> None:
        settings = srformer_config_of(config)
        if settings is None:
            raise ValueError(
                f"{type(self).__name__} is a converted model and needs SRformer settings in `config.srformer`; "
                "convert a plain model with srformer.convert(model, SRformerConfig(...)) instead."
            )
        super().__init__(config, *args, **kwargs)
        if not cross_attention_modules(self):  # an encoder-only head (T5EncoderModel, T5ForTokenClassification)
            plain = plain_model_class(type(self))
            warnings.warn(
                f"{plain.__name__} has no decoder cross attention, so the SRformer settings in `config.srformer` "
                f"(variant {settings.variant!r}) do not apply: it is loaded as the plain {plain.__name__}.",
                UserWarning,
                stacklevel=2,
            )
            adopt_class(self, plain)
            return
        attach_cross_attention(self, settings)

    @torch.no_grad()
    def _init_weights(self, module: nn.Module) -> None:
        if not initialize_srformer_module(module):
            super()._init_weights(module)

    def _expand_inputs_for_generation(
        self, expand_size: int = 1, is_encoder_decoder: bool = False, input_ids: Any = None, **model_kwargs: Any
    ) -> Any:
        """transformers' copying of the inputs and encoder output for beams (or several returned sequences), after
        refusing a chunked input whose generation state would then not fit
        (:func:`~srformer.models.chunked_encoding.check_expanded_memory`; ``MemoryError``)."""
        encoder_outputs = model_kwargs.get("encoder_outputs")
        if expand_size > 1 and encoder_outputs is not None:
            check_expanded_memory(self, encoder_outputs[0], expand_size)
        return super()._expand_inputs_for_generation(
            expand_size=expand_size, is_encoder_decoder=is_encoder_decoder, input_ids=input_ids, **model_kwargs
        )


# ------------------------------------------------------------------------------------- configs and models
def _own_class(name: str, bases: tuple[type, ...], namespace: dict[str, Any]) -> Any:
    """A class made here and reachable as ``srformer.models.classes.<name>`` (so that it pickles)."""
    made = type(name, bases, {"__module__": __name__, "__qualname__": name, **namespace})
    globals()[name] = made
    return made


def _family_config(family: Family) -> type[PretrainedConfig]:
    """``SRformer<Config>``: the family's config class with model type ``srformer_<family>``."""
    base = family.config_type
    made: type[PretrainedConfig] = _own_class(f"SRformer{base.__name__}", (base,), {
        "model_type": f"srformer_{family.name}",
        "__doc__": f"``{base.__name__}`` of a converted {family.name} model (model type ``srformer_{family.name}``); "
                   "settings in ``config.srformer``.",
    })
    return made


def _family_models(family: Family, config_class: type[PretrainedConfig]) -> list[tuple[type, type, Any]]:
    """``(transformers class, srformer class, Auto class)`` of each of the family's registered heads."""
    registered = []
    for class_name, auto_name in family.heads:
        base = getattr(transformers, class_name)
        made = _own_class(f"SRformer{class_name}", (SRformerModelMixin, base), {
            "config_class": config_class,
            "__doc__": f"``{class_name}`` with SRformer cross attention (``{auto_name}``).",
        })
        registered.append((base, made, getattr(transformers, auto_name)))
    return registered


#: transformers config class -> srformer config class (exact classes: a subclass of T5Config with its own
#: model type is another model), one per family.
CONFIG_CLASSES: dict[type[PretrainedConfig], type[PretrainedConfig]] = {
    family.config_type: _family_config(family) for family in FAMILIES
}

#: (transformers class, srformer class, the Auto class it is registered with), for every family's ``heads``.
REGISTERED_MODELS: tuple[tuple[type[PreTrainedModel], type[PreTrainedModel], Any], ...] = tuple(
    entry for family in FAMILIES for entry in _family_models(family, CONFIG_CLASSES[family.config_type])
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
    namespace: dict[str, Any] = {"__module__": __name__}
    own_config = srformer_config_class(getattr(model_class, "config_class", None) or PretrainedConfig)
    if own_config is not None:  # so that its config loads as srformer's type, and its Auto class accepts it
        namespace["config_class"] = own_config
    made: type[PreTrainedModel] = type(f"SRformer{model_class.__name__}", (SRformerModelMixin, model_class), namespace)
    return made


def plain_model_class(model_class: type[PreTrainedModel]) -> type[PreTrainedModel]:
    """The transformers class an srformer class derives from (``T5ForConditionalGeneration`` for
    ``SRformerT5ForConditionalGeneration``); a class that is no srformer class is returned unchanged."""
    plain: Any = next(cls for cls in model_class.__mro__ if not issubclass(cls, SRformerModelMixin))
    return plain


def adopt_class(module: PreTrainedModel, model_class: type[PreTrainedModel]) -> None:
    """Re-class ``module`` (a built ``PreTrainedModel``) to ``model_class``, a subclass of its class.

    transformers' output recording (``output_hidden_states=True``, ...) looks a model's recordable outputs up
    by its class in a registry that ``PreTrainedModel.__init__`` fills; a module re-classed without running
    ``__init__`` is entered there the same way, else its hidden states would silently not be returned."""
    module.__class__ = model_class
    if _CAN_RECORD_REGISTRY is not None:
        _CAN_RECORD_REGISTRY[module] = module._can_record_outputs


def adopt_srformer_classes(model: PreTrainedModel) -> None:
    """Give the config srformer's model type of its family and re-class the model, and every inner
    ``PreTrainedModel`` holding converted cross attention (``T5Stack``, ``BartModel``, ``BartDecoder``: their
    ``_init_weights`` initialise the modules under them), to srformer's subclasses."""
    config_class = srformer_config_class(type(model.config))
    if config_class is None:
        warnings.warn(
            f"srformer has no model type for {type(model.config).__name__}: after save_pretrained, transformers' "
            "Auto classes would load this checkpoint without SRformer cross attention. Load it with "
            "srformer.from_pretrained(path).",
            UserWarning,
            stacklevel=3,
        )
    else:
        model.config.__class__ = config_class
    converted = tuple(MIXINS.values())
    holders = {name for name, module in model.named_modules() if isinstance(module, converted)}
    for name, module in model.named_modules():
        if isinstance(module, PreTrainedModel) and (
            module is model or any(holder.startswith(name + ".") for holder in holders)
        ):
            adopt_class(module, srformer_model_class(type(module)))
            record_settings(module, model.config)


def record_settings(module: PreTrainedModel, config: PretrainedConfig) -> None:
    """Give an inner model's own config (T5's decoder ``T5Stack`` holds a copy of the model's) the model's
    SRformer settings and config class, so that the inner model saved on its own
    (``model.get_decoder().save_pretrained(dir)``) reloads converted."""
    inner = module.config
    if inner is config:
        return
    inner.srformer = dict(config.srformer)
    inner_class = srformer_config_class(type(inner))
    if inner_class is not None:
        inner.__class__ = inner_class


def attach_cross_attention(model: PreTrainedModel, config: SRformerConfig) -> PreTrainedModel:
    """Put ``config``'s cross attention into ``model`` (:func:`~srformer.models.install.install_cross_attention`),
    give the model and its config srformer's classes (:func:`adopt_srformer_classes`) and initialise the new
    modules through the model's ``_init_weights``; ``full`` only records the settings. No checks of the model's
    history: :func:`srformer.models.convert` makes them for a plain model; a model class of this module calls
    this while it is built from a converted checkpoint's config.

    Raises:
        ValueError: if the model has no supported decoder cross attention.
    """
    added = install_cross_attention(model, config)
    if added:
        adopt_srformer_classes(model)
        initialize_added_modules(model, added)
    install_windows(model, config)
    return model


def install_windows(model: PreTrainedModel, config: SRformerConfig) -> None:
    """Give ``model``'s encoder chunked encoding with ``config``'s ``encoder_window``, ``window_overlap`` and
    ``window_batch_size`` (:mod:`srformer.models.chunked_encoding`): the encoder is re-classed to a subclass of its
    class (weights and state dict unchanged) holding the resolved settings. Called again, it updates them.

    An encoder that reads every input whole by default (LongT5, :func:`~srformer.models.chunked_encoding.
    default_window` None) is left as it is unless ``encoder_window`` is set.

    Raises:
        ValueError: for an ``encoder_window`` larger than the positions of a model with a position table.
    """
    encoder = model_encoder(model)
    if encoder is None:
        return
    settings = resolve_window_settings(
        model.config, config.encoder_window, config.window_overlap, config.window_batch_size
    )
    if settings is None and not isinstance(encoder, ChunkedEncoderMixin):
        return  # an encoder that reads every input whole (LongT5) stays the family's own
    if not isinstance(encoder, ChunkedEncoderMixin):
        encoder_class: Any = type(encoder)  # a class is hashable (the cache's key)
        if isinstance(encoder, PreTrainedModel):
            adopt_class(encoder, chunked_class(encoder_class))
        else:
            encoder.__class__ = chunked_class(encoder_class)
    chunked: Any = encoder
    chunked.srformer_windows = settings
    chunked.srformer_config = config
