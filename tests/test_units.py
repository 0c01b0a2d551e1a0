"""The one formatter set: times in µs/ms/s, rates with the prefix that reads, spreads and counts never in
scientific notation."""

from __future__ import annotations

import pytest

from attnprof.units import bandwidth, count, error, exponent, flops, sig, spread, us


@pytest.mark.parametrize(("x", "text"), [(999.7, "1000"), (952.0, "952"), (65300.0, "65300"), (59.5, "59.5"),
                                         (9.0, "9"), (0.0123456, "0.0123"), (0.0, "0"), (-2.25, "-2.25")])
def test_significant_digits_are_written_as_g_would_but_without_an_exponent(x, text):
    assert sig(x) == text


def test_a_spread_picks_the_medians_unit_and_writes_no_exponent():
    assert spread({"median": 952, "p25": 950, "p75": 999.7}) == "952 (950–1000) µs"
    assert spread({"median": 425, "p25": 400, "p75": 65300}) == "425 (400–65300) µs"
    assert spread({"median": 2.5e6, "p25": 2.4e6, "p75": 2.6e6, "unstable": "drift"}) == "2.5 (2.4–2.6) s, unstable"


def test_times_are_in_microseconds_milliseconds_or_seconds():
    assert (us(12.34), us(127716), us(3.2e6), us(None)) == ("12.3 µs", "127.72 ms", "3.20 s", "-")


def test_rates_too_small_for_tera_drop_to_giga_mega_or_kilo():
    assert flops(612.3) == "612 TFLOP/s" and flops(0.001051) == "1.05 GFLOP/s"
    assert bandwidth(1.642e-05) == "16.4 MB/s" and bandwidth(4.03) == "4.03 TB/s"
    assert bandwidth(2e-10) == "0.2 kB/s" and flops(None) == "-"


def test_counts_are_whole_without_a_point_and_never_exponential():
    assert (count(7.0), count(2.5), count(1234567.0)) == ("7", "2.5", "1234567")
    assert exponent({"k": 2.0134, "meaningful": True}) == "2.01"
    assert exponent({"k": 1234.5, "meaningful": False}) == "(1234?)"


def test_a_max_error_keeps_its_exponent_below_one_and_none_from_one_on():
    assert (error(0.0087), error(12.5), error(1.0), error(None)) == ("8.7e-03", "12.5", "1", "-")
