"""Recording (rank 0 only), listing with what changed, --since, and compare's default runs."""

from __future__ import annotations

import datetime as dt

import pytest

from attnprof.history import HistoryError, compare_runs, history, record
from attnprof.history.query import since_time


def test_only_rank_zero_records(db, make_run, monkeypatch):
    monkeypatch.setenv("RANK", "1")
    assert record(make_run(), db) is None
    assert not db.exists()
    monkeypatch.setenv("RANK", "0")
    assert record(make_run(), db) == 1


def test_history_lists_runs_newest_first_with_what_changed_since_the_previous(db, make_run, make_row):
    record(make_run(make_row(kernels=5), torch="2.10.0"), db)
    record(make_run(make_row(kernels=6), torch="2.11.0"), db)
    result = history(db)
    assert result["schema"] == "attnprof.history/1"
    assert [r["id"] for r in result["runs"]] == [2, 1]
    changes = result["runs"][0]["changes"]
    assert changes["since"] == 1
    assert changes["environment"] == {"torch": {"a": "2.10.0", "b": "2.11.0"}}
    assert changes["counts"] == [{"name": "naive", "problem": "1_2_64_16_bf16",
                                  "counts": {"kernels": {"a": 5, "b": 6}}}]
    assert result["runs"][1]["changes"] is None


def test_history_of_one_variant_keeps_only_the_runs_rows_and_count_changes_of_it(db, make_run, make_row):
    record(make_run(make_row("naive"), make_row("flash")), db)
    record(make_run(make_row("naive", kernels=9)), db)
    record(make_run(make_row("naive", kernels=10), make_row("flash", kernels=6)), db)
    runs = history(db, variant="flash")["runs"]
    assert [r["id"] for r in runs] == [3, 1]
    assert [v["name"] for v in runs[0]["variants"]] == ["flash"]
    assert runs[0]["changes"]["counts"] == []  # naive's kernels changed since run 2, flash's did not


def test_since_takes_an_age_or_a_date():
    now = dt.datetime(2026, 11, 30, 12, 0, tzinfo=dt.timezone.utc)
    assert since_time("2d", now) == "2026-11-28T12:00:00Z"
    assert since_time("90m", now) == "2026-11-30T10:30:00Z"
    assert since_time("2026-11-01T08:00:00+02:00") == "2026-11-01T06:00:00Z"
    with pytest.raises(HistoryError, match="--since"):
        since_time("last tuesday")


def test_history_since_a_time_after_every_run_is_empty(db, make_run):
    record(make_run(), db)
    assert history(db, since="2999-01-01")["runs"] == []


def test_compare_defaults_to_the_latest_run_against_the_previous_of_its_problem_and_device(db, make_run, make_row):
    record(make_run(make_row(kernels=5)), db)
    record(make_run(make_row(kernels=5), gpu="NVIDIA A100"), db)
    record(make_run(make_row(kernels=6)), db)
    result = compare_runs(db)
    assert (result["a"], result["b"]) == (1, 3)
    assert result["variants"][0]["verdict"] == "regressed"
    assert compare_runs(db, a=2, b=3)["environment_changes"]["gpu"] == {"a": "NVIDIA A100", "b": "NVIDIA H200"}


def test_compare_without_an_earlier_run_of_the_problem_compares_nothing_and_passes(db, make_run):
    record(make_run(), db)
    record(make_run(gpu="NVIDIA A100"), db)
    result = compare_runs(db)
    assert (result["a"], result["b"], result["variants"], result["regressed"]) == (None, 2, [], False)
    assert result["only_in_b"] == ["naive @ 1_2_64_16_bf16"]


def test_compare_on_a_missing_store_or_an_unknown_run_is_an_error(db, make_run):
    with pytest.raises(HistoryError, match="no history at"):
        compare_runs(db)
    record(make_run(), db)
    with pytest.raises(HistoryError, match="no run 5"):
        compare_runs(db, a=5, b=1)
