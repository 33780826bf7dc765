"""torch.compile of the decoder step inside generate() on converted models.

transformers compiles the model's forward for the decoding steps when the cache is compileable
(``cache_implementation="static"``) on an accelerator, or anywhere with
``compile_config._compile_all_devices = True`` (its own switch, used here to run on CPU). The
backend records the graphs dynamo captures and runs them as captured: this checks that the SRformer
step traces (graph breaks allowed: ``fullgraph`` is not supported yet, see the README) and computes
the same logits, without paying for inductor's code generation.
"""

from __future__ import annotations

import pytest
import torch
from transformers import CompileConfig

from tests.models.test_generation_strategies import batch, generate, model_for, relative_tolerance


@pytest.mark.slow
@pytest.mark.parametrize("family,variant", [("t5", "srformer"), ("bart", "linear")])
def test_compiled_decoder_step_equals_eager(family, variant):
    model = model_for(family, variant)
    ids, mask = batch(model)
    graphs = []

    def recording_backend(graph_module, example_inputs):
        graphs.append(graph_module)
        return graph_module.forward

    compile_config = CompileConfig(backend=recording_backend, fullgraph=False, mode=None)
    compile_config._compile_all_devices = True
    torch._dynamo.reset()
    try:
        compiled = generate(
            model, ids, mask, max_new_tokens=4, cache_implementation="static", compile_config=compile_config,
            output_logits=True,
        )
    finally:
        torch._dynamo.reset()
    assert graphs, "generate() did not compile the decoder step"
    eager = generate(model, ids, mask, max_new_tokens=4, cache_implementation="static", output_logits=True)
    assert torch.equal(compiled.sequences, eager.sequences)
    compiled_logits, eager_logits = torch.stack(compiled.logits, 1), torch.stack(eager.logits, 1)
    tolerance = relative_tolerance(model) * eager_logits.abs().max().item()
    assert (compiled_logits - eager_logits).abs().max().item() <= tolerance
