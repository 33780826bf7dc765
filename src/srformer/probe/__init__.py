"""Synthetic long-range diagnostics for cross attention (``srformer probe``).

Seeded sequence-to-sequence tasks whose targets need known encoder positions (``copy``,
``reverse``, ``recall``, ``aggregate``), metrics split into on-segment and off-segment target
positions by the library's segment schedule, a small self-contained training loop and a
resumable grid runner with JSON, Markdown and PNG outputs.
"""

from srformer.probe.tasks import TASKS, Example, ProbeVocabulary, TaskSpec, generate_examples

__all__ = ["TASKS", "Example", "ProbeVocabulary", "TaskSpec", "generate_examples"]
