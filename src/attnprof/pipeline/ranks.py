"""Several ranks' traces of one job: finding the files, one process per trace, each rank's findings,
and the merge of their summaries (the facts themselves: analysis.distributed). Imports no torch.

Memory per process is one trace's; the merge holds kilobytes per rank, so a thousand ranks merge as
easily as two.
"""

from __future__ import annotations

import multiprocessing
import os
import sys
from collections.abc import Callable
from pathlib import Path

from attnprof.analysis.attribution import analyze_trace, require_region
from attnprof.analysis.distributed import merged, rank_facts, step_region
from attnprof.errors import UserError
from attnprof.findings import run_findings, run_rank_findings
from attnprof.trace.reader import DEFAULT_MAX_BYTES, load

TRACE_SUFFIXES = (".json", ".json.gz")


def trace_paths(inputs: list[str | Path]) -> list[Path]:
    """The trace files named, a folder standing for the traces directly in it (sorted)."""
    found: list[Path] = []
    for item in map(Path, inputs):
        if item.is_dir():
            inside = sorted(p for p in item.iterdir() if p.is_file() and p.name.endswith(TRACE_SUFFIXES))
            if not inside:
                raise UserError(f"{item}: no .json or .json.gz traces in this folder")
            found += inside
        elif item.exists():
            found.append(item)
        else:
            raise UserError(f"{item}: no such file or folder")
    return list(dict.fromkeys(found))


def rank_summary(path: str | Path, region: str | None = None, max_bytes: int = DEFAULT_MAX_BYTES) -> dict:
    """Everything the merge needs from one rank's trace, a few kilobytes whatever the trace's size."""
    trace = load(path, max_bytes=max_bytes)
    a = require_region(analyze_trace(trace, region or step_region(trace)), region)
    return {**rank_facts(a, trace, path), "findings": run_findings(a), "warnings": list(a.warnings)}


def _summary_job(job: tuple[str, str | None, int]) -> dict:
    path, region, max_bytes = job
    try:
        return rank_summary(path, region, max_bytes)
    except UserError as e:  # one unreadable trace is reported, the others are still analysed
        return {"source": path, "error": str(e)}


def summaries(paths: list[Path], region: str | None = None, max_bytes: int = DEFAULT_MAX_BYTES,
              workers: int | None = None, meanwhile: Callable[[], None] | None = None) -> list[dict]:
    """One summary per trace, made by a pool of worker processes (in this process when there is one
    trace). `meanwhile` runs here while the workers read (the CLI imports its views there)."""
    jobs = [(str(p), region, max_bytes) for p in paths]
    workers = min(len(jobs), workers or _cores())
    if workers <= 1:
        done = [_summary_job(j) for j in jobs]
        if meanwhile is not None:
            meanwhile()
        return done
    return _pooled(jobs, workers, meanwhile)


def _pooled(jobs: list[tuple[str, str | None, int]], workers: int, meanwhile: Callable[[], None] | None) -> list[dict]:
    """The jobs' summaries in their order, made by `workers` processes, the largest traces first (so that
    no worker starts a big trace while the others run out of work)."""
    order = sorted(range(len(jobs)), key=lambda i: -_size(jobs[i][0]))
    # fork where it is safe (Linux; the CLI process runs no threads): no worker re-imports anything. A
    # worker analyses trace after trace, its peak memory that of its largest trace, not their sum (a
    # fresh worker per trace cost 0.02-0.05 s of CPU each here: the fork's copied pages, cold caches).
    method = "fork" if sys.platform == "linux" else "spawn"
    with multiprocessing.get_context(method).Pool(workers) as pool:
        pending = pool.map_async(_summary_job, [jobs[i] for i in order], chunksize=1)
        if meanwhile is not None:
            meanwhile()
        made = pending.get()
    found: list[dict] = [{}] * len(jobs)
    for i, summary in zip(order, made, strict=True):
        found[i] = summary
    return found


def _cores() -> int:
    """The cores this process may run on (a container's or taskset's share, not the machine's count)."""
    if hasattr(os, "sched_getaffinity"):
        return len(os.sched_getaffinity(0))
    return os.cpu_count() or 1


def _size(path: str) -> int:
    try:
        return os.stat(path).st_size
    except OSError:  # reported by its job
        return 0


def analyze_ranks(inputs: list[str | Path], region: str | None = None, max_bytes: int = DEFAULT_MAX_BYTES,
                  workers: int | None = None, meanwhile: Callable[[], None] | None = None) -> dict:
    """`attnprof analyze A B ...` or `attnprof analyze FOLDER`: the `attnprof.ranks/1` dict."""
    return merge(summaries(trace_paths(inputs), region, max_bytes, workers, meanwhile))


def merge(ranks: list[dict]) -> dict:
    """Line the rank summaries up, add what only several ranks show, and the findings about them."""
    result = merged(ranks)
    result["findings"] = run_rank_findings(result)
    return result
