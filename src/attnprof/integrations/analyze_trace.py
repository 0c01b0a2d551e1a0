"""The process the profiler handler starts for each trace: analyse it through the API, record it in the
history (rank 0), print one JSON line for the handler to read. Any failure is one line on stderr and a
non-zero exit, which the handler logs as one warning; a traceback only with ATTNPROF_DEBUG=1."""

from __future__ import annotations

import argparse
import json
import os
import sys

from attnprof.integrations.profiler import one_line

TOP_FINDINGS = 3


def main(argv: list[str] | None = None) -> int:
    p = argparse.ArgumentParser(prog="python -m attnprof.integrations.analyze_trace")
    p.add_argument("trace")
    p.add_argument("--region", default=None)
    p.add_argument("--name", default="step")
    p.add_argument("--db", default=None)
    p.add_argument("--no-history", action="store_true")
    p.add_argument("--attn-implementation", default=None)
    p.add_argument("--environment", type=json.loads, default=None, help="the history's environment (JSON)")
    p.add_argument("--nice", type=int, default=0, help="lower this process's priority by this much")
    p.add_argument("--memory", choices=("cpu", "cuda"), default=None,
                   help="the trace has profile_memory's events of this device: add the step's memory peak")
    args = p.parse_args(argv)
    if args.nice:
        _yield_to_training(args.nice)
    try:
        from attnprof.api import analyze_step

        d = analyze_step(args.trace, args.region, args.name, history=not args.no_history, db=args.db,
                        attn_implementation=args.attn_implementation, environment=args.environment)
    except Exception as e:  # noqa: BLE001 - whatever breaks is one line for the training's log
        if os.environ.get("ATTNPROF_DEBUG") == "1":
            raise
        print(one_line(e), file=sys.stderr)
        return 2
    summary = {"source": d["source"], "line": d["line"], "advice": d["advice"], "unit": d["unit"],
               "model_step": d["model_step"],
               "findings": [{k: f[k] for k in ("id", "severity", "cost_us", "message", "fix")}
                            for f in d["findings"][:TOP_FINDINGS]],
               "per_forward": d["per_forward"], "history_run": d["history_run"], "history_error": d["history_error"],
               "memory": None}
    if args.memory:
        summary["memory"] = step_memory(args.trace, d["region"], args.memory)
        if summary["memory"]:
            summary["line"] += f"; {memory_words(summary['memory'])}"
    print(json.dumps(summary))
    return 0


def step_memory(trace: str, region: str, device: str) -> dict | None:
    """The first step's memory peak and what holds it (analysis.memory_peak), from the trace's own events."""
    import gzip

    from attnprof.analysis.memory_peak import peak

    opener = gzip.open if trace.endswith(".gz") else open
    with opener(trace, "rb") as f:
        events = json.load(f).get("traceEvents") or []
    return peak(events, region, device)


def memory_words(mem: dict) -> str:
    from attnprof.units import mib

    held = ", ".join(f"{h['op']} {mib(h['bytes'])}" for h in mem["held_by"][:3])
    return f"step memory peak {mib(mem['peak_bytes'])} above its start" + (f" (held by {held})" if held else "")


def _yield_to_training(niceness: int) -> None:
    """Run only on CPU time the training leaves idle: SCHED_IDLE where Linux has it (a niced process still
    takes its share of a busy core, measured: the steps after the window ran ~2x slower on two shared
    cores), else a lower priority."""
    try:
        os.sched_setscheduler(0, os.SCHED_IDLE, os.sched_param(0))
    except (AttributeError, OSError):
        if hasattr(os, "nice"):
            os.nice(niceness)


if __name__ == "__main__":
    sys.exit(main())
