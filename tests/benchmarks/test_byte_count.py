"""Bytes a decoding step moves (:mod:`srformer.benchmarks.byte_count`): the counter's rules (views, broadcasts,
indexing, what is persistent, where a step begins), and the byte budgets of the long-input pick, ``knn-loki``: per
token it reads a small fraction of what full attention reads beyond the decoder's own, moves at most twice that
eagerly, and its first step moves at most twice full attention's."""

from __future__ import annotations

import pytest
import torch

from srformer.attention import step_choice
from srformer.benchmarks.byte_count import ByteCounter, count_generation_bytes, distinct_bytes
from srformer.benchmarks.operator_count import long_input_model
from srformer.models import cross_attention
from srformer.models.convert import set_runtime_options

FLOAT = 4  # bytes


def test_a_broadcast_axis_counts_once():
    x = torch.ones(1, 5)
    assert distinct_bytes(x.expand(7, 5)) == 5 * FLOAT
    assert distinct_bytes(torch.ones(7, 5)) == 35 * FLOAT
    assert distinct_bytes(3) == 0


def test_inputs_made_before_the_step_are_persistent_and_intermediates_are_not():
    a, b = torch.ones(4, 8), torch.ones(8, 2)
    with ByteCounter() as counter:
        c = a @ b  # reads a and b (persistent), writes c
        _ = c * 2  # reads c (an intermediate), writes its product
        _ = a.view(32)  # a view moves nothing
    assert counter.persistent["aten.mm"] == (32 + 16) * FLOAT
    assert counter.eager["aten.mm"] == (32 + 16 + 8) * FLOAT
    assert counter.persistent["aten.mul"] == 0 and counter.eager["aten.mul"] == 16 * FLOAT
    assert "aten.view" not in counter.eager


def test_an_indexing_call_counts_what_it_picks():
    table, index = torch.ones(1000, 16), torch.tensor([3, 7])
    with ByteCounter() as counter:
        table[index]
        table.gather(0, torch.zeros(1, 16, dtype=torch.long))
    picked = 2 * 16 * FLOAT
    assert counter.eager["aten.index"] == 2 * picked + 2 * 8  # read and written, plus the long indices
    assert counter.persistent["aten.index"] == picked + 2 * 8  # the table's picked rows and the indices
    assert counter.eager["aten.gather"] == 2 * 16 * FLOAT + 16 * 8


def test_a_call_that_takes_only_a_shape_reads_nothing():
    """``zeros_like`` and ``new_zeros`` of a large persistent tensor write their output and read none of it;
    ``empty_like`` moves nothing."""
    big = torch.ones(1000, 16)
    with ByteCounter() as counter:
        torch.zeros_like(big)
        big.new_zeros(2, 3)
        torch.empty_like(big)
    assert counter.eager["aten.zeros_like"] == 1000 * 16 * FLOAT
    assert counter.eager["aten.new_zeros"] == 6 * FLOAT
    assert counter.eager["aten.empty_like"] == 0
    assert counter.persistent_total == 0


def test_a_bag_counts_the_rows_it_reads_not_its_sum():
    """``embedding_bag`` of 3 rows of 100 into one bag: 3 rows read (persistent), one row of output written (and
    the bag's small bookkeeping outputs, a few longs)."""
    table, index = torch.ones(50, 100), torch.tensor([1, 4, 9])
    with ByteCounter() as counter:
        torch.nn.functional.embedding_bag(index, table, torch.tensor([0]), mode="sum")
    name = next(iter(counter.eager))
    assert counter.persistent[name] == 3 * 100 * FLOAT + 3 * 8 + 8  # the rows, the indices and the offsets
    least = 3 * 100 * FLOAT + 100 * FLOAT + 3 * 8 + 8
    assert least <= counter.eager[name] <= least + 8 * 8


def test_a_step_begins_at_each_call_of_the_decoder():
    """What one call of the module makes is persistent for the next call (a state built at the first step)."""
    made: list[torch.Tensor] = []

    class Step(torch.nn.Module):
        def forward(self, x: torch.Tensor) -> torch.Tensor:
            if made:
                return made[0] + x  # reads the state made at the first call
            made.append(x * 3)
            return made[0]

    step, x = Step(), torch.ones(10)
    with ByteCounter(step) as counter:
        step(x)
        step(x)
    assert counter.persistent["aten.mul"] == 10 * FLOAT
    assert counter.persistent["aten.add"] == 20 * FLOAT  # the state and x, both from before the second call


