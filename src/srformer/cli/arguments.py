"""Argument groups shared by several sub-commands, and the parsing of their values.

Imported when the parsers are built (``srformer --help``), so it imports no torch or transformers."""

from __future__ import annotations

import argparse
from collections.abc import Sequence

from srformer.core import NAMED_SETTINGS, SRformerConfig, named_config, setting_types
from srformer.models.named_configs import NAMED_CONFIGS

#: ``--checkpoint`` of ``evaluate`` and ``summarize`` (the rule of :func:`srformer.models.factory.load_pretrained`).
CHECKPOINT_HELP = (
    "the --output directory of `srformer train`, any seq2seq save_pretrained directory, or a Hugging Face hub "
    "model id. A path that is absolute, starts with . or ~, or has more than two /-separated parts must exist; "
    "anything else that does not exist locally is loaded from the hub (an error says when it is neither)"
)

#: ``--model`` of ``train`` and ``compare``.
MODEL_HELP = (
    f"a named config built from scratch ({', '.join(NAMED_CONFIGS)}), a local checkpoint "
    "directory, or a Hugging Face hub model id. A path that is absolute, starts with . or ~, or has more than two "
    "/-separated parts must exist; anything else that does not exist locally is loaded from the hub (an error says "
    "when it is neither)"
)

#: SRformerConfig fields that ``--setting`` may not set (they have flags of their own, or name the variant).
_OWN_FLAGS = ("variant", "segment_size", "target_length")


def add_variant_arguments(
    parser: argparse.ArgumentParser, *, variant_required: bool = True, variant_help: str | None = None
) -> None:
    """``--variant`` (a variant, ablation or mix name of :data:`srformer.config.NAMED_SETTINGS`),
    ``--segment-size`` (tokens), ``--target-length`` (tokens), ``--setting NAME=VALUE``."""
    parser.add_argument("--variant", choices=list(NAMED_SETTINGS), required=variant_required,
                        help=variant_help or "cross-attention variant, or an ablation (ablation-I..IV) / the Eq. 10 "
                                             "mix (srformer-sigma)")
    parser.add_argument("--segment-size", type=segment_size_argument, default=64,
                        help="encoder tokens per segment (s), or auto: ceil(input length / target length)")
    parser.add_argument("--target-length", type=int, default=128, help="fixed decoder length T of the segment schedule")
    parser.add_argument("--setting", action="append", default=[], metavar="NAME=VALUE",
                        help="any other SRformerConfig setting, repeatable, e.g. --setting window_size=192 "
                             "--setting raf_threshold_init=0.05 (see docs/design.md for each mechanism's settings)")


def segment_size_argument(text: str) -> int | str:
    """``--segment-size``: a positive int, or ``auto`` (:meth:`srformer.config.SRformerConfig.for_input_length`).

    Raises:
        argparse.ArgumentTypeError: for anything else.
    """
    if text == "auto":
        return text
    try:
        return int(text)
    except ValueError:
        raise argparse.ArgumentTypeError(f"expected a number of tokens or auto, got {text!r}") from None


def non_negative_int(text: str) -> int:
    """An integer of 0 or more (argparse ``type``).

    Raises:
        argparse.ArgumentTypeError: for anything else.
    """
    try:
        value = int(text)
    except ValueError:
        value = -1
    if value < 0:
        raise argparse.ArgumentTypeError(f"expected an integer of 0 or more, got {text!r}")
    return value


def parse_settings(values: list[str]) -> dict:
    """``--setting NAME=VALUE`` strings as :class:`~srformer.config.SRformerConfig` keyword arguments.

    VALUE is converted by the field's type: ``none`` gives None; ``true``/``false`` a bool; otherwise an int
    where the field takes one and the text is an integer, else a float.

    Raises:
        ValueError: naming ``--setting`` and the fix, for a malformed item, an unknown name, a name with a
            flag of its own (``variant``, ``segment_size``, ``target_length``), or a value of the wrong type.
    """
    fields = setting_types()
    settings: dict = {}
    for item in values:
        name, sep, text = item.partition("=")
        name, text = name.strip().replace("-", "_"), text.strip()
        if not sep or not name or not text:
            raise ValueError(f"--setting {item!r}: write NAME=VALUE, e.g. --setting window_size=192.")
        if name in _OWN_FLAGS:
            raise ValueError(f"--setting {name}: use --{name.replace('_', '-')} instead.")
        if name not in fields:
            known = ", ".join(sorted(set(fields) - set(_OWN_FLAGS)))
            raise ValueError(f"--setting {name}: not an SRformerConfig setting; choose from {known}.")
        kind = fields[name]
        lowered = text.lower()
        if lowered == "none":
            settings[name] = None
        elif "bool" in kind:
            if lowered not in ("true", "false"):
                raise ValueError(f"--setting {name}={text}: {name} takes true or false.")
            settings[name] = lowered == "true"
        elif "str" in kind:
            settings[name] = text
        else:
            try:
                settings[name] = int(text) if "int" in kind and text.lstrip("+-").isdigit() else float(text)
            except ValueError:
                raise ValueError(f"--setting {name}={text}: {name} takes a number ({kind}).") from None
    return settings


