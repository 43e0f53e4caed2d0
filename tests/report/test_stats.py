"""Rates with Wilson intervals: against an independent implementation and textbook values."""

import pytest

from mtsql.app.report.stats import Rate, rate_of, wilson


def test_wilson_matches_scipy():
    stats = pytest.importorskip("scipy.stats")
    for n in (1, 3, 10, 40, 250):
        for k in sorted({0, 1, n // 3, n // 2, n - 1, n}):
            expected = stats.binomtest(k, n).proportion_ci(confidence_level=0.95, method="wilson")
            low, high = wilson(k, n)
            assert low == pytest.approx(expected.low, abs=1e-9) and high == pytest.approx(
                expected.high, abs=1e-9
            )


def test_wilson_textbook_values_and_ends():
    assert wilson(0, 10) == (0.0, pytest.approx(0.2775, abs=1e-4))
    assert wilson(10, 10) == (pytest.approx(0.7225, abs=1e-4), 1.0)
    low, high = wilson(16, 40)
    assert (round(low, 3), round(high, 3)) == (0.263, 0.554)
    with pytest.raises(ValueError):
        wilson(1, 0)
    with pytest.raises(ValueError):
        wilson(4, 3)


def test_rate_cells_and_comparisons():
    assert Rate(3, 40).cell() == "7.5 [2.6, 19.9] (3/40)"
    empty = Rate(0, 0)
    assert empty.value is None and empty.interval is None and empty.cell() == "– (n=0)"
    assert Rate(16, 40).above(Rate(0, 40)) and not Rate(0, 40).above(Rate(16, 40))
    assert not Rate(18, 40).above(Rate(16, 40))  # the difference's interval holds 0
    # the Wilson intervals of 7/40 and 0/40 touch (8.75 % and 8.76 %), the difference's interval is above 0
    assert Rate(7, 40).interval[0] < Rate(0, 40).interval[1] and Rate(7, 40).above(Rate(0, 40))
    assert not Rate(3, 3).above(empty) and not empty.above(Rate(0, 3))
    assert rate_of([True, False, 1, 0, None]) == Rate(2, 5)


@pytest.mark.parametrize(
    "a, b, low, high",
    [
        ((56, 70), (48, 80), 0.0524, 0.3339),  # Newcombe (1998), Table II, examples (a), (b), (d): method 10
        ((9, 10), (3, 10), 0.1705, 0.8090),
        ((5, 56), (0, 29), -0.0381, 0.1926),
    ],
)
def test_difference_interval_is_newcombes_hybrid_score_interval(a, b, low, high):
    difference, lower, upper = Rate(*a).minus(Rate(*b))
    assert difference == pytest.approx(a[0] / a[1] - b[0] / b[1])
    assert (round(lower, 4), round(upper, 4)) == (low, high)
    assert Rate(0, 0).minus(Rate(1, 2)) is None
