"""`attnprof.on_trace_ready(out_dir)`: a drop-in for `torch.profiler.tensorboard_trace_handler(out_dir)`.

Each trace is written by torch's own handler, so it lands where and as that one writes it
(`{worker_name}.{time_ns}.pt.trace.json[.gz]`; TensorBoard's profiler plugin and Perfetto open it). Then a
worker thread hands it to a separate Python process (`analyze_trace.py`, SCHED_IDLE), so the training thread
only pays for the write, as with torch's handler: the analysis never holds the training's GIL, though it shares
the machine (on two shared cores the steps beside it ran 2-3x slower; `defer` starts it at `wait()`), and
whatever happens to it (a corrupt trace, a full disk, a bug of ours) is one warning line in the log, after
which training goes on. Each rank analyses its own trace where it was written; only rank 0 records in the
history (history.recording_rank). One line per trace goes to the `attnprof` logger.
"""

from __future__ import annotations

import json
import logging
import os
import queue
import socket
import subprocess
import sys
import threading
from collections.abc import Callable
from pathlib import Path

STEP_REGION = "ProfilerStep#*"  # what prof.step() marks; analysis.attribution names it so too
ANALYSIS_TIMEOUT_S = 900  # a 64 MB trace takes a few seconds; a hung analysis must not outlive training by much
NICENESS = 10
LOGGER = "attnprof"


def logger() -> logging.Logger:
    """The `attnprof` logger; with nothing configured to show its INFO lines (no handler of its own and
    none on the root logger), it gets one to stderr, since a handler's line nobody sees is no line."""
    log = logging.getLogger(LOGGER)
    if not log.handlers and not logging.getLogger().handlers:
        handler = logging.StreamHandler(sys.stderr)
        handler.setFormatter(logging.Formatter("%(message)s"))
        log.addHandler(handler)
        log.setLevel(logging.INFO)
        log.propagate = False
    return log