@pytest.fixture(scope="module")
def counts():
    """t5-tiny (d_model 128, 4 heads of 32, 2 decoder layers) at 65,536 tokens, the accelerator's route;
    ``knn-loki`` reading the share of each head's channels its default reads on t5-small (12 of 64: 6 of 32)."""
    length = 65536
    models = {name: long_input_model(name, shape="t5-tiny", segment_size=64, target_length=128)
              for name in ("full", "segmented", "knn-loki", "knn-loki-pages")}
    set_runtime_options(models["knn-loki"], index_rank=6)
    set_runtime_options(models["knn-loki-pages"], index_rank=6)
    return {name: count_generation_bytes(model, length) for name, model in models.items()}


def test_the_count_restores_the_route_and_the_check():
    assert step_choice.STEP_OVERRIDE is None and cross_attention.FINITE_CHECK_OVERRIDE is None
    model = long_input_model("full", shape="t5-tiny")
    assert count_generation_bytes(model, 64, as_on_accelerator=False).route == "cpu"
    assert step_choice.STEP_OVERRIDE is None and cross_attention.FINITE_CHECK_OVERRIDE is None
    with pytest.raises(ValueError, match="`tokens`"):
        count_generation_bytes(model, 64, tokens=(2, 5))


@pytest.mark.filterwarnings("ignore:An encoder input has")
def test_knn_loki_keeps_its_byte_budgets(counts):
    """Beyond the decoder's own bytes (``segmented``'s, whose step reads one segment): per token ``knn-loki``
    reads at most 0.10x what full attention reads (its keys and values), and moves eagerly at most twice what it
    reads; its first step moves at most twice full attention's. Measured: 0.057x, 1.63x, 1.61x (full: 127.9 MiB per
    token beyond the decoder's)."""
    own = counts["segmented"]
    full, loki = counts["full"], counts["knn-loki"]
    full_reads = full.persistent_bytes_per_token - own.persistent_bytes_per_token
    loki_reads = loki.persistent_bytes_per_token - own.persistent_bytes_per_token
    loki_moves = loki.bytes_per_token - own.bytes_per_token
    assert full_reads > 120 * 2**20  # 2 layers x 65,536 positions x (keys + values) x 128 x 4 bytes = 128 MiB
    assert 0 < loki_reads <= 0.10 * full_reads, (loki_reads / full_reads, loki.per_token_by_operator)
    assert loki_moves <= 2 * loki_reads, (loki_moves / loki_reads, loki.per_token_by_operator)
    assert loki.first_step_bytes <= 2 * full.first_step_bytes, loki.first_step_bytes / full.first_step_bytes


@pytest.mark.filterwarnings("ignore:An encoder input has")
def test_knn_loki_pages_reads_a_fraction_of_knn_lokis_bytes(counts):
    """With pages (``knn-loki-pages``), beyond the decoder's own bytes: per token at most 0.05x what full attention
    reads and at most 0.7x what ``knn-loki`` reads at this length (65,536 tokens; the accelerator route's first
    stage reads every signed channel of the page bounds and of the pages read, ``2m·(k/b + P·b)`` numbers per head,
    half of ``knn-loki``'s ``r·k`` here and a shrinking share beyond); the first step, which sorts the keys into
    pages, moves at most twice full attention's."""
    own, full = counts["segmented"], counts["full"]
    pages, loki = counts["knn-loki-pages"], counts["knn-loki"]
    full_reads = full.persistent_bytes_per_token - own.persistent_bytes_per_token
    pages_reads = pages.persistent_bytes_per_token - own.persistent_bytes_per_token
    loki_reads = loki.persistent_bytes_per_token - own.persistent_bytes_per_token
    assert 0 < pages_reads <= 0.05 * full_reads, (pages_reads / full_reads, pages.per_token_by_operator)
    assert pages_reads <= 0.7 * loki_reads, pages_reads / loki_reads
    assert pages.first_step_bytes <= 2 * full.first_step_bytes, (pages.first_step_bytes / full.first_step_bytes,
                                                                  pages.first_step_by_operator)


@pytest.mark.filterwarnings("ignore:An encoder input has")
def test_knn_loki_pages_moves_at_most_twice_what_it_reads(counts):
    """The eager budget ``knn-loki`` keeps, for ``knn-loki-pages``: per token it moves at most twice what it reads
    beyond the decoder's own bytes (the candidates' rows and the pages' channels read by fused operators, which
    count what they pick, :mod:`srformer.attention.gathered`)."""
    own, pages = counts["segmented"], counts["knn-loki-pages"]
    reads = pages.persistent_bytes_per_token - own.persistent_bytes_per_token
    assert pages.bytes_per_token - own.bytes_per_token <= 2 * reads
