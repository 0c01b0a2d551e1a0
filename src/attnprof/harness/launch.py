"""Starting ranks with torch's own launcher, and knowing when this process is one of them.

`attnprof run --nproc N` starts `python -m torch.distributed.run --standalone --nproc_per_node N -m attnprof
run ...` (the same command line without `--nproc`) and waits for it; each rank it starts sees torchrun's
variables and runs harness.distributed. Several nodes: `torchrun --nnodes ... -m attnprof run ...` directly.
"""

from __future__ import annotations

import os
import subprocess
import sys

from attnprof.harness.child import python_running

_WORKER_ENV = ("RANK", "WORLD_SIZE", "LOCAL_RANK", "MASTER_ADDR")


def is_worker() -> bool:
    """Whether this process is a rank started by torchrun (or any launcher that sets its variables)."""
    return "TORCHELASTIC_RUN_ID" in os.environ or all(k in os.environ for k in _WORKER_ENV)


def launch(argv: list[str], nproc: int) -> int:
    """Run `attnprof <argv>` as `nproc` local ranks under torch.distributed.run; its exit code."""
    # --no-python: each rank runs our command line, which imports the attnprof running this one
    cmd = [sys.executable, "-m", "torch.distributed.run", "--standalone", f"--nproc_per_node={nproc}",
           "--no-python", *python_running("attnprof.cli", "run_and_finish"), *argv]
    # torchrun sets OMP_NUM_THREADS=1 itself where it is unset, and prints a banner saying so: set it first
    env = {"OMP_NUM_THREADS": "1", **os.environ}
    return subprocess.call(cmd, env=env)


def without_nproc(argv: list[str]) -> list[str]:
    """The command line minus `--nproc N` (the ranks must not launch again)."""
    out, skip = [], False
    for a in argv:
        if skip:
            skip = False
        elif a == "--nproc":
            skip = True
        elif not a.startswith("--nproc="):
            out.append(a)
    return out
