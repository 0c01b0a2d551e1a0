"""Several ranks' traces analysed together (analysis.distributed), on SYNTHETIC rank traces with known
figures (tests/synthetic_ranks.py); the GPU-recorded ones are read in test_distributed_h200.py."""

from __future__ import annotations

import gzip
import json
import multiprocessing
import os

import pytest

from attnprof.errors import UserError
from attnprof.pipeline import ranks
from attnprof.pipeline.ranks import analyze_ranks, summaries, trace_paths
from synthetic_ranks import COMM_US, EXPOSED_US, rank_trace, write_ranks


def test_a_folder_stands_for_the_traces_in_it_and_a_missing_path_is_a_user_error(tmp_path):
    paths = write_ranks(tmp_path, 2)
    (tmp_path / "notes.txt").write_text("not a trace")
    assert trace_paths([tmp_path]) == paths
    with pytest.raises(UserError, match="no such file"):
        trace_paths([tmp_path / "nope.json"])
    (tmp_path / "empty").mkdir()
    with pytest.raises(UserError, match="no .json"):
        trace_paths([tmp_path / "empty"])


def test_every_rank_is_found_from_distributed_info_with_its_comm_figures(tmp_path):
    write_ranks(tmp_path, 4)
    result = analyze_ranks([tmp_path])
    assert [r["rank"] for r in result["ranks"]] == [0, 1, 2, 3]
    assert result["world_size"] == 4 and result["distributed"]["missing_ranks"] == []
    for r in result["ranks"]:
        assert r["nccl_kernels"] == 2
        assert r["comm_us"] == pytest.approx(COMM_US)
        assert r["exposed_comm_us"] == pytest.approx(EXPOSED_US)
        assert r["overlap_fraction"] == pytest.approx(1 - EXPOSED_US / COMM_US, abs=1e-4)


def test_the_rank_with_the_most_compute_is_the_slowest_and_skew_is_the_spread_of_ends(tmp_path):
    result = analyze_ranks(write_ranks(tmp_path, 3, extra_us=(0.0, 250.0, 100.0)))
    d = result["distributed"]
    assert d["slowest_rank"] == 1 and d["last_to_finish"] == 1
    assert d["skew_start_us"] == pytest.approx(0.0)
    assert d["skew_end_us"] == pytest.approx(250.0)
    assert "cp-imbalance" in [f["id"] for f in result["findings"]]


def test_clocks_are_lined_up_by_each_traces_base_time(tmp_path):
    early = rank_trace(0, 2)
    late = rank_trace(1, 2, shift_us=-40.0)  # its ts read 40 µs earlier ...
    late["baseTimeNanoseconds"] += 40_000  # ... on a clock that starts 40 µs later: the same moment
    for r, doc in enumerate((early, late)):
        (tmp_path / f"r{r}.json").write_text(json.dumps(doc))
    assert analyze_ranks([tmp_path])["distributed"]["skew_start_us"] == pytest.approx(0.0, abs=1e-3)


def test_a_trace_without_distributed_info_takes_the_rank_in_its_name_and_says_so(tmp_path):
    (tmp_path / "job_rank1.json").write_text(json.dumps(rank_trace(1, 2, info=False)))
    (tmp_path / "job_rank0.json").write_text(json.dumps(rank_trace(0, 2, info=False)))
    result = analyze_ranks([tmp_path])
    assert [r["rank"] for r in result["ranks"]] == [0, 1]
    assert any("no distributedInfo" in w for w in result["warnings"])


def test_missing_and_repeated_ranks_are_warned_about(tmp_path):
    doc = rank_trace(2, 4)
    for name in ("a.json", "b.json"):
        (tmp_path / name).write_text(json.dumps(doc))
    result = analyze_ranks([tmp_path])
    assert result["distributed"]["missing_ranks"] == [0, 1, 3]
    assert any("rank 2 appears in 2 traces" in w for w in result["warnings"])


