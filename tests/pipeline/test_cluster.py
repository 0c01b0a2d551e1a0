"""Several ranks' traces analysed on Dask distributed (pipeline.cluster) against the local pool, on
SYNTHETIC rank traces (tests/synthetic_ranks.py). An in-process LocalCluster (threads, no processes) keeps
these fast; a real `dask scheduler` with `dask worker` processes runs in the slow test at the end and in
benchmarks/engine/ranks_cluster.py."""

from __future__ import annotations

import gzip
import os
import subprocess
import sys
import time
from pathlib import Path

import pytest

from attnprof import api
from attnprof.errors import UserError
from attnprof.pipeline import ranks
from attnprof.pipeline.cluster import analyze_ranks_on, connect
from attnprof.pipeline.ranks import analyze_ranks
from synthetic_ranks import write_ranks

distributed = pytest.importorskip("distributed")


@pytest.fixture(scope="module")
def client():
    # threads of this process, talking in-process; its HTTP server (health routes) on loopback only
    with distributed.LocalCluster(n_workers=2, threads_per_worker=1, processes=False,
                                  dashboard_address="127.0.0.1:0") as c, distributed.Client(c) as cl:
        yield cl


def test_the_cluster_gives_the_local_pools_result_rank_for_rank(tmp_path, client):
    write_ranks(tmp_path, 6, extra_us=(0.0, 10.0, 0.0, 300.0, 20.0, 0.0))
    local = analyze_ranks([tmp_path], workers=2)
    on_cluster = analyze_ranks_on(client, [tmp_path])
    run = on_cluster.pop("cluster")
    assert on_cluster == local
    assert run["workers"] == 2 and run["rerun"] == [] and run["scheduler"].startswith("inproc://")
    assert on_cluster["distributed"]["slowest_rank"] == 3


CORPUS = Path(__file__).resolve().parents[2].parent / "shared" / "corpus" / "traces"  # ../shared from the root


@pytest.mark.skipif(not CORPUS.is_dir(), reason="the real-trace corpus ../shared/corpus/traces is absent")
def test_real_ranks_of_a_128_rank_job_give_the_same_result_on_the_cluster(client):
    sampled = [CORPUS / "hta" / "sampled" / f"rank-{r}.json.gz" for r in (0, 1)]  # HTA's tests/data
    on_cluster = analyze_ranks_on(client, sampled)
    on_cluster.pop("cluster")
    assert on_cluster == analyze_ranks(sampled)
    assert [r["instances"] for r in on_cluster["ranks"]] == [2, 2]


def test_an_unreadable_rank_is_recorded_with_its_reason_and_the_others_are_analysed(tmp_path, client):
    write_ranks(tmp_path, 3)
    bad = tmp_path / "synthetic_rank9.json.gz"
    bad.write_bytes(gzip.compress(b'{"traceEvents": [ {"ph": '))  # cut short
    result = analyze_ranks_on(client, [tmp_path])
    assert [r["rank"] for r in result["ranks"]] == [0, 1, 2]
    assert [u["source"] for u in result["unread"]] == [str(bad)]
    assert str(bad) in result["unread"][0]["reason"] and len(result["unread"][0]["reason"]) > len(str(bad)) + 5
    assert result["unread"] == analyze_ranks([tmp_path])["unread"]  # the local pool says the same


def test_a_task_that_keeps_failing_costs_only_its_own_rank_and_its_chunk_mates_are_named_re_run(tmp_path, client,
                                                                                                  monkeypatch):
    paths = write_ranks(tmp_path, 20)  # 8 tasks on 2 threads: 2-3 ranks each
    broken = str(paths[5])
    real = ranks.summary_job

    def flaky(job):  # the workers are threads of this process: they run this
        if job[0] == broken:
            raise RuntimeError("the disk went away")
        return real(job)

    monkeypatch.setattr(ranks, "summary_job", flaky)
    result = analyze_ranks_on(client, [tmp_path])
    assert [r["rank"] for r in result["ranks"]] == [r for r in range(20) if r != 5]
    assert result["unread"] == [{"source": broken, "reason": f"{broken}: not analysed on the cluster "
                                                              "(RuntimeError: the disk went away)"}]
    rerun = result["cluster"]["rerun"]
    assert broken in rerun and 2 <= len(rerun) <= 3  # its chunk's ranks: run in the chunk, then each alone
    assert set(rerun) - {broken} <= {r["source"] for r in result["ranks"]}  # ... and analysed when run alone


