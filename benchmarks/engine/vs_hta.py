"""attnprof against Holistic Trace Analysis on the same real traces, side by side on one machine.

Each round runs, alternating, one fresh process per tool and trace:
- attnprof: `attnprof.analyze(trace)`, the whole analysis `attnprof analyze --json` prints (findings, attention
  calls, the per-stream time line, coverage);
- HTA: `TraceAnalysis(trace_dir=<a folder holding only that trace>)`, then its temporal breakdown, idle-time
  breakdown and queue-length summary (the per-stream views attnprof's time line reports), with
  HTA_DISABLE_NS_ROUNDING=1 (exact float timestamps, as attnprof reads them).
Wall seconds and peak memory held (the process and the readers it forks, process_memory.peaks) per run; the
table gives medians and ranges over the rounds, and HTA's median over attnprof's.

    python3 benchmarks/engine/vs_hta.py --hta-python /tmp/htavenv/bin/python --rounds 3 \
        ../shared/corpus/traces/hta/tdiff_control/control.json.gz ../shared/corpus/traces/hta/ns/rank-0.json.gz

HTA is not a dependency of attnprof: install it in a virtual environment of its own
(`python3 -m venv /tmp/htavenv && /tmp/htavenv/bin/pip install HolisticTraceAnalysis`).
"""

from __future__ import annotations

import argparse
import os
import statistics
import sys
import tempfile
import time
from pathlib import Path

sys.path.insert(0, str(Path(__file__).parent))
from process_memory import peaks  # noqa: E402

PEAK = "import json, os; print(json.dumps({'peak': int(next(l.split()[1] for l in open('/proc/self/status') "
PEAK += "if l.startswith('VmHWM:'))) * 1024}))"
ATTNPROF = "import sys, attnprof; attnprof.analyze(sys.argv[1]); " + PEAK
HTA = ("import sys, warnings; warnings.simplefilter('ignore'); from hta.trace_analysis import TraceAnalysis; "
       "t = TraceAnalysis(trace_dir=sys.argv[1]); ranks = list(t.t.traces); t.get_temporal_breakdown(visualize=False); "
       "t.get_idle_time_breakdown(ranks=ranks, visualize=False); t.get_queue_length_summary(ranks=ranks); " + PEAK)


def timed(cmd: list[str]) -> tuple[float, int]:
    """(wall seconds, peak bytes held) of one run of `cmd`."""
    start = time.perf_counter()
    held = peaks(cmd)["held"]
    return time.perf_counter() - start, held


def main() -> None:
    p = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    p.add_argument("traces", nargs="+", type=Path)
    p.add_argument("--hta-python", required=True, help="the python of an environment with HTA installed")
    p.add_argument("--rounds", type=int, default=3)
    args = p.parse_args()
    os.environ["HTA_DISABLE_NS_ROUNDING"] = "1"
    print("| trace | MB inflated | attnprof s | HTA s | HTA/attnprof time | attnprof MiB | HTA MiB "
          "| HTA/attnprof memory |")
    print("|---|---|---|---|---|---|---|---|")
    for trace in args.traces:
        with tempfile.TemporaryDirectory() as folder:
            os.symlink(trace.resolve(), Path(folder) / trace.name)  # HTA reads every trace in a folder
            runs: dict[str, list] = {"attnprof": [], "hta": []}
            for _ in range(args.rounds):
                runs["attnprof"].append(timed([sys.executable, "-c", ATTNPROF, str(trace)]))
                runs["hta"].append(timed([args.hta_python, "-c", HTA, folder]))
        print(_row(trace, runs), flush=True)


def _row(trace: Path, runs: dict) -> str:
    import gzip

    if trace.suffix == ".gz":
        with gzip.open(trace) as f:
            size = len(f.read())
    else:
        size = trace.stat().st_size
    wall = {k: [w for w, _ in v] for k, v in runs.items()}
    mem = {k: [m / 2**20 for _, m in v] for k, v in runs.items()}

    def cell(xs: list[float], fmt: str) -> str:
        return f"{statistics.median(xs):{fmt}} ({min(xs):{fmt}}-{max(xs):{fmt}})"

    ratio_t = statistics.median(wall["hta"]) / statistics.median(wall["attnprof"])
    ratio_m = statistics.median(mem["hta"]) / statistics.median(mem["attnprof"])
    return (f"| {trace.parent.name}/{trace.name} | {size / 1e6:.1f} | {cell(wall['attnprof'], '.2f')} | "
            f"{cell(wall['hta'], '.2f')} | {ratio_t:.1f}x | {cell(mem['attnprof'], '.0f')} | {cell(mem['hta'], '.0f')} "
            f"| {ratio_m:.1f}x |")


if __name__ == "__main__":
    main()
