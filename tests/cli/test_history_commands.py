"""`attnprof history` and `attnprof compare` on real CPU runs recorded with --db: the CI gate's contract."""

from __future__ import annotations

import csv
import io
import json
import os
import sqlite3
import subprocess
import sys

import pytest
import torch

from attnprof.history import VERDICTS, record
from attnprof.history.store import FILE_NAME, connect, latest_run
from support import assert_one_line_error, attnprof

RUN = ("run", "--device", "cpu", "--batch", "1", "--heads", "2", "--seq", "32", "--head-dim", "16",
       "--variants", "naive,sdpa-math", "--repeats", "5", "--no-report")


@pytest.fixture(scope="module")
def store(tmp_path_factory):
    """Two CPU runs recorded into one store, and a third run with --no-history that must not land."""
    folder = tmp_path_factory.mktemp("history")
    db = folder / FILE_NAME
    for extra in ((), (), ("--no-history",)):
        # outside any git checkout: the environment's commit must not change between the runs
        proc = attnprof(*RUN, "--out", str(folder / "out"), "--db", str(db), *extra, cwd=folder)
        assert proc.returncode == 0, proc.stderr
        assert ("attnprof: history run" in proc.stderr) == (not extra)
    return db


def _json(*args: str, env: dict | None = None) -> tuple[int, dict]:
    proc = subprocess.run([sys.executable, "-m", "attnprof", *args], capture_output=True, text=True, timeout=120,
                          env=env)
    assert proc.returncode in (0, 1), proc.stderr
    return proc.returncode, json.loads(proc.stdout)


def test_two_cpu_runs_land_in_one_sqlite_file(store):
    assert store.read_bytes()[:16] == b"SQLite format 3\x00"
    assert sqlite3.connect(store).execute("SELECT COUNT(*) FROM runs").fetchone()[0] == 2


def test_history_json_lists_both_runs_newest_first_with_their_environment(store):
    _, result = _json("history", "--json", "--db", str(store))
    assert result["schema"] == "attnprof.history/1"
    runs = result["runs"]
    assert [r["id"] for r in runs] == [2, 1]
    for run in runs:
        assert set(run) >= {"id", "time", "command", "environment", "variants"}
        assert run["environment"]["torch"] == torch.__version__
        assert "--db" in run["command"]
        assert [v["name"] for v in run["variants"]] == ["naive", "sdpa-math"]
        for v in run["variants"]:
            assert set(v) >= {"name", "status", "device_us", "gpu_ops"}
            assert v["status"] == "ok" and v["device_us"]["median"] > 0
    assert runs[0]["changes"]["since"] == 1


def test_history_finds_the_store_through_attnprof_home(store):
    _, result = _json("history", "--json", env={**os.environ, "ATTNPROF_HOME": str(store.parent)})
    assert len(result["runs"]) == 2


def test_compare_json_gives_a_verdict_per_variant_and_exits_1_only_on_a_regression(store):
    code, result = _json("compare", "--json", "--db", str(store))
    assert result["schema"] == "attnprof.compare/1"
    assert (result["a"], result["b"]) == (1, 2)
    assert result["environment_changes"] == {}
    assert {v["name"] for v in result["variants"]} == {"naive", "sdpa-math"}
    assert all(v["verdict"] in VERDICTS and set(v) >= {"a", "b", "delta"} for v in result["variants"])
    assert code == (1 if any(v["verdict"] == "regressed" for v in result["variants"]) else 0)


def test_compare_exits_1_when_a_run_adds_an_op(store, tmp_path):
    db = tmp_path / FILE_NAME
    db.write_bytes(store.read_bytes())
    with connect(db) as conn:
        run = latest_run(conn)
    run["variants"][0]["aten_ops"] += 1
    new = record(run, db)
    code, result = _json("compare", "2", str(new), "--json", "--db", str(db))
    assert code == 1
    assert [v["verdict"] for v in result["variants"]][0] == "regressed"


def test_compare_of_the_first_run_of_a_problem_passes_with_nothing_to_compare(store, tmp_path):
    db = tmp_path / FILE_NAME
    with connect(store) as conn:
        record(latest_run(conn), db)
    proc = attnprof("compare", "--db", str(db))
    assert proc.returncode == 0, proc.stderr
    assert "nothing to compare with yet" in proc.stdout


def test_compare_on_a_missing_store_exits_2_with_one_line(tmp_path):
    assert_one_line_error(attnprof("compare", "--db", str(tmp_path / "none.sqlite")), "no history at")
    assert not (tmp_path / "none.sqlite").exists()


def test_compare_of_an_unknown_run_exits_2_with_one_line(store):
    assert_one_line_error(attnprof("compare", "1", "99", "--db", str(store)), "no run 99")


def test_a_bad_threshold_exits_2_with_one_line(store):
    assert_one_line_error(attnprof("compare", "--threshold", "lots", "--db", str(store)), "--threshold")


def test_history_exports_csv_rows_and_jsonl_runs(store):
    rows = list(csv.DictReader(io.StringIO(attnprof("history", "--export", "csv", "--db", str(store)).stdout)))
    assert [(r["run"], r["variant"]) for r in rows] == [("2", "naive"), ("2", "sdpa-math"),
                                                        ("1", "naive"), ("1", "sdpa-math")]
    assert all(float(r["device_us"]) > 0 and r["torch"] == torch.__version__ for r in rows)
    lines = attnprof("history", "--export", "jsonl", "--db", str(store)).stdout.splitlines()
    assert [json.loads(line)["id"] for line in lines] == [2, 1]


def test_history_html_plots_device_time_across_runs(store, tmp_path):
    page = tmp_path / "history.html"
    proc = attnprof("history", "--db", str(store), "--html", str(page))
    assert proc.returncode == 0, proc.stderr
    html = page.read_text()
    assert "<svg" in html and "Device time per forward, 1_2_32_16_bf16" in html
    assert "run 2" in proc.stdout and "naive" in proc.stdout


def test_compare_into_a_closed_pipe_keeps_its_own_exit_status(store, tmp_path):
    from support import attnprof_into_closed_pipe

    same = attnprof_into_closed_pipe("compare", "--db", str(store))
    assert same.returncode == 0 and "Broken pipe" not in same.stderr, same.stderr
    db = tmp_path / FILE_NAME
    db.write_bytes(store.read_bytes())
    with connect(db) as conn:
        run = latest_run(conn)
    run["variants"][0]["aten_ops"] += 1
    record(run, db)
    regressed = attnprof_into_closed_pipe("compare", "--db", str(db))
    assert regressed.returncode == 1 and "Broken pipe" not in regressed.stderr, regressed.stderr