def test_connect_refuses_an_address_that_is_neither_local_a_url_nor_a_scheduler_file(tmp_path):
    with pytest.raises(UserError, match="scheduler file"), connect(str(tmp_path / "nope.json")):
        pass


def test_import_attnprof_and_the_local_path_import_no_dask():
    code = ("import sys, attnprof, attnprof.api, attnprof.pipeline.ranks, attnprof.pipeline.cluster\n"
            "print(sorted(m for m in sys.modules if m.split('.')[0] in ('dask', 'distributed')))")
    out = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, timeout=60)
    assert out.returncode == 0, out.stderr
    assert out.stdout.strip() == "[]"


@pytest.mark.slow
def test_a_real_scheduler_and_two_worker_processes_on_loopback_give_the_local_result(tmp_path):
    write_ranks(tmp_path / "ranks", 8, extra_us=tuple(10.0 * r for r in range(8)))
    env = {**os.environ, "OPENBLAS_NUM_THREADS": "1"}
    file = tmp_path / "scheduler.json"
    dask = [str(Path(sys.executable).parent / "dask")]
    procs = [subprocess.Popen([*dask, "scheduler", "--host", "127.0.0.1", "--port", "0", "--scheduler-file", str(file),
                               "--no-dashboard"], env=env, stderr=subprocess.DEVNULL)]
    try:
        end = time.monotonic() + 60
        while not (file.exists() and file.stat().st_size) and time.monotonic() < end:
            time.sleep(0.1)
        procs += [subprocess.Popen([*dask, "worker", "--scheduler-file", str(file), "--nworkers", "1", "--nthreads",
                                    "1", "--host", "127.0.0.1", "--no-dashboard"], env=env, stderr=subprocess.DEVNULL)
                  for _ in range(2)]
        with connect(str(file)) as client:
            client.wait_for_workers(2, timeout=120)
            result = api.analyze_ranks([tmp_path / "ranks"], client=client)
        assert result.pop("cluster")["workers"] == 2
        assert result == analyze_ranks([tmp_path / "ranks"])
    finally:
        for p in procs:
            p.terminate()
        for p in procs:
            p.wait(timeout=30)


def test_traces_behind_an_fsspec_url_are_read_where_they_lie_by_the_workers(tmp_path, client):
    fsspec = pytest.importorskip("fsspec")
    paths = write_ranks(tmp_path, 3, extra_us=(0.0, 50.0, 0.0))
    memory = fsspec.filesystem("memory")  # one store per process: the workers here are this process's threads
    for p in paths:
        memory.pipe(f"/job46/{p.name}", p.read_bytes())
    try:
        on_cluster = analyze_ranks_on(client, ["memory://job46/"])
        local = analyze_ranks([tmp_path])
    finally:
        memory.rm("/job46", recursive=True)
    assert [r["source"].removeprefix("memory://").lstrip("/") for r in on_cluster["ranks"]] == \
        [f"job46/{p.name}" for p in paths]
    for a, b in zip(on_cluster["ranks"], local["ranks"], strict=True):
        assert {**a, "source": None} == {**b, "source": None}


def test_the_driver_imports_no_analysis_and_ends_without_the_interpreters_teardown(tmp_path):
    """The analysis is the workers' (they merge too): the driver sends its tasks ~0.25 s sooner without
    importing it. Once distributed is imported the command ends in `cli.finish`, which runs the exit
    handlers and flushes the streams before os._exit: what was printed and a handler's work are kept."""
    script = ("import atexit, sys\n"
              "import attnprof.pipeline.cluster, distributed\n"
              "assert not any(m.startswith(('attnprof.analysis', 'attnprof.findings', 'attnprof.trace'))\n"
              "               for m in sys.modules), sorted(m for m in sys.modules if m.startswith('attnprof'))\n"
              f"atexit.register(lambda: open({str(tmp_path / 'handler_ran')!r}, 'w').close())\n"
              "print('printed before the end', end='')\n"
              "from attnprof.cli import finish\n"
              "finish(3)\n")
    done = subprocess.run([sys.executable, "-c", script], capture_output=True, text=True, timeout=120)
    assert done.returncode == 3, done.stderr
    assert done.stdout == "printed before the end" and (tmp_path / "handler_ran").exists()


def test_a_workers_preload_runs_the_analysis_once_on_its_own_trace():
    from attnprof.pipeline.cluster import warm_up

    merged = warm_up()  # what `dask worker --preload attnprof.pipeline.cluster` runs as the worker starts
    assert len(merged["ranks"]) == 2 and not merged["unread"]
    assert all(r["attention_us"] == 20.0 and r["comm_us"] == 30.0 for r in merged["ranks"])
