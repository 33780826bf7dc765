"""srformer's model types are registered with transformers wherever srformer and transformers are both imported
(:mod:`srformer.models.registration`), whichever comes first, though ``import srformer`` imports neither torch nor
transformers: each case in a fresh interpreter."""

from __future__ import annotations

import subprocess
import sys

import pytest

#: After the case's imports: srformer's model types are known to transformers' Auto classes, a concrete class loads
#: through srformer's wrapper, and the import hook has taken itself off ``sys.meta_path``.
_CHECK = """
import sys

from transformers import T5PreTrainedModel
from transformers.models.auto.configuration_auto import CONFIG_MAPPING

from srformer.models.registration import _FINDER

assert "srformer_t5" in CONFIG_MAPPING, "srformer_t5 is not registered"
assert CONFIG_MAPPING["srformer_t5"].__name__ == "SRformerT5Config", CONFIG_MAPPING["srformer_t5"]
assert "srformer" in T5PreTrainedModel.from_pretrained.__func__.__module__, "concrete classes are not wrapped"
assert _FINDER not in sys.meta_path, "the import hook is still installed"
"""

CASES = {
    "srformer-then-transformers": "import srformer\nimport transformers\n",
    "transformers-then-srformer": "import transformers\nimport srformer\n",
    # a module of srformer imports transformers while modules that srformer.models.auto needs are half-initialised
    "a-module-of-srformer-first": "from srformer.models.install import srformer_config_of\n",
}


@pytest.mark.parametrize("case", CASES)
def test_importing_srformer_and_transformers_registers_srformers_model_types(case):
    done = subprocess.run([sys.executable, "-c", CASES[case] + _CHECK], capture_output=True, text=True, timeout=300)
    assert done.returncode == 0, done.stderr[-3000:]


def test_import_srformer_alone_registers_nothing_and_imports_neither_torch_nor_transformers():
    script = ("import sys\nimport srformer\nfrom srformer.models.registration import _FINDER\n"
              "assert _FINDER in sys.meta_path\n"
              "assert not {'torch', 'transformers', 'srformer.models.auto'} & set(sys.modules), sorted(sys.modules)\n")
    done = subprocess.run([sys.executable, "-c", script], capture_output=True, text=True, timeout=300)
    assert done.returncode == 0, done.stderr[-3000:]


def test_python_m_runs_a_module_of_srformer_through_the_hook():
    done = subprocess.run([sys.executable, "-m", "srformer.cli.main", "--help"], capture_output=True, text=True,
                          timeout=300)
    assert done.returncode == 0 and done.stdout.startswith("usage: srformer"), done.stderr[-3000:]
