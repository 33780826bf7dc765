"""srformer's model classes: the converted models' config classes with model types of srformer's own
(``srformer_t5``, ``srformer_bart``, ...), the model classes (``SRformerT5ForConditionalGeneration``, ...) that
rebuild the SRformer cross attention from ``config.srformer`` and initialise its parameters with srformer's
scheme, and the conversion of a built model (:func:`attach_cross_attention`): where its cross attention sits, its
re-classing to these classes, then :func:`~srformer.models.install.install_cross_attention`.

:mod:`srformer.models.auto` registers these classes with transformers' Auto classes;
:func:`srformer.models.convert` converts a plain model through :func:`attach_cross_attention`.
"""

from __future__ import annotations

import warnings
from functools import cache
from typing import TYPE_CHECKING, Any

import torch
import transformers
from torch import nn
from transformers import PretrainedConfig, PreTrainedModel

from srformer.core import SRformerConfig, keeps_own_attention
from srformer.models.chunked_encoding import RECORDABLE_OUTPUTS, check_expanded_memory
from srformer.models.families import CROSS_ATTENTION_ATTRIBUTES, FAMILIES, Family, attention_types
from srformer.models.families.calls import MIXINS
from srformer.models.install import initialize_srformer_module, install_cross_attention, srformer_config_of

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
    if RECORDABLE_OUTPUTS is not None:
        RECORDABLE_OUTPUTS[module] = module._can_record_outputs


def adopt_srformer_classes(
    model: PreTrainedModel, found: list[tuple[nn.Module, str, nn.Module]], config: SRformerConfig
) -> None:
    """Record ``config`` in ``model.config.srformer``, give the config srformer's model type of its family and
    re-class the model, and every inner ``PreTrainedModel`` holding one of the cross-attention modules ``found``
    (``T5Stack``, ``BartModel``, ``BartDecoder``: their ``_init_weights`` initialise the modules under them), to
    srformer's subclasses; the inner models' configs get the settings too (:func:`record_settings`)."""
    model.config.srformer = config.to_dict()
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
    targets = {id(module) for _, _, module in found}
    holders = [name for name, module in model.named_modules() if id(module) in targets]
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


def cross_attention_modules(model: nn.Module) -> list[tuple[nn.Module, str, nn.Module]]:
    """Every decoder cross-attention module of ``model``: each module held by a decoder layer under one of its
    family's attribute names (:data:`~srformer.models.families.CROSS_ATTENTION_ATTRIBUTES`).

    Returns:
        ``(parent, attribute, module)`` triples in module order.
    """
    found = []
    for parent in model.modules():
        for attribute in CROSS_ATTENTION_ATTRIBUTES:
            child = getattr(parent, attribute, None)
            if isinstance(child, nn.Module):
                found.append((parent, attribute, child))
    return found


def is_converted(model: nn.Module) -> bool:
    """True if any cross-attention module of ``model`` is already an SRformer module."""
    return any(isinstance(m, tuple(MIXINS.values())) for m in model.modules())


def attach_cross_attention(model: PreTrainedModel, config: SRformerConfig) -> PreTrainedModel:
    """Convert ``model`` in place to ``config``'s cross attention: find its decoder cross attention
    (:func:`cross_attention_modules`), give the model and its config srformer's classes
    (:func:`adopt_srformer_classes`), then put the new modules in and initialise them through the model's
    ``_init_weights`` (:func:`~srformer.models.install.install_cross_attention`, which also installs chunked
    encoding's settings). ``full`` keeps the model's classes and only records the settings. No checks of the
    model's history: :func:`srformer.models.convert` makes them for a plain model; a model class of this module
    calls this while it is built from a converted checkpoint's config.

    Raises:
        ValueError: if the model has no decoder cross attention or one of a class srformer does not convert (the
            model is left unchanged).
    """
    found = cross_attention_modules(model)
    # re-classed only where install_cross_attention will accept the model: it refuses the others unchanged
    if found and not keeps_own_attention(config.variant) and all(
        isinstance(module, attention_types()) for _, _, module in found
    ):
        adopt_srformer_classes(model, found, config)
    install_cross_attention(model, config, found)
    return model
