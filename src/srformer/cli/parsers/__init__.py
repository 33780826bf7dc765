"""The argument parser of every sub-command, one module each, light enough for ``srformer --help``.

A module here imports only the standard library, :mod:`srformer.cli.arguments` and the modules that hold its
choices and defaults; its ``run`` imports the sub-command's implementation (``srformer.cli.<name>_command``, which
imports torch and transformers) only when the sub-command runs."""