def test_a_claimed_world_size_sizes_neither_memory_nor_output(tmp_path):
    """A trace may claim any world size: 10^9 ranks are counted missing, 16 of them named, said as runs
    (before: a set of range(world) built, 1.1 GB at 10^7, MemoryError at 10^9)."""
    for rank in (0, 1):
        doc = rank_trace(rank, 2)
        doc["distributedInfo"]["world_size"] = 10**9
        (tmp_path / f"r{rank}.json").write_text(json.dumps(doc))
    result = analyze_ranks([tmp_path])
    facts = result["distributed"]
    assert facts["missing"] == 10**9 - 2 and facts["missing_ranks"] == list(range(2, 18))
    assert "ranks 2-999999999 of 1000000000 have no trace here" in result["warnings"]


def test_the_folder_of_one_run_is_not_read_as_ranks(tmp_path):
    """`attnprof run` writes one trace per variant and results.json: those are variants, not ranks of a job;
    the error says which commands read them."""
    paths = write_ranks(tmp_path, 2)
    variants = [{"name": "sdpa-flash", "trace": paths[0].name}, {"name": "naive", "trace": paths[1].name}]
    (tmp_path / "results.json").write_text(json.dumps({"schema": "attnprof.run/1", "variants": variants}))
    with pytest.raises(UserError, match=r"the folder of one `attnprof run` \(2 traces of the variants sdpa-flash, "
                                        r"naive\), not the ranks of one job.*attnprof report"):
        trace_paths([tmp_path])
    (tmp_path / "results.json").write_text(json.dumps({"schema": "attnprof.cp-run/1", "variants": variants[:1]}))
    assert trace_paths([tmp_path]) == paths  # one variant's rank traces: ranks indeed


def test_an_unreadable_trace_is_reported_and_the_others_are_still_analysed(tmp_path):
    write_ranks(tmp_path, 2)
    (tmp_path / "broken_rank2.json.gz").write_bytes(gzip.compress(b'{"traceEvents": [')[:-4])
    result = analyze_ranks([tmp_path], workers=2)
    assert [r["rank"] for r in result["ranks"]] == [0, 1]
    assert any("broken_rank2" in w for w in result["warnings"])


def test_summaries_made_in_worker_processes_equal_those_made_in_process(tmp_path):
    paths = write_ranks(tmp_path, 3, extra_us=(0.0, 30.0, 60.0))
    pooled, local = summaries(paths, workers=3), summaries(paths, workers=1)
    assert pooled == local
    assert len(json.dumps(pooled[0])) < 20_000  # a summary, not the trace


@pytest.mark.parametrize("workers", [1, 2])
def test_meanwhile_runs_once_in_this_process_and_every_trace_is_summarised_in_order(tmp_path, workers):
    paths = write_ranks(tmp_path, 4)
    pids = []
    found = summaries(paths, workers=workers, meanwhile=lambda: pids.append(os.getpid()))
    assert pids == [os.getpid()]
    assert [s["source"] for s in found] == [str(p) for p in paths]


@pytest.mark.parametrize("workers", [1, 2])
def test_progress_is_told_each_trace_done_in_this_process(tmp_path, workers):
    paths = write_ranks(tmp_path, 4)
    told = []
    summaries(paths, workers=workers, progress=lambda *said: told.append((*said, os.getpid())))
    assert told == [("ranks", k, 4, os.getpid()) for k in range(1, 5)]


def test_pooled_summaries_keep_the_order_of_the_paths_whatever_their_sizes(tmp_path):
    paths = write_ranks(tmp_path, 4)
    paths[2].write_bytes(gzip.compress(json.dumps(rank_trace(2, 4, steps=6)).encode()))  # the largest
    assert [s["source"] for s in summaries(paths, workers=2)] == [str(p) for p in paths]


def test_a_failure_in_a_worker_is_raised_here_and_no_worker_is_left(tmp_path, monkeypatch):
    paths = write_ranks(tmp_path, 4)

    def summary_or_failure(path, *args):
        if path.endswith(paths[1].name):
            raise ValueError("not a summary")
        return real(path, *args)
    real = ranks.rank_summary
    monkeypatch.setattr(ranks, "rank_summary", summary_or_failure)  # the forked workers run this one
    with pytest.raises(ValueError, match="not a summary"):
        summaries(paths, workers=2)
    assert multiprocessing.active_children() == []
