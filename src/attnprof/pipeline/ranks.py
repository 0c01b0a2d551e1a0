"""Several ranks' traces of one job: finding the files, one process per trace, each rank's findings,
and the merge of their summaries (the facts themselves: analysis.distributed). Imports no torch.

Memory per process is one trace's; the merge holds kilobytes per rank, so a thousand ranks merge as
easily as two.
"""

from __future__ import annotations

import multiprocessing
import os
import shutil
import sys
import tempfile
from collections.abc import Callable, Iterator
from contextlib import contextmanager
from multiprocessing import connection
from pathlib import Path
from typing import Any, TypeVar

from attnprof.analysis.attribution import analyze_trace, require_region
from attnprof.analysis.distributed import merged, rank_facts, step_region
from attnprof.errors import UserError
from attnprof.findings import run_findings, run_rank_findings
from attnprof.pipeline.memory import lean, trim
from attnprof.pipeline.one_trace import Progress
from attnprof.pipeline.rank_paths import trace_paths
from attnprof.trace.reader import load

T = TypeVar("T")
COPY_PIECE = 4 << 20  # a URL's trace is copied in pieces of this size


@contextmanager
def where_it_lies(path: str | Path) -> Iterator[str | Path]:
    """A path the reader can open: the path itself, or an fsspec URL's file copied to a temporary file
    (in pieces, deleted afterwards)."""
    if "://" not in str(path):
        yield path
        return
    import fsspec

    with tempfile.NamedTemporaryFile(suffix="".join(Path(str(path)).suffixes[-2:])) as copy:
        try:
            with fsspec.open(str(path), "rb") as remote:
                shutil.copyfileobj(remote, copy, COPY_PIECE)
        except OSError as e:
            raise UserError(f"{path}: cannot read ({e})") from None
        copy.flush()
        yield copy.name


def rank_summary(path: str | Path, region: str | None = None, max_bytes: int | None = None) -> dict:
    """Everything the merge needs from one rank's trace, a few kilobytes whatever the trace's size."""
    with where_it_lies(path) as local:
        trace = load(local, max_bytes=max_bytes)
    with lean():
        a = require_region(analyze_trace(trace, region or step_region(trace)), region)
        return {**rank_facts(a, trace, path), "findings": run_findings(a, after_rule=trim),
                "warnings": list(a.warnings)}


def summary_job(job: tuple[str, str | None, int]) -> dict:
    path, region, max_bytes = job
    try:
        return rank_summary(path, region, max_bytes)
    except UserError as e:  # one unreadable trace is reported, the others are still analysed
        return {"source": path, "error": str(e)}


def summaries(paths: list[Path], region: str | None = None, max_bytes: int | None = None,
              workers: int | None = None, meanwhile: Callable[[], None] | None = None,
              progress: Progress | None = None) -> list[dict]:
    """One summary per trace, made by a pool of worker processes (in this process when there is one
    trace). `meanwhile` runs here while the workers read (the CLI imports its views there); `progress` is
    told ("ranks", traces done, of how many) as each is done."""
    jobs = [(str(p), region, max_bytes) for p in paths]
    workers = min(len(jobs), workers or cores())
    one_done = _counter(progress, len(jobs))
    if workers <= 1:
        done = [one_done(summary_job(j)) for j in jobs]
        if meanwhile is not None:
            meanwhile()
        return done
    return _pooled(jobs, workers, meanwhile, one_done)


def _counter(progress: Progress | None, total: int) -> Callable[[T], T]:
    """A pass-through for each summary made that tells `progress` how many are made."""
    made = 0

    def one_done(summary: T) -> T:
        nonlocal made
        made += 1
        if progress is not None:
            progress("ranks", made, total)
        return summary
    return one_done


