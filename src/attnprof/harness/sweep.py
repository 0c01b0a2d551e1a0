"""attnprof sweep: run the variants over a grid of problems, one point at a time.

Each point is one runner.run (measure, rate against the ceilings, profile only with
`profile=True`), so a variant that runs out of memory or is unsupported at a point is recorded
and the sweep goes on; a point that fails as a whole (its inputs do not fit) is recorded for every
variant. After each point its lines are appended to results.jsonl, one per (point, variant), so
an interrupted sweep keeps every finished point and `resume` runs only the rest. A point that
could not be written (a full disk, a folder gone: an OSError) is no result: the sweep stops there
and `resume` runs it again. SIGTERM stops a sweep as Ctrl-C does, its point's process with it.

Profiling leaves host overhead raised for the rest of the process (measured on an H200: 32 -> 53
µs per unpinned SDPA call), which would bias every later point's timings; so with profiling on,
each point runs in a fresh process, which imports the attnprof that runs the sweep: the current
folder is dropped from its path (`python -m` or `-c` would put it first, and an `attnprof/` there
would run instead).
"""

from __future__ import annotations

import signal
import subprocess
import sys
import threading
from collections.abc import Iterator
from contextlib import contextmanager
from dataclasses import replace
from pathlib import Path

from attnprof import variants as registry
from attnprof.contracts import (
    MEASURED,
    RESULTS,
    SWEEP_LINES,
    SWEEP_SPEC,
    SweepLine,
    SweepResult,
    SweepSpec,
    load_spec,
    read_json,
    read_lines,
)
from attnprof.files import append_jsonl, new_run_dir, write_json_atomic
from attnprof.harness.child import die_with_parent, python_running
from attnprof.harness.failures import classify
from attnprof.harness.runner import Listener, RunConfig, device_info, run
from attnprof.problem import Problem

UNWRITTEN = 75  # a point's process could not write its results (EX_TEMPFAIL): stop, do not record


def new_sweep(spec: SweepSpec, out: Path) -> Path:
    """Check the whole grid and the variants, then create the sweep folder with its sweep.json."""
    spec.points()
    for name in spec.options.variants:
        registry.get(name)
    sweep_dir = new_run_dir(out, "sweep")
    meta = SweepResult(spec=spec.as_dict(), device=device_info(spec.options.device)).to_payload()
    write_json_atomic(sweep_dir / SWEEP_SPEC, meta)
    (sweep_dir / SWEEP_LINES).touch()
    return sweep_dir


def run_sweep(spec: SweepSpec, sweep_dir: Path, listener: Listener | None = None) -> list[dict]:
    """Run every point that results.jsonl does not hold complete; returns all the sweep's lines."""
    notify = listener or (lambda event, record: None)
    path = Path(sweep_dir) / SWEEP_LINES
    have = {(line["key"], line["variant"]) for line in read_lines(path, repair=True)}
    names = [registry.label(n, spec.options.compile) for n in spec.options.variants]  # as the runner names them
    todo = [p for p in spec.points() if any((p.tag, n) not in have for n in names)]
    notify("sweep", {"path": str(sweep_dir), "total": len(spec.points()), "todo": len(todo), "variants": len(names)})
    with _terminate_as_interrupt():
        for problem in todo:
            notify("point", {"key": problem.tag, **problem.as_dict()})
            for line in _run_point(problem, spec, Path(sweep_dir), notify):
                append_jsonl(path, line)
            notify("point_done", {"key": problem.tag})
    return read_lines(path)


@contextmanager
def _terminate_as_interrupt() -> Iterator[None]:
    """SIGTERM raises KeyboardInterrupt meanwhile, so it stops the sweep as Ctrl-C does: _in_fresh_process
    kills the point's process on the way out instead of leaving it to run on beside a later resume."""
    if threading.current_thread() is not threading.main_thread():
        yield
        return

    def stop(signum, frame) -> None:
        raise KeyboardInterrupt("terminated")

    previous = signal.signal(signal.SIGTERM, stop)
    try:
        yield
    finally:
        signal.signal(signal.SIGTERM, previous)


def _run_config(problem: Problem, spec: SweepSpec, sweep_dir: Path) -> RunConfig:
    options = replace(spec.options, out=str(sweep_dir / "points"))
    return RunConfig(problem=problem, variants=options.variants, device=options.device, options=options,
                     profile=options.profile)


def _run_point(problem: Problem, spec: SweepSpec, sweep_dir: Path, notify: Listener) -> list[dict]:
    config = _run_config(problem, spec, sweep_dir)
    try:
        results, run_dir = _in_fresh_process(problem, sweep_dir) if spec.options.profile else run(config, notify)
    except OSError:
        raise  # its results could not be written: not a finished point; the sweep stops, resume retries it
    except Exception as e:  # noqa: BLE001 - the point failed as a whole; the sweep goes on
        failed = classify(e, [])
        return [_line(problem, {"name": registry.label(n, spec.options.compile), **failed}, None, sweep_dir)
                for n in spec.options.variants]
    finally:
        _release(spec.options.device)
    return [_line(problem, record, run_dir, sweep_dir) for record in results["variants"]]


def _in_fresh_process(problem: Problem, sweep_dir: Path) -> tuple[dict, Path]:
    command = [*python_running("attnprof.harness.sweep", "point_main"), str(sweep_dir), problem.tag]
    with subprocess.Popen(command, stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True) as child:
        try:
            out, err = child.communicate()
        except BaseException:  # Ctrl-C, SIGTERM (see _terminate_as_interrupt): the point dies with the sweep
            child.kill()
            child.wait()
            raise
    proc = subprocess.CompletedProcess(child.args, child.returncode, out, err)
    if proc.returncode != 0:
        last = (proc.stderr.strip().splitlines() or [f"exit status {proc.returncode}"])[-1]
        if proc.returncode == UNWRITTEN:
            raise OSError(f"the point {problem.tag} could not be written ({last}); resume runs it again")
        raise RuntimeError(f"the point's process failed: {last}")
    run_dir = Path(proc.stdout.strip().splitlines()[-1])
    return read_json(run_dir / RESULTS), run_dir


def _line(problem: Problem, record: dict, run_dir: Path | None, sweep_dir: Path) -> dict:
    trace = run_dir / record["trace"] if run_dir and record.get("trace") else None
    return SweepLine(key=problem.tag, point=problem.as_dict(), variant=record["name"],
                     **{f: record.get(f) for f in MEASURED},
                     run_dir=str(run_dir.relative_to(sweep_dir)) if run_dir else None,
                     trace=str(trace.relative_to(sweep_dir)) if trace else None).to_payload()


def _release(device: str) -> None:
    """Hand cached blocks back between points, so one point's sizes do not fragment the next's."""
    if device == "cuda":
        import torch

        torch.cuda.empty_cache()


def point_main(argv: list[str]) -> int:
    """The point process (args DIR KEY; see `_in_fresh_process`): run one point of a sweep, print its run folder."""
    die_with_parent()  # a SIGKILLed sweep leaves no point running beside its resume
    sweep_dir, key = Path(argv[0]), argv[1]
    spec = load_spec(sweep_dir)
    problem = next(p for p in spec.points() if p.tag == key)
    try:
        _, run_dir = run(_run_config(problem, spec, sweep_dir))
    except OSError as e:
        print(f"{e.filename or sweep_dir}: {e.strerror or e}", file=sys.stderr)
        return UNWRITTEN
    print(run_dir)
    return 0
