"""Host time of the split-KV decode's and the masked attention's Python with their launches replaced by no-ops:
what the wrappers themselves cost per call (checks, keys, allocations, autograd), on any machine, no GPU needed.

    PYTHONPATH=src python3 benchmarks/kernel/triton_decode_masks_host_cost.py [--gpu]

The plans' lookup stays (`_plans.run_planned` is replaced by a dict lookup); the compiled runners' own cost
(Triton's launcher, a few microseconds each on the H200) is left out. CPU tensors, best of 7 rounds of 500
calls. Decode: B=8, 32 query heads, 8 KV heads, cache 8192, D=128, q-len 1; masks: window 256 (causal),
B=1, 4 query heads, 1 KV head, S=256, D=64: the forward alone, and a training step (forward and backward).
With --gpu, on a GPU: the real calls, each one's host time split by function (cProfile), then the masked
step's host time with the Gluon backward (the default on an H200) and with the Triton passes, alternating.
"""

from __future__ import annotations

import cProfile
import os
import pstats
import statistics
import sys
import time

import torch

from attnprof.kernels import import_from_folder


def lookup_only(plans: dict, key, launches, tensors: dict) -> None:
    plans.get(key)


def best_us(fn, rounds: int = 7, calls: int = 500) -> float:
    for _ in range(100):
        fn()
    best = float("inf")
    for _ in range(rounds):
        start = time.perf_counter()
        for _ in range(calls):
            fn()
        best = min(best, (time.perf_counter() - start) / calls * 1e6)
    return best


def decode_calls(kernel) -> dict:
    kernel.decode.sm_count = lambda device: 132  # an H200's, so that the split count is the GPU's
    q = torch.randn(8, 1, 32, 128).half()
    cache = torch.randn(8, 8192, 8, 128).half()
    lengths = torch.full((8,), 8192, dtype=torch.int32)
    return {"flash_attn_with_kvcache": lambda: kernel.flash_attn_with_kvcache(q, cache, cache, cache_seqlens=lengths,
                                                                               causal=True),
            "decode()": lambda: kernel.decode.decode(q, cache, cache, lengths, 0.1, (1 << 30, 0))}


def masked_calls(kernel) -> dict:
    q, k, v = (torch.randn(1, h, 256, 64).half().requires_grad_() for h in (4, 1, 1))
    dout = torch.randn(1, 4, 256, 64).half()

    def forward():
        return kernel.masked_attention(q, k, v, causal=True, window_size=(255, 0))

    def step():
        for t in (q, k, v):
            t.grad = None
        forward().backward(dout)

    def no_grad_forward():
        with torch.no_grad():
            forward()

    return {"masked forward (no grad)": no_grad_forward, "masked training step": step}


def gpu_profiles(kernel) -> None:
    """--gpu: the real calls on the GPU (launches included) at the bar's shapes (decode B8 32/8 heads 8k; the
    masked step B2 32/8 heads S2048 window 256), each one's host functions by own time (cProfile, 300 calls)."""
    q = torch.randn(8, 1, 32, 128, device="cuda", dtype=torch.bfloat16)
    cache = torch.randn(8, 8192, 8, 128, device="cuda", dtype=torch.bfloat16)
    lengths = torch.full((8,), 8192, dtype=torch.int32, device="cuda")
    leaves = [torch.randn(2, h, 2048, 128, device="cuda", dtype=torch.bfloat16).requires_grad_() for h in (32, 8, 8)]
    dout = torch.randn_like(leaves[0])

    def step():
        out = kernel.masked_attention(*leaves, causal=True, window_size=(255, 0))
        torch.autograd.grad(out, leaves, dout)  # as attnprof's training step

    calls = {"flash_attn_with_kvcache": lambda: kernel.flash_attn_with_kvcache(q, cache, cache, cache_seqlens=lengths,
                                                                               causal=True),
             "masked training step": step}
    for name, call in calls.items():
        for _ in range(20):
            call()
        torch.cuda.synchronize()
        profile = cProfile.Profile()
        profile.enable()
        for _ in range(300):
            call()
        profile.disable()
        torch.cuda.synchronize()
        print(f"== {name}: {best_us(call, rounds=5, calls=200):.1f} us per call, back to back")
        pstats.Stats(profile).sort_stats("tottime").print_stats(14)
    backward_rounds(step)


def issue_us(fn, calls: int = 40) -> float:
    """Host time per call of `calls` calls issued back to back: too few launches to fill the GPU's queue, so
    the host never waits for the GPU, whose work finishes after the clock stops."""
    torch.cuda.synchronize()
    start = time.perf_counter()
    for _ in range(calls):
        fn()
    host = (time.perf_counter() - start) / calls * 1e6
    torch.cuda.synchronize()
    return host


def backward_rounds(step, rounds: int = 9) -> None:
    """The masked step's host time per call with each backward (FLASH_ATTN_TRITON_ATOMIC_DQ unset: the Gluon
    kernel where it applies; 0: the Triton passes), one issue_us each a round, in turn; median and range."""
    modes = {"default (Gluon on sm_90)": "", "Triton passes": "0"}  # "": as unset
    times = {mode: [] for mode in modes}
    for _ in range(rounds + 1):  # the first round warms both up and is not kept
        for mode, value in modes.items():
            os.environ["FLASH_ATTN_TRITON_ATOMIC_DQ"] = value
            times[mode].append(issue_us(step))
    os.environ.pop("FLASH_ATTN_TRITON_ATOMIC_DQ", None)
    for mode, values in times.items():
        kept = values[1:]
        print(f"== masked step, {mode}: host {statistics.median(kept):.1f} us per call ({min(kept):.1f}-"
              f"{max(kept):.1f}), {rounds} rounds of 40 calls issued back to back")


def main() -> None:
    kernel = import_from_folder()
    if sys.argv[1:] == ["--gpu"]:
        gpu_profiles(kernel)
        return
    for module in (kernel.decode, kernel.masks, kernel.backward.masked_backward):
        module.run_planned = lookup_only
    package = sys.modules[kernel.__name__]
    print(f"{package.__name__}: launches replaced by a plan lookup")
    for name, call in {**decode_calls(kernel), **masked_calls(kernel)}.items():
        print(f"{name:<26} {best_us(call):.1f} us per call")


if __name__ == "__main__":
    main()
