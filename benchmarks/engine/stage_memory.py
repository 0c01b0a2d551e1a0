"""Resident memory of `analyze --json` stage by stage in one process: after the imports, reading, the split
into forwards, each findings rule (in the order run_findings runs them) and each section of the analysis dict,
with the high-water mark of each stage (Linux: VmHWM, reset between stages through /proc/self/clear_refs):

    python benchmarks/engine/stage_memory.py TRACE

The marks are taken where the analysis hands its freed heap back (after each rule and each section), so they
show what each stage keeps and what it needs while it runs. Linux only; a tool for finding what holds memory,
not the bar's figure (`big_trace.py --memory` measures a fresh interpreter, readers included)."""

from __future__ import annotations

import sys

import attnprof.findings as findings
import attnprof.pipeline.memory as memory
import attnprof.pipeline.one_trace as pipeline
from attnprof.analysis.attribution import analyze_trace
from attnprof.trace.reader import load

SECTIONS = ("kernels_not_listed", "per_forward", "phases", "kernels", "attention_calls", "model_step")


def mark(label: str) -> None:
    """Print the RSS now and the stage's high-water mark (MB), then start the next stage's mark."""
    with open("/proc/self/status") as f:
        kb = {k: int(v.split()[0]) for k, v in (line.split(":", 1) for line in f) if k in ("VmRSS", "VmHWM")}
    print(f"{label:32s} RSS {kb['VmRSS'] / 1024:6.1f} MB   stage peak {kb['VmHWM'] / 1024:6.1f} MB", flush=True)
    with open("/proc/self/clear_refs", "w") as f:
        f.write("5")  # reset VmHWM to the RSS now


def main(path: str) -> None:
    rules = [fid for walks in (True, False) for fid, rule in findings.RULES.items()
             if rule.check and rule.walks_op_trees is walks]
    walkers = sum(findings.RULES[fid].walks_op_trees for fid in rules)
    stages = [*rules[:walkers], "op trees dropped", *rules[walkers:], *(f"section {s}" for s in SECTIONS)]
    done = iter(stages)

    trim = memory.trim

    def trimmed() -> None:
        trim()
        mark(next(done, "?"))
    memory.trim = pipeline.trim = trimmed  # where the stages end (after each rule, the trees, each section)
    mark("imports")
    trace = load(path)
    mark("load")
    a = analyze_trace(trace)
    mark("analyze_trace")
    pipeline.analysis_dict(a)
    mark("end")


if __name__ == "__main__":
    main(sys.argv[1])
