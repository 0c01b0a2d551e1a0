"""W of docs/lab/benchmarks.md's "Eight ranks on 2 cores" model: the CPU seconds of one trace's work in a pool
worker, as `attnprof analyze FOLDER` runs it (`pipeline.ranks`: forked workers, trace after trace), measured by
`time.process_time()` around each job. A worker's first trace (W') is reported apart from the ones after it.

    python benchmarks/engine/big_trace.py --make rank8.json --mb 8
    python benchmarks/engine/rank_work.py rank8.json --ranks 8 --rounds 5

Prints per round the first jobs' and the later jobs' CPU, then the medians over all rounds, and one rank's
stages in this process (reading; analyze_trace; rank_facts; the findings), minimum of 7 runs.
"""

from __future__ import annotations

import argparse
import multiprocessing
import os
import statistics
import sys
import time
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parents[2] / "src"))

from attnprof.analysis.attribution import analyze_trace  # noqa: E402
from attnprof.analysis.distributed import rank_facts, step_region  # noqa: E402
from attnprof.findings import run_findings  # noqa: E402
from attnprof.pipeline import ranks  # noqa: E402
from attnprof.trace.reader import load  # noqa: E402


def timed_job(path: str) -> tuple[int, float]:
    """(this worker's pid, the CPU seconds of one rank's summary), as a pool job."""
    t = time.process_time()
    ranks.rank_summary(path, None)
    return os.getpid(), time.process_time() - t


def pool_round(path: str, n: int, workers: int) -> tuple[list[float], list[float]]:
    """One `analyze FOLDER` worth of jobs: (each worker's first job's CPU, the later jobs' CPU)."""
    with multiprocessing.get_context("fork").Pool(workers) as pool:
        done = pool.map(timed_job, [path] * n, chunksize=1)
    first, later, seen = [], [], set()
    for pid, cpu in done:
        (later if pid in seen else first).append(cpu)
        seen.add(pid)
    return first, later


def stages(path: str) -> dict[str, float]:
    """One rank's stages in this (warm) process, CPU seconds."""
    marks = {}
    t = time.process_time()
    trace = load(path)
    marks["read"] = time.process_time() - t
    a = analyze_trace(trace, step_region(trace))
    marks["analyze_trace"] = time.process_time() - t - sum(marks.values())
    rank_facts(a, trace, path)
    marks["rank_facts"] = time.process_time() - t - sum(marks.values())
    run_findings(a)
    marks["findings"] = time.process_time() - t - sum(marks.values())
    return marks


def main() -> None:
    p = argparse.ArgumentParser()
    p.add_argument("trace")
    p.add_argument("--ranks", type=int, default=8)
    p.add_argument("--rounds", type=int, default=5)
    p.add_argument("--workers", type=int, default=2)
    args = p.parse_args()
    firsts, laters = [], []
    for _ in range(args.rounds):
        load_avg = os.getloadavg()[0]
        first, later = pool_round(args.trace, args.ranks, args.workers)
        firsts += first
        laters += later
        print(f"load {load_avg:.2f}: first {' '.join(f'{x:.3f}' for x in first)}  "
              f"later {' '.join(f'{x:.3f}' for x in sorted(later))}", flush=True)
    print(f"W' (first job of a worker): median {statistics.median(firsts):.3f} s, {min(firsts):.3f}-{max(firsts):.3f}")
    print(f"W (later jobs): median {statistics.median(laters):.3f} s, {min(laters):.3f}-{max(laters):.3f}")
    runs = [stages(args.trace) for _ in range(7)]
    print("one rank here, min of 7:", "  ".join(f"{k} {min(r[k] for r in runs) * 1e3:.1f} ms" for k in runs[0]))


if __name__ == "__main__":
    main()
