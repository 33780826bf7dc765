"""Segment schedule i(t) = min(floor(t m / T), m - 1) and key compaction."""

import torch

from srformer.attention.schedule import compaction_order, num_segments, segment_at, segment_index


def test_num_segments_is_ceil_of_length_over_segment_size():
    assert num_segments(torch.tensor([1, 4, 5, 8, 9]), 4).tolist() == [1, 1, 2, 2, 3]


def test_segment_index_follows_algorithm_1():
    positions = torch.arange(10)
    got = segment_index(positions, torch.tensor([4, 1, 20]), target_length=8)
    expected = [[min(t * m // 8, m - 1) for t in range(10)] for m in (4, 1, 20)]
    assert got.tolist() == expected


def test_segment_index_is_monotone_and_ends_in_the_last_segment():
    got = segment_index(torch.arange(200), torch.tensor([7]), target_length=50)[0]
    assert (got[1:] >= got[:-1]).all()
    assert got[0] == 0 and got[-1] == 6 and set(got.tolist()) == set(range(7))


def test_compaction_moves_real_positions_to_the_front_in_order():
    valid = torch.tensor([[False, True, True, False, True], [True, True, True, True, True]])
    order = compaction_order(valid)
    assert order[0, :3].tolist() == [1, 2, 4]
    assert order[1].tolist() == [0, 1, 2, 3, 4]


def test_visited_segments_match_the_schedule_including_skipped_ones():
    from srformer.attention.segmented import SegmentedCrossAttention
    from srformer.config import SRformerConfig

    module = SegmentedCrossAttention(SRformerConfig(variant="segmented", segment_size=1, target_length=4), 2)
    segments = torch.tensor([7, 3, 1])
    visited = module._visited(segments, 8)
    for row, m in enumerate(segments.tolist()):
        expected = {min(t * m // 4, m - 1) for t in range(50)}
        assert {j for j in range(8) if visited[row, j]} == expected


def test_segment_at_reads_the_table_alike_from_an_int_and_a_tensor_and_clamps_past_the_target():
    table = segment_index(torch.arange(9), torch.tensor([3, 1, 5]), 8)
    for position in range(12):
        expected = table[:, min(position, 8)]
        assert torch.equal(segment_at(table, position, 8), expected)
        assert torch.equal(segment_at(table, torch.tensor(position), 8), expected)
