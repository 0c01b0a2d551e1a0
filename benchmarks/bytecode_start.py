"""What compiling attnprof from source adds to a run: `attnprof analyze --json TRACE` in a fresh process,
alternately with attnprof's bytecode written (as a user's install has it) and with none (an editable install
under PYTHONDONTWRITEBYTECODE=1, as this project's development VMs and CI run). CPU seconds, user + system.

    python benchmarks/bytecode_start.py rank8.json --pairs 7
"""

from __future__ import annotations

import argparse
import compileall
import os
import shutil
import statistics
import subprocess
import sys
from pathlib import Path

from as_installed import attnprof_package  # beside this file


def cpu_of(command: list[str]) -> float:
    proc = subprocess.Popen(command, stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL)
    _, status, usage = os.wait4(proc.pid, 0)
    if os.waitstatus_to_exitcode(status) != 0:
        raise SystemExit(f"{' '.join(command)} failed")
    return usage.ru_utime + usage.ru_stime


def main() -> None:
    p = argparse.ArgumentParser()
    p.add_argument("trace", type=Path)
    p.add_argument("--pairs", type=int, default=7)
    args = p.parse_args()
    package = attnprof_package()
    command = [sys.executable, "-m", "attnprof", "analyze", "--json", str(args.trace)]
    compiled, source = [], []
    for _ in range(args.pairs):
        compileall.compile_dir(str(package), quiet=2)
        compiled.append(cpu_of(command))
        for cache in list(package.rglob("__pycache__")):
            shutil.rmtree(cache)
        source.append(cpu_of(command))
    compileall.compile_dir(str(package), quiet=2)  # left as an installed package has it
    for label, runs in (("with bytecode", compiled), ("from source", source)):
        print(f"{label:<14} CPU {min(runs):.3f}-{max(runs):.3f} s (median {statistics.median(runs):.3f}), "
              f"{args.pairs} runs, load {os.getloadavg()[0]:.2f}")


if __name__ == "__main__":
    main()
