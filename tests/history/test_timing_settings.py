"""The comparison key holds every option that changes the numbers: two runs timed with different threads (or
rotation, graph replay, compile, timing method) are never compared as one problem; fractions are fractions."""

from __future__ import annotations

import argparse

import pytest

from attnprof.cli.history import threshold
from attnprof.history import HistoryError, compare_runs, record
from attnprof.history.records import from_run, timing_settings


def _timed(make_run, make_row, threads: int, median: float) -> dict:
    run = make_run(make_row(median=median))
    run["environment"] = {**run["environment"], **timing_settings({"threads": threads}, [{"threads": threads}])}
    return run


def test_runs_at_different_thread_counts_are_refused_naming_the_difference(db, make_run, make_row):
    record(_timed(make_run, make_row, 1, 100.0), db)
    record(_timed(make_run, make_row, 4, 2.0), db)  # "faster -98%" if they were one problem
    with pytest.raises(HistoryError, match=r"different settings \(threads 1 -> 4\)"):
        compare_runs(db, a=1, b=2)


def test_the_default_a_is_the_previous_run_timed_alike(db, make_run, make_row):
    record(_timed(make_run, make_row, 1, 100.0), db)
    record(_timed(make_run, make_row, 4, 30.0), db)
    record(_timed(make_run, make_row, 1, 101.0), db)
    result = compare_runs(db)
    assert (result["a"], result["b"]) == (1, 3)
    assert [v["verdict"] for v in result["variants"]] == ["same"]


def test_a_run_records_its_timing_settings():
    results = {"device": {"type": "cpu"}, "problem": {"batch": 1, "heads": 2, "seq": 64, "head_dim": 32,
                                                     "dtype": "fp32"},
               "config": {"threads": None, "rotate_inputs": 4, "graph": True, "compile": False},
               "variants": [{"name": "naive", "status": "ok", "threads": 2,
                             "device_us": {"median": 1.0, "p25": 1.0, "p75": 1.0, "method": "cpu-wall"}}]}
    env = from_run(results, "attnprof run", {})["environment"]
    assert env == {"run.threads": "2", "run.rotate_inputs": 4, "run.graph": True, "run.compile": False,
                   "run.time_method": "cpu-wall"}


@pytest.mark.parametrize(("text", "share"), [("5%", 0.05), ("0.05", 0.05), ("0.5%", 0.005), ("0", 0.0)])
def test_a_threshold_is_a_fraction_or_a_percentage(text, share):
    assert threshold(text) == pytest.approx(share)


def test_a_bare_number_of_one_or_more_is_refused_as_ambiguous():
    with pytest.raises(argparse.ArgumentTypeError, match="ambiguous"):
        threshold("5")