#: How the grid commands (``compare``, ``probe``) keep a run with settings of its own apart, for ``--setting``'s help.
GRID_SETTINGS_STORED = ("is recorded with every result; cells with settings get folders of their own "
                        "(cells/KEY@NAME=VALUE), so the registered setting's stay")


def add_variant_settings_argument(parser: argparse.ArgumentParser, stored: str = GRID_SETTINGS_STORED) -> None:
    """``--setting [VARIANT:]NAME=VALUE`` of the commands that run several named settings (``compare``, ``probe``,
    ``fidelity``); see :func:`parse_variant_settings`. ``stored``: how the command keeps the results of a named
    setting given settings of its own, the end of the help text."""
    parser.add_argument("--setting", action="append", default=[], metavar="[VARIANT:]NAME=VALUE",
                        help="an SRformerConfig setting, repeatable: without a prefix for every variant of the run "
                             "(e.g. --setting kv_clamp=10), with one for that named setting only (e.g. --setting "
                             "window:window_size=96 --setting srformer-surrogate:raf_surrogate_slope=4); it wins over "
                             f"the named setting's own value and {stored}")


def parse_shared_settings(values: list[str]) -> dict:
    """The ``--setting`` items without a ``VARIANT:`` prefix (those for every named setting of the run), parsed by
    :func:`parse_settings`.

    Raises:
        ValueError: as :func:`parse_settings`.
    """
    return parse_settings([item for item in values if ":" not in item.partition("=")[0]])


def parse_variant_settings(values: list[str], variants: Sequence[str]) -> dict[str, dict]:
    """``--setting [VARIANT:]NAME=VALUE`` strings as SRformerConfig keyword arguments per named setting.

    An item without a prefix applies to every name of ``variants``; ``VARIANT:NAME=VALUE`` applies to that
    named setting only and wins over an unprefixed item of the same NAME. NAME=VALUE is typed by
    :func:`parse_settings`. Whether each variant's config accepts its settings is checked where the configs
    are built (``CompareSettings`` / ``ProbeSettings``).

    Args:
        values: the ``--setting`` strings, in command-line order.
        variants: the named settings of the run (:data:`srformer.config.NAMED_SETTINGS` names).

    Returns:
        ``{name: settings}`` for every name of ``variants`` that gets at least one setting.

    Raises:
        ValueError: naming ``--setting`` and the fix, for a prefix that is not a named setting or not one of
            ``variants``, and everything :func:`parse_settings` raises.
    """
    prefixed: dict[str, list[str]] = {}
    for item in values:
        if ":" not in item.partition("=")[0]:  # for every variant: parse_shared_settings
            continue
        prefix, _, rest = item.partition(":")
        prefix = prefix.strip()
        if prefix not in NAMED_SETTINGS:
            raise ValueError(f"--setting {item!r}: {prefix!r} is not a named setting; write VARIANT:NAME=VALUE "
                             f"with VARIANT one of {', '.join(NAMED_SETTINGS)}.")
        if prefix not in variants:
            raise ValueError(f"--setting {item!r}: {prefix!r} is not among this run's variants "
                             f"({', '.join(variants)}); add it to --variants (or --ablations), or drop the prefix.")
        prefixed.setdefault(prefix, []).append(rest)
    common = parse_shared_settings(values)
    result = {name: {**common, **parse_settings(prefixed.get(name, []))} for name in variants}
    return {name: settings for name, settings in result.items() if settings}


def add_data_arguments(parser: argparse.ArgumentParser) -> None:
    """``--data`` and the field names."""
    parser.add_argument("--data", required=True, help="JSONL/JSON/CSV file, a hub dataset name, or 'aclsum'")
    parser.add_argument("--split", default=None,
                        help="split for hub datasets and 'aclsum' (train/val/test), or a part name of --split-by-id")
    parser.add_argument("--split-by-id", default=None, metavar="SPEC",
                        help="split the --data file by a stable hash of each example's id, e.g. "
                             "'train=0.8,validation=0.1,test=0.1', and use the part named by --split "
                             "(default: train for `train`, test for `evaluate`)")
    parser.add_argument("--document-field", default="document")
    parser.add_argument("--summary-field", default="summary")


