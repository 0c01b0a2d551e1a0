"""Issue 46's bar: N synthetic rank traces analysed through a real `dask scheduler` and `dask worker`
processes on loopback give the same per-rank results as the local pool, in at most 1.5x its wall time, the
driver under 400 MiB, the terminal summary under 80 lines.

Starts `dask scheduler --host 127.0.0.1 --port 0 --scheduler-file F` and `--workers` single-threaded
`dask worker` processes (OPENBLAS_NUM_THREADS=1, attnprof's bytecode written first, as the local path runs),
then runs `attnprof analyze DIR --json` (the local pool) and `attnprof analyze DIR --json --cluster F` one
after the other, `--pairs` times, each a fresh interpreter; checks that both give the same result (but the
cluster's own record); prints the wall time and the driver's peak RSS (its own, not its workers') of each
and the ratio; counts the lines of the terminal summary; stops every process it started (bounded waits).

    python benchmarks/engine/ranks_cluster.py --ranks 96 --pairs 5            # the bar, synthetic 3-step traces
    python benchmarks/engine/ranks_cluster.py --ranks 96 --steps 300 --preload  # bigger traces, preloaded workers
    python benchmarks/engine/ranks_cluster.py --ranks 32 --steps 2000 --pairs 1 --kill-worker 1.0  # a lost worker
"""

from __future__ import annotations

import argparse
import contextlib
import json
import os
import signal
import statistics
import subprocess
import sys
import tempfile
import time
from pathlib import Path

from as_installed import compile_attnprof  # beside this file

ROOT = Path(__file__).resolve().parents[2]
sys.path.insert(0, str(ROOT / "tests"))
from synthetic_ranks import write_ranks  # noqa: E402

# the driver: attnprof's CLI in this interpreter, then its own peak RSS (ru_maxrss of the process alone) and
# the CPU seconds of it and of the children it waited for (the local pool's workers); it ends as the command does
DRIVER = ("import resource, sys\nfrom attnprof.cli import finish, main\nrc = main(sys.argv[1:])\n"
          "me, kids = resource.getrusage(resource.RUSAGE_SELF), resource.getrusage(resource.RUSAGE_CHILDREN)\n"
          "cpu = me.ru_utime + me.ru_stime + kids.ru_utime + kids.ru_stime\n"
          "print(f'driver-maxrss-kib {me.ru_maxrss} cpu-s {cpu:.3f}', file=sys.stderr)\n"
          "finish(rc)\n")  # as the `attnprof` command ends
ENV = {**os.environ, "OPENBLAS_NUM_THREADS": "1", "PYTHONPATH": str(ROOT / "src")}
DASK = str(Path(sys.executable).parent / "dask")  # the `dask` command of this interpreter's environment


def start_cluster(where: Path, workers: int, preload: bool) -> tuple[list[subprocess.Popen], Path]:
    """A scheduler and `workers` workers on 127.0.0.1; returns them (scheduler first) and the scheduler file."""
    file = where / "scheduler.json"
    log = open(where / "dask.log", "ab")  # noqa: SIM115 (kept open for the processes' lifetime)
    procs = [subprocess.Popen([DASK, "scheduler", "--host", "127.0.0.1", "--port", "0",
                               "--scheduler-file", str(file), "--no-dashboard"], env=ENV, stdout=log, stderr=log)]
    worker = [DASK, "worker", "--scheduler-file", str(file), "--nworkers", "1",
              "--nthreads", "1", "--host", "127.0.0.1", "--no-dashboard",
              *(["--preload", "attnprof.pipeline.cluster"] if preload else [])]
    try:  # whatever happens while they start, none is left running
        _wait_for(lambda: file.exists() and file.stat().st_size > 0, "the scheduler file")
        procs += [subprocess.Popen(worker, env=ENV, stdout=log, stderr=log) for _ in range(workers)]
        from distributed import Client

        with Client(scheduler_file=str(file), timeout=60) as client:
            client.wait_for_workers(workers, timeout=120)
    except BaseException:
        stop(procs)
        raise
    return procs, file


def _wait_for(ready, what: str, timeout: float = 60.0) -> None:
    end = time.monotonic() + timeout
    while not ready():
        if time.monotonic() > end:
            raise SystemExit(f"{what} did not appear in {timeout:.0f} s")
        time.sleep(0.1)


def stop(procs: list[subprocess.Popen]) -> None:
    """Workers first, then the scheduler: SIGTERM, 15 s each, then SIGKILL."""
    for p in reversed(procs):
        if p.poll() is None:
            p.send_signal(signal.SIGTERM)
    for p in reversed(procs):
        try:
            p.wait(timeout=15)
        except subprocess.TimeoutExpired:
            p.kill()
            p.wait(timeout=15)


def cluster_cpu(procs: list[subprocess.Popen]) -> float:
    """CPU seconds so far of the scheduler and the workers (each `dask worker` is a nanny and its worker)."""
    import psutil

    total = 0.0
    for p in procs:
        if p.poll() is None:
            top = psutil.Process(p.pid)
            for q in [top, *top.children(recursive=True)]:
                with contextlib.suppress(psutil.NoSuchProcess):
                    t = q.cpu_times()
                    total += t.user + t.system
    return total


