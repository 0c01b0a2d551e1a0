"""What compiling attnprof from source adds to a run: `attnprof analyze --json TRACE` in a fresh process,
alternately with attnprof's bytecode written (as a user's install has it) and with none (an editable install
under PYTHONDONTWRITEBYTECODE=1, as this project's development VMs and CI run). CPU seconds, user + system.

    python benchmarks/engine/bytecode_start.py rank8.json --pairs 7
"""

from __future__ import annotations

import argparse
import os
import shutil
import statistics
from pathlib import Path

from as_installed import attnprof_package, compile_attnprof  # beside this file
from ranks_wall import timed  # beside this file


def main() -> None:
    p = argparse.ArgumentParser()
    p.add_argument("trace", type=Path)
    p.add_argument("--pairs", type=int, default=7)
    args = p.parse_args()
    package = attnprof_package()
    compiled, source = [], []
    for _ in range(args.pairs):
        compile_attnprof()
        compiled.append(timed(str(args.trace))[1])
        for cache in list(package.rglob("__pycache__")):
            shutil.rmtree(cache)
        source.append(timed(str(args.trace))[1])
    print(compile_attnprof())  # left as an installed package has it
    for label, runs in (("with bytecode", compiled), ("from source", source)):
        print(f"{label:<14} CPU {min(runs):.3f}-{max(runs):.3f} s (median {statistics.median(runs):.3f}), "
              f"{args.pairs} runs, load {os.getloadavg()[0]:.2f}")


if __name__ == "__main__":
    main()
