"""`attnprof analyze DIR --cluster ADDRESS` and `--ranks-out`: the Dask path's errors, and the table written
for other tools. SYNTHETIC rank traces (tests/synthetic_ranks.py)."""

from __future__ import annotations

import json
import sys

from attnprof.cli import main
from support import assert_one_line_error, attnprof
from synthetic_ranks import write_ranks


def test_cluster_without_dask_installed_is_one_line_saying_how_to_install_it(tmp_path, monkeypatch, capsys):
    write_ranks(tmp_path, 2)
    monkeypatch.setitem(sys.modules, "distributed", None)  # `import distributed` raises ImportError
    assert main(["analyze", str(tmp_path), "--cluster", "local"]) == 2
    err = capsys.readouterr().err.strip().splitlines()
    assert len(err) == 1 and "pip install 'attnprof[cluster]'" in err[0] and "Traceback" not in err[0]


def test_a_cluster_address_that_is_no_scheduler_is_one_line(tmp_path):
    write_ranks(tmp_path / "ranks", 2)
    proc = attnprof("analyze", str(tmp_path / "ranks"), "--cluster", str(tmp_path / "scheduler.json"))
    assert_one_line_error(proc, "scheduler file")


def test_ranks_out_writes_every_rank_and_a_glob_names_the_traces(tmp_path):
    write_ranks(tmp_path, 3)
    proc = attnprof("analyze", str(tmp_path / "synthetic_rank*.json.gz"), "--ranks-out", str(tmp_path / "r.jsonl"))
    assert proc.returncode == 0, proc.stderr
    rows = [json.loads(line) for line in (tmp_path / "r.jsonl").read_text().splitlines()]
    assert [r["rank"] for r in rows] == [0, 1, 2] and {r["status"] for r in rows} == {"ok"}
    assert "3 rank traces" in proc.stdout


def test_ranks_out_of_another_kind_is_refused_before_any_trace_is_read(tmp_path):
    write_ranks(tmp_path, 2)
    proc = attnprof("analyze", str(tmp_path), "--ranks-out", str(tmp_path / "ranks.txt"))
    assert_one_line_error(proc, ".jsonl or a .csv")
    assert not (tmp_path / "ranks.txt").exists()
