"""What a Dask cluster adds to the ranks' analysis, piece by piece, on a LocalCluster of worker processes
on 127.0.0.1 (one thread each, OPENBLAS_NUM_THREADS=1):

- a task: N trivial tasks (a dict of 3 KB back, as a rank's summary) submitted and gathered;
- a rank's CPU: one synthetic trace's summary (tests/synthetic_ranks.py, --steps profiler steps), its
  thread's CPU seconds in this process's main thread, in another thread, in a Dask worker's task thread;
- idle daemons: the CPU seconds the workers (and their nannies) spend in --idle seconds of doing nothing.

    OPENBLAS_NUM_THREADS=1 python benchmarks/engine/cluster_overheads.py --steps 300 --tasks 96 --idle 10
"""

from __future__ import annotations

import argparse
import os
import sys
import tempfile
import threading
import time
from pathlib import Path

import psutil

ROOT = Path(__file__).resolve().parents[2]
sys.path.insert(0, str(ROOT / "tests"))
from synthetic_ranks import write_ranks  # noqa: E402


def summary_cpu(path: str) -> float:
    """CPU seconds of this thread for one rank's summary (after one run to warm imports and caches)."""
    from attnprof.pipeline.ranks import summary_job

    summary_job((path, None, None))
    start = time.thread_time()
    summary_job((path, None, None))
    return time.thread_time() - start


def in_thread(path: str) -> float:
    out: list[float] = []
    worker = threading.Thread(target=lambda: out.append(summary_cpu(path)))
    worker.start()
    worker.join()
    return out[0]


def trivial(x: int) -> dict:
    return {"x": x, "text": "a" * 3000}


def daemons_cpu() -> float:
    """CPU seconds so far of the cluster's worker processes and their nannies."""
    me = psutil.Process()
    return sum(t.user + t.system for p in me.children(recursive=True) for t in [p.cpu_times()])


def main() -> None:
    p = argparse.ArgumentParser()
    p.add_argument("--steps", type=int, default=300)
    p.add_argument("--tasks", type=int, default=96)
    p.add_argument("--idle", type=float, default=10.0)
    p.add_argument("--repeat", type=int, default=3)
    args = p.parse_args()
    from distributed import Client, LocalCluster, as_completed

    with tempfile.TemporaryDirectory() as tmp:
        trace = str(write_ranks(Path(tmp), 1, steps=args.steps)[0])
        print(f"one synthetic rank of {args.steps} steps; load {os.getloadavg()[0]:.2f}")
        for _ in range(args.repeat):
            print(f"rank CPU: main thread {summary_cpu(trace):.3f} s, another thread {in_thread(trace):.3f} s")
        with LocalCluster(n_workers=2, threads_per_worker=1, processes=True, host="127.0.0.1",
                          dashboard_address=None) as cluster, Client(cluster) as client:
            for _ in range(args.repeat):
                cpu = client.submit(summary_cpu, trace, pure=False).result()
                print(f"rank CPU: Dask worker's task thread {cpu:.3f} s")
            for _ in range(args.repeat):
                start = time.perf_counter()
                futures = client.map(trivial, range(args.tasks), pure=False)
                for _ in as_completed(futures):
                    pass
                wall = time.perf_counter() - start
                print(f"{args.tasks} trivial tasks: {wall:.3f} s wall, {1000 * wall / args.tasks:.1f} ms a task "
                      f"(load {os.getloadavg()[0]:.2f})")
            before = daemons_cpu()
            time.sleep(args.idle)
            print(f"idle workers and nannies: {daemons_cpu() - before:.3f} CPU-s in {args.idle:.0f} s")


if __name__ == "__main__":
    main()
