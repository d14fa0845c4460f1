from neuronsweep.analysis.intervals import merge, union_length


def test_union_of_nested_overlapping_touching_and_empty_intervals():
    spans = [(0, 10), (2, 5), (8, 12), (12, 15), (20, 20), (30, 25), (40, 41)]
    assert merge(spans) == [(0, 15), (40, 41)]
    assert union_length(spans) == 16


def test_union_is_order_independent_and_empty_safe():
    assert union_length([(5, 7), (0, 1), (6, 9)]) == union_length([(0, 1), (6, 9), (5, 7)]) == 5
    assert union_length([]) == 0
