"""Verdicts: counts are exact (any increase regresses), times move only beyond spreads and threshold."""

from __future__ import annotations

import pytest

from attnprof.history.compare import VERDICTS, compare, environment_changes, time_change, verdict_of


def _ids(*runs: dict) -> list[dict]:
    for i, run in enumerate(runs, start=1):
        run["id"] = i
    return list(runs)


def _verdict(a: dict, b: dict, before_a: dict | None = None) -> str:
    return verdict_of(a, b, before_a, 0.05)[0]


@pytest.mark.parametrize("count", ["gpu_ops", "kernels", "memcpy", "memset"])
def test_a_count_increase_is_regressed_even_when_the_time_got_faster(make_row, count):
    a = make_row(median=100.0)
    b = make_row(median=50.0, **{count: a[count] + 1})
    assert _verdict(a, b, before_a=make_row(median=100.0)) == "regressed"


def test_a_count_increase_is_regressed_even_when_another_count_fell(make_row):
    assert _verdict(make_row(kernels=5, memcpy=2), make_row(kernels=6, memcpy=0)) == "regressed"


def test_a_count_decrease_alone_is_improved(make_row):
    assert _verdict(make_row(memcpy=2), make_row(memcpy=0)) == "improved"


def test_a_time_change_inside_the_spread_is_same(make_row):
    # 20% slower, but each run's middle half (p25-p75) overlaps the other's
    a, b = make_row(median=100.0, spread=15.0), make_row(median=120.0, spread=15.0)
    assert time_change(a, b, 0.05) == 0
    assert _verdict(a, b, before_a=a) == "same"


def test_a_time_change_beyond_the_spreads_but_under_the_threshold_is_same(make_row):
    a, b = make_row(median=100.0, spread=0.5), make_row(median=103.0, spread=0.5)
    assert time_change(a, b, 0.05) == 0
    assert time_change(a, b, 0.02) == 1


def test_one_slower_run_is_slower_not_regressed(make_row):
    a, b = make_row(median=100.0), make_row(median=120.0)
    assert _verdict(a, b) == "slower"
    assert _verdict(a, b, before_a=make_row(median=121.0)) == "slower"  # A was the fast one


def test_a_slowdown_against_a_and_the_run_before_it_is_regressed(make_row):
    assert _verdict(make_row(median=100.0), make_row(median=120.0), before_a=make_row(median=101.0)) == "regressed"


def test_a_slowdown_with_a_count_change_is_regressed(make_row):
    assert _verdict(make_row(median=100.0, memcpy=2), make_row(median=120.0, memcpy=1)) == "regressed"


def test_a_speedup_against_a_and_the_run_before_it_is_improved(make_row):
    a, b = make_row(median=100.0), make_row(median=80.0)
    assert _verdict(a, b) == "faster"
    assert _verdict(a, b, before_a=make_row(median=99.0)) == "improved"


def test_a_variant_that_stopped_running_is_regressed_and_one_that_started_is_improved(make_row):
    ok, failed = make_row(), make_row(status="error")
    assert _verdict(ok, failed) == "regressed"
    assert _verdict(failed, ok) == "improved"
    assert _verdict(failed, failed) == "same"


def test_compare_gives_one_verdict_per_shared_variant_and_names_the_rest(make_row, make_run):
    a, b = _ids(make_run(make_row("naive"), make_row("sdpa-math")),
                make_run(make_row("naive", kernels=6), make_row("flash")))
    result = compare(a, b)
    assert result["schema"] == "attnprof.compare/1"
    assert (result["a"], result["b"]) == (1, 2)
    assert [(v["name"], v["verdict"]) for v in result["variants"]] == [("naive", "regressed")]
    assert result["variants"][0]["delta"]["kernels"] == 1
    assert result["only_in_a"] == ["sdpa-math @ 1_2_64_16_bf16"]
    assert result["only_in_b"] == ["flash @ 1_2_64_16_bf16"]
    assert result["regressed"] is True
    assert all(v["verdict"] in VERDICTS for v in result["variants"])


def test_compare_matches_variants_by_problem_too(make_row, make_run):
    a, b = _ids(make_run(make_row(problem="p1"), make_row(problem="p2", kernels=9)),
                make_run(make_row(problem="p1"), make_row(problem="p2", kernels=9)))
    assert [(v["problem"], v["verdict"]) for v in compare(a, b)["variants"]] == [("p1", "same"), ("p2", "same")]


def test_environment_changes_name_each_field_that_differs(make_run):
    a, b = make_run(torch="2.10.0"), make_run(torch="2.11.0")
    b["environment"]["driver"] = "570.1"
    assert environment_changes(a, b) == {"torch": {"a": "2.10.0", "b": "2.11.0"},
                                         "driver": {"a": None, "b": "570.1"}}
    assert environment_changes(a, a) == {}