class TraceHandler:
    """The `on_trace_ready` callable; `results` holds what each analysed trace gave, `wait()` waits for them."""

    def __init__(self, out_dir: str | Path, worker_name: str | None = None, use_gzip: bool = False,
                 region: str = STEP_REGION, name: str = "step", history: bool = True, db: str | Path | None = None,
                 attn_implementation: str | None = None, defer: bool = False, memory: str | None = None):
        self.out_dir = Path(out_dir)
        # torch's default, computed here so the new file is known by its name
        self.worker_name = worker_name or f"{socket.gethostname()}_{os.getpid()}"
        self.use_gzip, self.region, self.name, self.history, self.db = use_gzip, region, name, history, db
        self.attn_implementation = attn_implementation  # what transformers runs: the advice depends on it
        # analyse only from wait() on: the analysis competes with training for the machine (on two shared
        # cores the steps beside it ran ~2x slower), so a short run may rather have its lines at the end
        self.defer = defer
        self.memory = memory  # the device whose profile_memory events the traces hold: each line adds its peak
        self._environment: str | None = None  # the history's environment, collected here once (JSON)
        self.results: list[dict] = []  # per trace: the child's summary (line, model_step, top findings)
        self.failures: list[str] = []  # per trace that could not be written or analysed: the warning logged
        self._todo: queue.Queue[Path] = queue.Queue()
        self._worker: threading.Thread | None = None
        self._lock = threading.Lock()

    def __call__(self, prof) -> None:
        """Write the trace as torch's handler does, then queue its analysis; never raises."""
        try:
            path = self._write(prof)
        except Exception as e:  # noqa: BLE001 - a failed write (full disk, no permission) must not stop training
            self._fail(f"the trace could not be written in {self.out_dir} ({one_line(e)})")
            return
        self._todo.put(path)
        if not self.defer:
            self._start()

    def _start(self) -> None:
        with self._lock:
            if self._worker is None or not self._worker.is_alive():
                # not a daemon: a script that ends right after training still gets its lines
                self._worker = threading.Thread(target=self._drain, name="attnprof-analysis")
                self._worker.start()

    def _write(self, prof) -> Path:
        from torch.profiler import tensorboard_trace_handler

        pattern = f"{self.worker_name}.*.pt.trace.json" + (".gz" if self.use_gzip else "")
        before = set(self.out_dir.glob(pattern)) if self.out_dir.is_dir() else set()
        tensorboard_trace_handler(str(self.out_dir), self.worker_name, self.use_gzip)(prof)
        written = sorted(set(self.out_dir.glob(pattern)) - before, key=lambda p: p.stat().st_mtime_ns)
        if not written:
            raise OSError("torch's handler wrote no file")
        return written[-1]

    def wait(self, timeout: float | None = None) -> list[dict]:
        """Wait for the queued analyses (all, or until `timeout` seconds); the results so far. Starts them
        when deferred."""
        self._start()
        worker = self._worker
        if worker is not None:
            worker.join(timeout)
        return list(self.results)

    def _drain(self) -> None:
        while True:
            try:
                path = self._todo.get_nowait()
            except queue.Empty:
                return
            self._analyse(path)

    def _analyse(self, path: Path) -> None:
        try:
            done = subprocess.run(self._command(path), capture_output=True, text=True, timeout=ANALYSIS_TIMEOUT_S,
                                  env=_child_env(), stdin=subprocess.DEVNULL)
        except (OSError, subprocess.SubprocessError) as e:
            self._fail(f"the analysis of {path.name} did not run ({one_line(e)})")
            return
        if done.returncode != 0:
            said = [line for line in done.stderr.splitlines() if line.strip()]
            self._fail(f"the analysis of {path.name} failed ({said[-1] if said else f'exit {done.returncode}'})")
            return
        try:
            result = json.loads(done.stdout.strip().splitlines()[-1])
        except (IndexError, ValueError):
            self._fail(f"the analysis of {path.name} said nothing readable")
            return
        self.results.append(result)
        logger().info(rank_prefix() + result["line"])
        if result.get("history_error"):  # the analysis stands: say that only the history write failed
            logger().warning(f"{rank_prefix()}attnprof: {path.name} was analysed, but recording it in the history "
                             f"failed ({result['history_error']}); training goes on")

    def _command(self, path: Path) -> list[str]:
        command = [sys.executable, "-m", "attnprof.integrations.analyze_trace", str(path), "--region", self.region,
                   "--name", self.name, "--nice", str(NICENESS)]
        if not self.history:
            command.append("--no-history")
        if self.db is not None:
            command += ["--db", str(self.db)]
        if self.history:
            command += ["--environment", self._collected()]
        if self.attn_implementation:
            command += ["--attn-implementation", self.attn_implementation]
        if self.memory:
            command += ["--memory", self.memory]
        return command

    def _collected(self) -> str:
        """The environment, from this process (torch is loaded here already: the child would import it,
        the heaviest part of its work), once, on the worker thread."""
        if self._environment is None:
            from attnprof.api import run_environment

            self._environment = json.dumps(run_environment())
        return self._environment

    def _fail(self, what: str) -> None:
        line = f"{rank_prefix()}attnprof: {what}; training goes on"
        self.failures.append(line)
        logger().warning(line)


def on_trace_ready(out_dir: str | Path, worker_name: str | None = None, use_gzip: bool = False, *,
                   region: str = STEP_REGION, name: str = "step", history: bool = True,
                   db: str | Path | None = None, defer: bool = False) -> Callable:
    """torch.profiler's `on_trace_ready`: writes each trace as `tensorboard_trace_handler(out_dir, worker_name,
    use_gzip)` does, then analyses it in a separate process and logs one line: attention's share of the
    step (forward and backward), the backends that ran, the top finding with its cost. `region`: the
    annotation one analysed step is (default: each `prof.step()`); `name`: the history row's name; `history`
    and `db`: whether and where rank 0 records each trace. The returned handler's `wait()` waits for
    the analyses and returns their results; with `defer`, they start only then (none runs beside training)."""
    return TraceHandler(out_dir, worker_name, use_gzip, region, name, history, db, defer=defer)


def _child_env() -> dict[str, str]:
    """This process's environment, with the folder this attnprof is imported from first on the path (the
    child must import the same attnprof, installed or not), and one thread: the analysis is torch-free."""
    here = str(Path(__file__).resolve().parents[2])  # .../src for src/attnprof/integrations/profiler.py
    env = dict(os.environ)
    env["PYTHONPATH"] = os.pathsep.join([here, *filter(None, [env.get("PYTHONPATH")])])
    env["OMP_NUM_THREADS"] = "1"
    return env


def rank_prefix() -> str:
    world = os.environ.get("WORLD_SIZE", "1").strip()
    return f"rank {os.environ.get('RANK', '?')}: " if world not in ("", "0", "1") else ""


def one_line(e: BaseException) -> str:
    """An error as one short line for the training's log (the handler's warnings, the child's stderr)."""
    return f"{type(e).__name__}: {' '.join(str(e).split())[:300]}"
