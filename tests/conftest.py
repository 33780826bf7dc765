"""Suite-wide settings.

Under pytest-xdist (``python -m pytest -n 2``, the README's test command) each worker process runs one
test at a time; with torch's default of one intra-op thread per core, two workers on a 2-core machine
would oversubscribe it, so each worker uses a single thread (the tests' tiny tensors gain nothing
from more).
"""

from __future__ import annotations

import os

import torch

if os.environ.get("PYTEST_XDIST_WORKER"):
    torch.set_num_threads(1)
