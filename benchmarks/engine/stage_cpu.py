"""CPU seconds (and wall seconds) of attnprof's reading and of the rest of `analyze --json` (attribution,
queries, findings) on one trace, `--runs` times (default 3), for A/B runs of two source trees side by side:

    git archive COMMIT src | tar -x -C /tmp/old
    for src in /tmp/old/src src /tmp/old/src src; do PYTHONPATH=$src python3 benchmarks/engine/stage_cpu.py TRACE; done

CPU time (this process's and that of the processes that read a big trace in ranges), not wall time,
so that other jobs on a shared machine count less; the wall time beside it says what a user waits.
"""

from __future__ import annotations

import argparse
import gc
import resource
import time

from attnprof.analysis.attribution import analyze_trace
from attnprof.pipeline.one_trace import analysis_dict
from attnprof.trace.reader import load


def cpu_s() -> float:
    children = resource.getrusage(resource.RUSAGE_CHILDREN)
    return time.process_time() + children.ru_utime + children.ru_stime


def main(path: str, runs: int) -> None:
    for _ in range(runs):
        gc.collect()
        t, w = cpu_s(), time.perf_counter()
        trace = load(path)
        read, read_wall = cpu_s() - t, time.perf_counter() - w
        analysis_dict(analyze_trace(trace))
        rest, rest_wall = cpu_s() - t - read, time.perf_counter() - w - read_wall
        print(f"read {read:.3f} s  rest {rest:.3f} s  total {read + rest:.3f} s CPU; "
              f"wall: read {read_wall:.3f} s  rest {rest_wall:.3f} s", flush=True)
        del trace


if __name__ == "__main__":
    p = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    p.add_argument("trace")
    p.add_argument("--runs", type=int, default=3)
    args = p.parse_args()
    main(args.trace, args.runs)
