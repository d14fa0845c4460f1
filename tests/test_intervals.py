from neuronsweep.analysis.intervals import merge, union_length


def columns(spans):
    return [s for s, _ in spans], [e for _, e in spans]


def test_union_of_nested_overlapping_touching_and_empty_intervals():
    spans = [(0, 10), (2, 5), (8, 12), (12, 15), (20, 20), (30, 25), (40, 41)]
    starts, ends = merge(*columns(spans))
    assert list(zip(starts.tolist(), ends.tolist())) == [(0, 15), (40, 41)]
    assert union_length(*columns(spans)) == 16


def test_union_is_order_independent_and_empty_safe():
    assert union_length(*columns([(5, 7), (0, 1), (6, 9)])) == union_length(*columns([(0, 1), (6, 9), (5, 7)])) == 5
    assert union_length([], []) == 0
    # a long interval first hides shorter ones after it, however many
    assert union_length(*columns([(0, 100), (1, 2), (3, 4), (99, 101), (200, 201)])) == 102
