"""Evaluation of summarization models: batched generation, ROUGE scoring and reports.

* :func:`generate_summaries` / :class:`GenerationResult` (``generation``): timed, batched
  ``model.generate`` over a list of documents.
* :func:`score_summaries` / :class:`RougeResult` / :func:`split_sentences` /
  :data:`ROUGE_KEYS` (``rouge``): ROUGE-1/2/L/Lsum via ``rouge_score``, with bootstrap
  confidence intervals.
* :func:`write_metrics_json` / :func:`format_table` (``report``): JSON and Markdown output.
* :class:`~srformer.evaluation.recurrent_term.RecurrentTermMonitor` (``recurrent_term``, import it from there):
  firing fraction, discarded input, ``|O_R|/|O_S|`` and RAF gradient norms of SRformer layers.
"""

from srformer.evaluation.generation import GenerationResult, generate_summaries
from srformer.evaluation.report import format_table, write_metrics_json
from srformer.evaluation.rouge import ROUGE_KEYS, RougeResult, score_summaries, split_sentences

__all__ = [
    "ROUGE_KEYS",
    "GenerationResult",
    "RougeResult",
    "format_table",
    "generate_summaries",
    "score_summaries",
    "split_sentences",
    "write_metrics_json",
]
