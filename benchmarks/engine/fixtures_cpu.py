"""CPU seconds of the analysis after reading (analyze_trace + analysis_dict), summed over every recorded fixture
trace (tests/fixtures, the unusable ones left out), for A/B runs of two source trees side by side:

    git archive COMMIT src | tar -x -C /tmp/old
    for src in /tmp/old/src src /tmp/old/src src; do PYTHONPATH=$src python3 benchmarks/engine/fixtures_cpu.py; done

The traces are read first, then each analysed once: small traces, where a fixed cost per analysis shows.
"""

from __future__ import annotations

import gc
import time
from pathlib import Path

from attnprof.analysis.attribution import analyze_trace
from attnprof.pipeline.one_trace import analysis_dict
from attnprof.trace.reader import load
from attnprof.trace.source import TraceError

FIXTURES = Path(__file__).parents[2] / "tests" / "fixtures"


def main() -> None:
    traces = []
    for path in sorted(FIXTURES.glob("*/*.json*")):
        try:
            traces.append(load(path))
        except TraceError:  # the fixtures of unusable files
            continue
    total = 0.0
    for trace in traces:
        gc.collect()
        start = time.process_time()
        analysis_dict(analyze_trace(trace))
        total += time.process_time() - start
    print(f"{len(traces)} fixture traces: the analysis after reading {total:.3f} s CPU")


if __name__ == "__main__":
    main()