def _pooled(jobs: list[tuple[str, str | None, int]], workers: int, meanwhile: Callable[[], None] | None,
            one_done: Callable[[dict], dict]) -> list[dict]:
    """The jobs' summaries in their order, made by `workers` processes, the largest traces first (so that
    no worker starts a big trace while the others run out of work)."""
    order = iter(sorted(range(len(jobs)), key=lambda i: -_size(jobs[i][0])))
    # fork where it is safe (Linux; the CLI process runs no threads): no worker re-imports anything. A
    # worker analyses trace after trace, its peak memory that of its largest trace, not their sum (a
    # fresh worker per trace cost 0.02-0.05 s of CPU each here: the fork's copied pages, cold caches).
    # Not multiprocessing's Pool: its three threads and queues took 20-30 ms of this process's CPU
    # beside the workers on 2 cores; this process only hands out jobs, waiting on the workers' pipes.
    context = multiprocessing.get_context("fork" if sys.platform == "linux" else "spawn")
    links = [_start_worker(context) for _ in range(workers)]
    found: list[dict] = [{}] * len(jobs)
    ahead = {conn: 0 for _, conn in links}  # jobs sent to a worker and not yet answered
    finished = False
    try:
        for _, conn in links * (1 if meanwhile is None else 2):  # a second job to go on with while `meanwhile` runs
            ahead[conn] += _hand_out(conn, order, jobs)
        if meanwhile is not None:
            meanwhile()
        while ahead:
            for conn in connection.wait(list(ahead)):
                i, summary = _reply(conn)
                found[i] = one_done(summary)
                ahead[conn] -= 1
                if not ahead[conn]:  # the next job to the first worker free
                    ahead[conn] = _hand_out(conn, order, jobs)
                if not ahead[conn]:
                    del ahead[conn]
        finished = True
    finally:
        for process, conn in links:  # every end closed before any join: a later fork holds the earlier ones
            conn.close()  # the worker's next read ends it
            if not finished:  # something failed: the other jobs are not needed
                process.kill()
        for process, _ in links:
            process.join()
    return found


def _start_worker(context: Any) -> tuple[Any, Any]:
    ours, theirs = context.Pipe()
    process = context.Process(target=_serve, args=(theirs, ours), daemon=True)  # a daemon reads a trace in one process
    process.start()
    theirs.close()
    return process, ours


def _hand_out(conn: Any, order: Iterator[int], jobs: list[tuple[str, str | None, int]]) -> int:
    """Send the next job, if one is left: 1 if one was sent."""
    i = next(order, None)
    if i is not None:
        conn.send((i, jobs[i]))
    return int(i is not None)


def _reply(conn: Any) -> tuple[int, dict]:
    """A worker's (job, summary); what its job raised is raised here."""
    try:
        i, summary, failure = conn.recv()
    except EOFError:
        raise RuntimeError("a worker process analysing the traces ended without its result") from None
    if failure is not None:
        raise failure
    return i, summary


def _serve(conn: Any, parents: Any) -> None:
    """In a worker process: the summary of each job sent, until the parent closes its end (`parents`, of
    which the worker closes its copy first)."""
    parents.close()
    while True:
        try:
            i, job = conn.recv()
        except EOFError:
            return
        try:
            conn.send((i, summary_job(job), None))
        except Exception as e:  # noqa: BLE001 (the parent raises it, as a pool's map would)
            conn.send((i, None, e))


def cores() -> int:
    """The cores this process may run on (a container's or taskset's share, not the machine's count)."""
    if hasattr(os, "sched_getaffinity"):
        return len(os.sched_getaffinity(0))
    return os.cpu_count() or 1


def _size(path: str) -> int:
    try:
        return os.stat(path).st_size
    except OSError:  # reported by its job
        return 0


def analyze_ranks(inputs: list[str | Path], region: str | None = None, max_bytes: int | None = None,
                  workers: int | None = None, meanwhile: Callable[[], None] | None = None,
                  progress: Progress | None = None) -> dict:
    """`attnprof analyze A B ...` or `attnprof analyze FOLDER`: the `attnprof.ranks/1` dict."""
    return merge(summaries(trace_paths(inputs), region, max_bytes, workers, meanwhile, progress))


def merge(ranks: list[dict]) -> dict:
    """Line the rank summaries up, add what only several ranks show, and the findings about them."""
    result = merged(ranks)
    result["findings"] = run_rank_findings(result)
    return result
