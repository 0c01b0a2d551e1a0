"""What the history keeps of a run, a sweep or a lint: one run with one row per (problem, variant).

A row holds the variant's status and reason, its times with their spreads (p25, p75), memory,
error, the exact counts per forward (GPU activities, kernels, memcpy, memset, aten ops, copies)
and the ids of its findings. The run holds the command, the device and the environment.
"""

from __future__ import annotations

import time
from pathlib import Path

from attnprof.contracts import RESULTS, SWEEP_SPEC, read_json
from attnprof.history.store import COUNTS, SCALARS, SETTING, TIMINGS, device_kind, run_problem
from attnprof.problem import Problem


def now() -> str:
    """UTC, to the second, ISO 8601: sorts as text and reads the same on every machine."""
    return time.strftime("%Y-%m-%dT%H:%M:%SZ", time.gmtime())


def problem_key(problem: dict) -> str:
    """The run folders' tag (`8_16_1024_64_bf16`; a training step, decode, GQA or another mask add suffixes)."""
    return Problem.from_dict(problem).tag


def from_run(results: dict, command: str, environment: dict) -> dict:
    """An `attnprof.run/1` result."""
    problem = problem_key(results["problem"])
    rows = [variant_row(v, problem) for v in results["variants"]]
    settings = timing_settings(results.get("config") or {}, results["variants"])
    return _run("run", command, results["device"], {**environment, **settings}, rows, results.get("run_dir"))


def timing_settings(options: dict, records: list[dict]) -> dict:
    """The options that change the numbers without changing the problem, as environment fields named
    `run.<option>` (store.SETTING): the threads the timing ran with, the input rotation, graph replay or
    not, torch.compile, and the timing method the rows used (the dtype is in the problem, the device in
    the device kind). `compare` names a difference in any of them and does not judge times across it."""
    threads = sorted({r["threads"] for r in records if r.get("threads") is not None})
    methods = sorted({(r.get("device_us") or {}).get("method") for r in records} - {None})
    found = {"threads": ",".join(map(str, threads)) or options.get("threads"),
             "rotate_inputs": options.get("rotate_inputs"), "graph": options.get("graph"),
             "compile": options.get("compile"), "time_method": ",".join(methods) or None}
    return {SETTING + k: v for k, v in found.items() if v is not None}


def from_sweep(sweep_dir: Path, lines: list[dict], command: str, environment: dict) -> dict:
    """A sweep's lines (results.jsonl), each with the findings of its point's results.json."""
    sweep_dir = Path(sweep_dir)
    meta = read_json(sweep_dir / SWEEP_SPEC)
    findings = _point_findings(sweep_dir, lines)
    rows = [variant_row({**line, "name": line["variant"],
                         "findings": findings.get((line.get("run_dir"), line["variant"]), [])},
                        problem_key(line["point"])) for line in lines]
    settings = timing_settings(meta.get("spec") or {}, lines)
    return _run("sweep", command, meta["device"], {**environment, **settings}, rows, str(sweep_dir))


def _point_findings(sweep_dir: Path, lines: list[dict]) -> dict[tuple[str, str], list]:
    found = {}
    for run_dir in {line.get("run_dir") for line in lines if line.get("run_dir")}:
        try:
            results = read_json(sweep_dir / run_dir / RESULTS)
        except (OSError, ValueError):
            continue  # a point without its folder still has its times and counts
        found |= {(run_dir, v["name"]): v.get("findings") or [] for v in results.get("variants", [])}
    return found


def from_cp_run(results: dict, command: str, environment: dict) -> dict:
    """An `attnprof.cp-run/1` result (`run --nproc N`, recorded by rank 0): one row per (variant, mode), its
    step time (each repeat's slowest rank) as the device time, its problem tagged with the mode and `_cpN`."""
    world = results["config"]["world_size"]
    rows = [variant_row({**case, "device_us": case.get("step_us")},
                        f"{problem_key({**results['problem'], 'mode': case['mode']})}_cp{world}")
            for case in results["variants"]]
    return _run("run", command, results["device"], environment, rows, results.get("run_dir"))


def from_lint(report: dict, command: str, environment: dict) -> dict:
    """An `attnprof.lint/1` report: the target as one variant with its counts and findings (no times)."""
    row = variant_row({"name": report["target"], "status": "ok", "per_forward": report.get("per_forward"),
                       "findings": report.get("findings")}, "target")
    device = {"type": report["device"]}
    if report["device"] == "cuda":
        device["name"] = environment.get("gpu")
    return _run("lint", command, device, environment, [row], None)


def from_verify(result: dict, command: str, environment: dict) -> dict:
    """A `patch --verify` result: the target before and after the patch as two variants, each with its
    counts per forward (from the profiles) and its device time and peak memory (measured outside them)."""
    spreads = result.get("latency_us", {}).get("spread") or [None, None]
    peaks = result.get("peak_memory_bytes") or [None, None]
    sides = zip(("before", "after"), ("a", "b"), spreads, peaks, strict=True)
    rows = [variant_row({"name": f"{result['target']} ({side})", "status": "ok", "device_us": spread,
                         "peak_memory_bytes": peak, "per_forward": result.get("diff", {}).get(key)}, "target")
            for side, key, spread, peak in sides]
    device = {"type": result["device"]}
    if result["device"] == "cuda":
        device["name"] = environment.get("gpu")
    return _run("patch", command, device, environment, rows, None)


def of_kind(kind: str, result: dict, command: str, environment: dict) -> dict:
    """The record of a `run`, `cp-run` (run --nproc), `sweep`, `lint` or `verify` result."""
    if kind == "sweep":
        return from_sweep(Path(result["sweep_dir"]), result["lines"], command, environment)
    build = {"run": from_run, "cp-run": from_cp_run, "lint": from_lint, "verify": from_verify}[kind]
    return build(result, command, environment)


def from_trace(analysis: dict, name: str, command: str, environment: dict) -> dict:
    """An `attnprof.analysis/1` dict of a trace the user's own training wrote (the profiler handler): one row
    named `name` with its counts and host time per step and its findings; the problem is "trace"."""
    per_step = analysis.get("per_forward") or {}
    row = variant_row({"name": name, "status": "ok", "per_forward": per_step, "findings": analysis.get("findings"),
                       "host_us": per_step.get("cpu_time_us")}, "trace")
    gpu = analysis.get("device")
    device = {"type": "cuda", "name": gpu.get("name")} if gpu else {"type": "cpu"}
    return _run("trace", command, device, environment, [row], str(Path(analysis["source"]).parent))


def variant_row(record: dict, problem: str) -> dict:
    """One variant's record of a run (or a sweep line named like one), as the history stores it."""
    per_forward = record.get("per_forward") or {}
    row = {"name": record["name"], "problem": problem, "status": record["status"], "reason": record.get("reason")}
    row |= {t: record.get(t) for t in TIMINGS}
    row |= {k: record.get(k) for k in SCALARS}
    row |= {c: per_forward.get(c) for c in COUNTS}
    row["findings"] = [f["id"] for f in record.get("findings") or []]
    return row


def _run(kind: str, command: str, device: dict, environment: dict, rows: list[dict], run_dir: str | None) -> dict:
    return {"time": now(), "command": command, "kind": kind, "device": device,
            "device_kind": device_kind(device, environment), "problem": run_problem([r["problem"] for r in rows]),
            "environment": environment, "run_dir": run_dir, "variants": rows}
