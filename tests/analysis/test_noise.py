"""Timing samples carry a verdict: a tight median from a machine that changed pace, or from two states,
is marked unstable; before/after comparisons say "no change" inside both spreads."""

from __future__ import annotations

import random

import pytest

from attnprof.analysis.noise import Spread, bimodal, compare, drift, outliers, verdict


def steady(n=40, mid=100.0, jitter=0.01, seed=0) -> list[float]:
    rng = random.Random(seed)
    return [mid * (1 + rng.uniform(-jitter, jitter)) for _ in range(n)]


def test_steady_samples_are_stable():
    s = Spread.of(steady())
    assert s.unstable is None and s.n == 40 and s.p25 <= s.median <= s.p75


def test_two_clusters_are_bimodal_even_with_a_tight_half():
    samples = steady(20, 110.0) + steady(20, 24_000.0, seed=1)  # the 110 µs vs 24 ms
    random.Random(2).shuffle(samples)
    assert bimodal(samples) is not None
    assert verdict(samples).startswith("bimodal")


def test_a_change_of_pace_during_the_measurement_is_drift():
    samples = steady(20, 100.0) + steady(20, 130.0, seed=1)  # first half fast, second half slow
    assert drift(samples) is not None
    assert Spread.of(samples).unstable is not None


def test_a_wide_spread_and_many_outliers_are_unstable():
    rng = random.Random(0)
    wide = [100.0 * rng.uniform(0.7, 1.3) for _ in range(40)]
    assert "wide" in verdict(wide) or "outliers" in verdict(wide)
    spiky = steady(30) + [1000.0] * 10
    assert outliers(spiky) == 10 and verdict(spiky) is not None


def test_too_few_samples_cannot_be_judged():
    assert "too few" in verdict([1.0, 1.1, 1.0])


def test_a_few_outliers_leave_a_steady_measurement_stable():
    samples = steady(40) + [300.0, 310.0]
    assert Spread.of(samples).outliers == 2 and Spread.of(samples).unstable is None


WIDE = {"median": 100.0, "p25": 98.0, "p75": 102.0}
TIGHT = {"median": 100.0, "p25": 99.9, "p75": 100.1}


@pytest.mark.parametrize("before, after, word", [
    (WIDE, {"median": 101.0, "p25": 99.0, "p75": 103.0}, "no change"),  # inside both spreads
    (TIGHT, {"median": 99.5, "p25": 99.4, "p75": 99.6}, "no change"),  # apart, but under MIN_CHANGE_SHARE
    (WIDE, {"median": 80.0, "p25": 79.0, "p75": 81.0}, "faster"),
    (WIDE, {"median": 127.0, "p25": 126.0, "p75": 128.0}, "slower"),
])
def test_compare_says_no_change_inside_both_spreads_and_the_percent_otherwise(before, after, word):
    result = compare(before, after)
    assert result["verdict"] == word
    assert result["change_pct"] == round(100 * (after["median"] - 100.0) / 100.0, 1)


def test_compare_names_an_unstable_side_and_needs_both():
    before = {"median": 100.0, "p25": 98.0, "p75": 102.0, "unstable": "drift: ..."}
    assert compare(before, {"median": 50.0, "p25": 49.0, "p75": 51.0})["unstable"] == ["before"]
    assert compare(before, None) is None
