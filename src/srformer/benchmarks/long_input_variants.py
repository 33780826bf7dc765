"""The variants of ``srformer long-bench`` (:mod:`srformer.benchmarks.long_input`), by name.

Data only, with no import of torch or transformers, so that ``srformer long-bench --help`` lists them; also public
as :data:`srformer.benchmarks.long_input.LONG_INPUT_VARIANTS`.
"""

from __future__ import annotations

from typing import Any

from srformer.core import NAMED_SETTINGS

__all__ = ["DTYPES", "LONG_INPUT_VARIANTS"]

#: The dtypes a long-input run may decode in (``srformer long-bench --dtype``).
DTYPES: tuple[str, ...] = ("float32", "bfloat16", "float16")

#: The variants of the long-input benchmark: a name and its :class:`~srformer.config.SRformerConfig` settings
#: (``-lean``: ``lean_cache=True``; ``full`` over chunked encodings is SLED; ``knn-flat``/``knn-ivf``: ``knn``
#: searching a faiss index of the encoder output at every length, exhaustive or approximate, which needs faiss;
#: ``knn-rows``: ``knn`` searching the encoder output's rows in torch at every length, no faiss; ``knn-loki``: those
#: rows reached through low-rank keys first; ``knn-loki-pages``: through the pages of low-rank keys of best bound;
#: ``knn-loki-pages-c64``: the same, 64 candidates ranked on all kept channels; ``knn-loki-tail``: those, plus
#: clusters of keys standing for the keys not read).
LONG_INPUT_VARIANTS: dict[str, dict[str, Any]] = {
    "full": {"variant": "full"},
    "knn": {"variant": "knn"},
    "knn-flat": {"variant": "knn", "knn_index": "flat", "index_min_keys": 1},
    "knn-ivf": {"variant": "knn", "knn_index": "ivf", "index_min_keys": 1},
    "knn-rows": dict(NAMED_SETTINGS["knn-rows"]),
    "knn-loki": dict(NAMED_SETTINGS["knn-loki"]),
    "knn-loki-pages": dict(NAMED_SETTINGS["knn-loki-pages"]),
    "knn-loki-pages-c64": dict(NAMED_SETTINGS["knn-loki-pages-c64"]),
    "knn-loki-tail": dict(NAMED_SETTINGS["knn-loki-tail"]),
    "block-topk": {"variant": "block-topk"},
    "block-topk-b4": dict(NAMED_SETTINGS["block-topk-b4"]),
    "quest": {"variant": "quest"},
    "quest-tree": dict(NAMED_SETTINGS["quest-tree"]),
    "quest-b2": dict(NAMED_SETTINGS["quest-b2"]),
    "segmented": {"variant": "segmented"},
    "segmented-lean": {"variant": "segmented", "lean_cache": True},
    "srformer": {"variant": "srformer"},
    "srformer-lean": {"variant": "srformer", "lean_cache": True},
    "linear": {"variant": "linear"},
}
