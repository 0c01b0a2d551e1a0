"""CPU seconds of attnprof's reading and of the rest of `analyze --json` (attribution, queries, findings) on
one trace, three times, for A/B runs of two source trees side by side:

    git archive COMMIT src | tar -x -C /tmp/old
    for src in /tmp/old/src src /tmp/old/src src; do PYTHONPATH=$src python3 benchmarks/stage_cpu.py TRACE; done

CPU time (this process's and that of the processes that read a big trace in ranges), not wall time,
so that other jobs on a shared machine count less.
"""

from __future__ import annotations

import gc
import resource
import sys
import time

from attnprof.analysis.attribution import analyze_trace
from attnprof.pipeline import analysis_dict
from attnprof.trace.reader import load


def cpu_s() -> float:
    children = resource.getrusage(resource.RUSAGE_CHILDREN)
    return time.process_time() + children.ru_utime + children.ru_stime


def main(path: str) -> None:
    for _ in range(3):
        gc.collect()
        t = cpu_s()
        trace = load(path)
        read = cpu_s() - t
        analysis_dict(analyze_trace(trace))
        rest = cpu_s() - t - read
        print(f"read {read:.3f} s  rest {rest:.3f} s  total {read + rest:.3f} s CPU", flush=True)
        del trace


if __name__ == "__main__":
    main(sys.argv[1])
