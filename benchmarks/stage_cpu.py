"""CPU seconds of attnprof's reading and of the rest of `analyze --json` (attribution, queries, findings) on
one trace, three times, for A/B runs of two source trees side by side:

    git archive COMMIT src | tar -x -C /tmp/old
    for src in /tmp/old/src src /tmp/old/src src; do PYTHONPATH=$src python3 benchmarks/stage_cpu.py TRACE; done

CPU time (`time.process_time`), not wall time, so that other jobs on a shared machine count less.
"""

from __future__ import annotations

import gc
import sys
import time

from attnprof.analysis.attribution import analyze_trace
from attnprof.pipeline import analysis_dict
from attnprof.trace.reader import load


def main(path: str) -> None:
    for _ in range(3):
        gc.collect()
        t = time.process_time()
        trace = load(path)
        read = time.process_time() - t
        analysis_dict(analyze_trace(trace))
        rest = time.process_time() - t - read
        print(f"read {read:.3f} s  rest {rest:.3f} s  total {read + rest:.3f} s CPU", flush=True)
        del trace


if __name__ == "__main__":
    main(sys.argv[1])
