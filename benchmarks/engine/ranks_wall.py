"""Issue 23's bar "8 rank traces analysed in at most 1.5x one rank's wall time", as a user meets it:
`attnprof analyze --json FOLDER` on a folder of one trace and on a folder of N copies of it (links named
rank0.json ...), run one after the other (alternating, so both see the same load), each a fresh interpreter.

Prints one line per pair (wall and CPU of each, the load average before it, the pair's ratio), then the
ranges and the median ratio. CPU is user + system of the command and its workers: it says how much work
was done whatever the other jobs on the machine took.

    python benchmarks/engine/big_trace.py --make rank8.json --mb 8     # an 8 MB training-step trace
    python benchmarks/engine/ranks_wall.py rank8.json --ranks 8 --pairs 7
"""

from __future__ import annotations

import argparse
import os
import statistics
import subprocess
import sys
import tempfile
import time
from pathlib import Path

from as_installed import compile_attnprof  # beside this file


def timed(folder: str) -> tuple[float, float]:
    """Wall and CPU seconds of one `attnprof analyze --json FOLDER` (its output thrown away)."""
    command = [sys.executable, "-m", "attnprof", "analyze", "--json", folder]
    t0 = time.perf_counter()
    proc = subprocess.Popen(command, stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL)
    _, status, usage = os.wait4(proc.pid, 0)
    wall = time.perf_counter() - t0
    if os.waitstatus_to_exitcode(status) != 0:
        raise SystemExit(f"{' '.join(command)} failed")
    return wall, usage.ru_utime + usage.ru_stime


def spread(values: list[float]) -> str:
    return f"{min(values):.3f}-{max(values):.3f} (median {statistics.median(values):.3f})"


def folder_of(trace: Path, ranks: int, where: Path) -> str:
    """A folder of `ranks` links to `trace`, as a job's ranks would leave their traces."""
    folder = where / f"ranks{ranks}"
    folder.mkdir()
    for r in range(ranks):
        (folder / f"rank{r}{''.join(trace.suffixes)}").symlink_to(trace.resolve())
    return str(folder)


def main() -> None:
    p = argparse.ArgumentParser()
    p.add_argument("trace", type=Path, help="one rank's trace")
    p.add_argument("--ranks", type=int, default=8)
    p.add_argument("--pairs", type=int, default=5)
    args = p.parse_args()
    print(compile_attnprof())
    one, many, ratios = [], [], []
    with tempfile.TemporaryDirectory() as tmp:
        folders = folder_of(args.trace, 1, Path(tmp)), folder_of(args.trace, args.ranks, Path(tmp))
        for _ in range(args.pairs):
            load = os.getloadavg()[0]
            a, b = map(timed, folders)
            one.append(a)
            many.append(b)
            ratios.append(b[0] / a[0])
            print(f"load {load:.2f}: one {a[0]:.3f} s wall {a[1]:.3f} s CPU, {args.ranks} ranks {b[0]:.3f} s wall "
                  f"{b[1]:.3f} s CPU, ratio {ratios[-1]:.2f}", flush=True)
    print(f"one rank:  wall {spread([w for w, _ in one])} s, CPU {spread([c for _, c in one])} s")
    print(f"{args.ranks} ranks:   wall {spread([w for w, _ in many])} s, CPU {spread([c for _, c in many])} s")
    print(f"ratio:     {spread(ratios)}; of the fastest runs {min(w for w, _ in many) / min(w for w, _ in one):.2f}")


if __name__ == "__main__":
    main()