def add_generation_arguments(parser: argparse.ArgumentParser) -> None:
    """Decoding options of ``evaluate`` and ``summarize``."""
    parser.add_argument("--num-beams", type=int, default=1)
    parser.add_argument("--max-new-tokens", type=int, default=128)
    parser.add_argument("--batch-size", type=int, default=8)
    parser.add_argument("--no-repeat-ngram-size", type=non_negative_int, default=0, metavar="N",
                        help="forbid repeating any N-gram within a summary (transformers' option; 0 = off, default; "
                             "compare decodes with 3)")
    parser.add_argument("--max-source-length", type=int, default=None,
                        help="input tokens kept per document (default: the training run's); an input longer than "
                             "the encoder window is encoded in windows")
    parser.add_argument("--encoder-window", type=int, default=None,
                        help="tokens per encoder window for long inputs (default: the checkpoint's, else the model's "
                             "own input limit); a plain checkpoint is run as full attention over the windows (SLED)")
    parser.add_argument("--window-overlap", type=float, default=None, help="share of a window shared with the next, "
                        "in [0, 1) (default 0.5)")
    parser.add_argument("--window-batch-size", type=int, default=None, help="windows per encoder call (default 8)")
    parser.add_argument("--knn-index", choices=("exact", "flat", "ivf", "rows", "loki"), default=None,
                        help="a knn checkpoint on long inputs: search a faiss index of the encoder output, exhaustive "
                             "(flat) or approximate (ivf), instead of every layer's keys (needs "
                             "pip install 'srformer[index]'); rows: search the encoder output's rows exhaustively in "
                             "torch on their device, keeping no keys or values; loki: score low-rank keys first and "
                             "read only the best candidates' rows; exact: the search of every layer's keys in torch "
                             "(default: the checkpoint's)")
    parser.add_argument("--index-min-keys", type=int, default=None,
                        help="with --knn-index: the shortest input (tokens) searched through the index (default 16384)")
    parser.add_argument("--index-probes", type=int, default=None,
                        help="with --knn-index ivf: cells scanned per query (default 32)")
    parser.add_argument("--index-rank", type=int, default=None,
                        help="with --knn-index loki: principal channels of each head's keys read per query "
                             "(default 12)")
    parser.add_argument("--index-candidates", type=int, default=None,
                        help="with --knn-index loki: keys per head scored exactly (default 256)")
    parser.add_argument("--no-progress", action="store_true", help="hide progress bars")


#: ``--variant`` of ``evaluate`` and ``summarize``: convert a plain checkpoint as it is loaded.
CONVERT_HELP = (
    "convert a plain checkpoint (T5, BART, LED, LongT5, PEGASUS-X, BigBirdPegasus, ...) to this named setting as it "
    "is loaded, with no training step (with --segment-size, --target-length, --setting); default: the checkpoint as "
    "it is (its own setting if it is an srformer checkpoint)"
)


def add_conversion_arguments(parser: argparse.ArgumentParser) -> None:
    """``--variant`` (:data:`CONVERT_HELP`), ``--segment-size``, ``--target-length``, ``--setting``, all optional."""
    add_variant_arguments(parser, variant_required=False, variant_help=CONVERT_HELP)


def loading_settings(args: argparse.Namespace) -> tuple[SRformerConfig | None, dict]:
    """What the options of ``evaluate``, ``summarize`` and ``copy-reach`` ask of the model they load, as
    :func:`srformer.evaluation.evaluate.load_summarizer` takes it: the settings ``--variant`` (with
    ``--segment-size``, ``--target-length``, ``--setting``) converts a plain checkpoint to, or None; and the runtime
    options ``--encoder-window``/``--window-overlap``/``--window-batch-size`` and ``--knn-index``/
    ``--index-min-keys``/``--index-probes``/``--index-rank``/``--index-candidates`` (``--knn-index exact``: the
    search of every layer's keys, no index). A plain checkpoint with runtime options and no ``--variant`` runs as
    ``full`` with them (full attention over chunked encodings).

    Raises:
        ValueError: ``--setting`` without ``--variant``, or a malformed ``--setting`` (:func:`parse_settings`).
    """
    variant = getattr(args, "variant", None)
    conversion = None
    if variant is not None:
        conversion = named_config(variant, segment_size=args.segment_size, target_length=args.target_length,
                                  **parse_settings(args.setting))
    elif getattr(args, "setting", None):
        raise ValueError("--setting applies with --variant NAME (the setting to convert the checkpoint to).")
    names = ("encoder_window", "window_overlap", "window_batch_size", "knn_index", "index_min_keys", "index_probes",
             "index_rank", "index_candidates")
    runtime = {name: getattr(args, name) for name in names if getattr(args, name, None) is not None}
    if runtime.get("knn_index") == "exact":
        runtime["knn_index"] = None
    return conversion, runtime
