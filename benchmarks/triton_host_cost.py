"""Host time per call of the two forward kernels at a small shape (B=4 H=16 S=1024 D=128 causal, bf16),
and where the Gluon launch spends it (cProfile). On the GPU machine, from the repository root:

    PYTHONPATH=src python3 benchmarks/triton_host_cost.py

Host time is the wall time of 200 back-to-back launches without synchronising, per call: what a caller's
thread pays, hidden behind the GPU only when each call's GPU work is longer.
"""

from __future__ import annotations

import cProfile
import pstats
import sys
import time
from pathlib import Path

import torch

sys.path.insert(0, str(Path(__file__).resolve().parent))
from triton_kernel_path import load_flash_attn_triton  # noqa: E402

CALLS = 200


def main() -> None:
    launch = load_flash_attn_triton()[0]._launch
    q, k, v = (torch.randn(4, 16, 1024, 128, device="cuda", dtype=torch.bfloat16) for _ in range(3))

    def gluon():
        args, meta = launch.launch_args(q, k, v, True, None)
        assert launch._hopper_launch.forward(args, meta, 8), "the Gluon forward did not compile"

    def plain():  # at this size attention() takes the plain kernel
        launch.forward(q, k, v, causal=True, sm_scale=None)

    for name, fn in (("gluon", gluon), ("plain", plain)):
        for _ in range(20):
            fn()
        torch.cuda.synchronize()
        start = time.perf_counter()
        for _ in range(CALLS):
            fn()
        host = (time.perf_counter() - start) / CALLS
        torch.cuda.synchronize()
        print(f"{name}: host {host * 1e6:.0f} us per call")
    profile = cProfile.Profile()
    profile.enable()
    for _ in range(CALLS):
        gluon()
    profile.disable()
    torch.cuda.synchronize()
    pstats.Stats(profile).sort_stats("tottime").print_stats(14)


if __name__ == "__main__":
    main()