def driver(args: list[str], kill: subprocess.Popen | None = None, after: float = 0.0) -> tuple:
    """Wall seconds, the driver's peak RSS in KiB, stdout, stderr and CPU seconds (the driver's and its
    waited children's) of one `attnprof <args>` (killing `kill` `after` seconds in, a lost worker)."""
    t0 = time.perf_counter()
    proc = subprocess.Popen([sys.executable, "-c", DRIVER, *args], env=ENV, stdout=subprocess.PIPE,
                            stderr=subprocess.PIPE, text=True)
    if kill is not None:  # the worker process itself (`dask worker` is its nanny, which starts a new one)
        import psutil

        time.sleep(after)
        psutil.Process(kill.pid).children(recursive=True)[-1].kill()
    out, err = proc.communicate(timeout=600)
    wall = time.perf_counter() - t0
    if proc.returncode != 0:
        raise SystemExit(f"attnprof {' '.join(args)} failed ({proc.returncode}): {err[-2000:]}")
    said = next(line.split() for line in err.splitlines() if line.startswith("driver-maxrss-kib"))
    return wall, int(said[1]), out, err, float(said[3])


def same(local: str, cluster: str) -> bool:
    """The two results equal, but the cluster's own record (scheduler, workers, re-runs)."""
    a, b = json.loads(local), json.loads(cluster)
    b.pop("cluster", None)
    return a == b


def spread(values: list[float], unit: str = "s", digits: int = 3) -> str:
    return (f"{min(values):.{digits}f}-{max(values):.{digits}f} {unit} "
            f"(median {statistics.median(values):.{digits}f}, n={len(values)})")


def main() -> None:
    p = argparse.ArgumentParser()
    p.add_argument("--ranks", type=int, default=96)
    p.add_argument("--steps", type=int, default=3, help="profiler steps per synthetic trace (3: ~4 KB gzip)")
    p.add_argument("--workers", type=int, default=2)
    p.add_argument("--pairs", type=int, default=3)
    p.add_argument("--preload", action="store_true", help="workers import attnprof as they start")
    p.add_argument("--kill-worker", type=float, default=None, metavar="S",
                   help="instead: one cluster run with a worker killed S seconds in; prints what was re-run")
    args = p.parse_args()
    print(compile_attnprof())
    with tempfile.TemporaryDirectory() as tmp:
        traces = Path(tmp) / "ranks"
        write_ranks(traces, args.ranks, extra_us=tuple(10.0 * (r % 7) for r in range(args.ranks)), steps=args.steps)
        mb = sum(f.stat().st_size for f in traces.iterdir()) / 1e6
        print(f"{args.ranks} synthetic traces of {args.steps} steps, {mb:.2f} MB gzip; {args.workers} workers"
              f"{' (preloaded)' if args.preload else ''}; load {os.getloadavg()[0]:.2f}", flush=True)
        procs, file = start_cluster(Path(tmp), args.workers, args.preload)
        try:
            if args.kill_worker is not None:
                _, _, out, _, _ = driver(["analyze", str(traces), "--json", "--cluster", str(file)], procs[1],
                                      args.kill_worker)
                result = json.loads(out)
                print(f"a worker process killed {args.kill_worker} s in: {len(result['ranks'])} ranks analysed, "
                      f"{len(result['unread'])} unread, re-run: {len(result['cluster']['rerun'])} "
                      f"({', '.join(Path(s).name for s in result['cluster']['rerun'][:8])} ...)")
                return
            measure(traces, file, args.pairs, procs)
        finally:
            stop(procs)


def measure(traces: Path, file: Path, pairs: int, procs: list[subprocess.Popen]) -> None:
    local, cluster, ratios, rss, cpu = [], [], [], [], []
    for _ in range(pairs):
        load = os.getloadavg()[0]
        a = driver(["analyze", str(traces), "--json"])
        before = cluster_cpu(procs)
        b = driver(["analyze", str(traces), "--json", "--cluster", str(file)])
        cpu.append((a[4], b[4] + cluster_cpu(procs) - before))
        if not same(a[2], b[2]):
            raise SystemExit("the cluster's result differs from the local pool's")
        local.append(a[0])
        cluster.append(b[0])
        rss.append(b[1] / 1024)
        ratios.append(b[0] / a[0])
        print(f"load {load:.2f}: local {a[0]:.3f} s (driver {a[1] / 1024:.0f} MiB, CPU {cpu[-1][0]:.2f} s), cluster "
              f"{b[0]:.3f} s (driver {b[1] / 1024:.0f} MiB, CPU with scheduler and workers {cpu[-1][1]:.2f} s), "
              f"ratio {ratios[-1]:.2f}, results equal", flush=True)
    _, _, out, err, _ = driver(["analyze", str(traces), "--cluster", str(file)])
    print(f"local pool:  {spread(local)}\ncluster:     {spread(cluster)}\nratio:       {spread(ratios, 'x', 2)}\n"
          f"driver peak: {spread(rss, 'MiB', 0)}\nCPU local:   {spread([c for c, _ in cpu])}\n"
          f"CPU cluster: {spread([c for _, c in cpu])} (driver, scheduler, workers)\n"
          f"terminal summary: {len(out.splitlines())} lines on stdout, "
          f"{len(err.splitlines()) - 1} on stderr")


if __name__ == "__main__":
    main()
