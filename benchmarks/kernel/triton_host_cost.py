"""Host time per call of attention() against SDPA's cuDNN and flash backends in one process, and the
latency per call at the article's problem (B8 H16 S1024 D64 causal), alternating rounds. On the GPU
machine, from the repository root:

    PYTHONPATH=src python3 benchmarks/kernel/triton_host_cost.py

Host time: the wall time of CALLS back-to-back calls at a tiny shape (B1 H2 S128 D64 bf16, so the GPU
always waits for the host), per call, median of ROUNDS rounds; for a forward and for a training step
(forward + backward). Latency at the article's problem: the wall time of CALLS calls with one
synchronisation at the end, per call (what a loop of such calls costs: the larger of host and device).
"""

from __future__ import annotations

import statistics
import sys
import time
from pathlib import Path

import torch
from torch.nn.attention import SDPBackend, sdpa_kernel

sys.path.insert(0, str(Path(__file__).resolve().parent))
from triton_kernel_path import load_flash_attn_triton  # noqa: E402

CALLS, ROUNDS = 500, 5
BACKENDS = {"sdpa-cudnn": SDPBackend.CUDNN_ATTENTION, "sdpa-flash": SDPBackend.FLASH_ATTENTION}


def callers(module, shape, train: bool) -> dict:
    q, k, v, dout = (torch.randn(*shape, device="cuda", dtype=torch.bfloat16, requires_grad=train)
                     for _ in range(4))

    def sdpa(backend):
        def call():
            with sdpa_kernel([backend]):
                return torch.nn.functional.scaled_dot_product_attention(q, k, v, is_causal=True)
        return call

    forwards = {name: sdpa(b) for name, b in BACKENDS.items()}
    forwards["triton"] = lambda: module.attention(q, k, v, causal=True)
    if not train:
        return forwards
    return {name: (lambda f=f: torch.autograd.grad(f(), (q, k, v), dout.detach())) for name, f in forwards.items()}


def per_call_us(fn, sync_each_round: bool = True) -> float:
    for _ in range(20):
        fn()
    torch.cuda.synchronize()
    start = time.perf_counter()
    for _ in range(CALLS):
        fn()
    if sync_each_round:
        torch.cuda.synchronize()
    return (time.perf_counter() - start) / CALLS * 1e6


def rounds(fns: dict, measure) -> dict:
    times = {name: [] for name in fns}
    for _ in range(ROUNDS):
        for name, fn in fns.items():
            times[name].append(measure(fn))
    return {name: statistics.median(t) for name, t in times.items()}


def main() -> None:
    module, how = load_flash_attn_triton()
    print(f"{torch.cuda.get_device_name()}, torch {torch.__version__}, kernel {how}")
    tiny = (1, 2, 128, 64)
    for train in (False, True):
        host = rounds(callers(module, tiny, train), lambda fn: per_call_us(fn, sync_each_round=False))
        print(f"host us per {'step' if train else 'forward'} at B1 H2 S128 D64: "
              + ", ".join(f"{n} {t:.1f}" for n, t in host.items()))
    for train in (False, True):
        latency = rounds(callers(module, (8, 16, 1024, 64), train), per_call_us)
        print(f"latency us per {'step' if train else 'forward'} at B8 H16 S1024 D64 causal: "
              + ", ".join(f"{n} {t:.1f}" for n, t in latency.items())
              + f"; cuDNN/triton {latency['sdpa-cudnn'] / latency['triton']:.3f}")


if __name__ == "__main__":
    main()
