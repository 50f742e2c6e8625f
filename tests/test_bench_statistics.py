"""The benchmarks' statistics: the interval ``bench.http`` reads its target ratios against must hold
the median as often as it claims, on the skewed, drifting distributions a shared machine gives."""

from __future__ import annotations

import random
import statistics

import pytest

from bench.harness import median_interval


def test_the_interval_is_the_order_statistics_the_binomial_allows() -> None:
    values = [0.91, 0.83, 0.97, 0.88, 0.79, 1.02, 0.86, 0.95, 0.9]
    assert median_interval(values[:7]) == (0.79, 1.02)  # 7 values: only min-max reaches 90% (98%)
    assert median_interval(values) == (0.83, 0.97)  # 9 values: 2nd to 8th (96%); 3rd to 7th is 82%
    assert median_interval(values[:3]) == (0.83, 0.97)  # too few for 90%: the whole range


@pytest.mark.parametrize("count", [5, 7, 9, 11, 15, 21])
def test_the_interval_holds_the_median_as_often_as_it_claims(count: int) -> None:
    """Ratios drawn from a skewed distribution (a lognormal: a machine's slow spells stretch one
    side): the true median falls inside the interval in at least 90% of 4,000 runs, less three
    standard errors of that estimate."""
    rng = random.Random(count)
    median = 0.9  # of 0.9 * lognormal(0, 0.15)
    trials = 4000
    held = 0
    for _ in range(trials):
        low, high = median_interval([0.9 * rng.lognormvariate(0, 0.15) for _ in range(count)])
        held += low <= median <= high
    standard_error = (0.9 * 0.1 / trials) ** 0.5
    assert held / trials >= 0.90 - 3 * standard_error


def test_the_interval_narrows_as_runs_are_added() -> None:
    rng = random.Random(7)
    widths = {}
    for count in (7, 15, 31):
        spans = [median_interval([rng.gauss(0.9, 0.05) for _ in range(count)]) for _ in range(500)]
        widths[count] = statistics.median(high - low for low, high in spans)
    assert widths[7] > widths[15] > widths[31]
