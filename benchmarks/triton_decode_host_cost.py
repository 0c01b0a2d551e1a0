"""Host time of the split-KV decode's Python, its two kernel launches replaced by no-ops: what the wrapper
itself costs per call (checks, sizes, allocations), on any machine, no GPU needed.

    PYTHONPATH=src python3 benchmarks/triton_decode_host_cost.py

B=8, 32 query heads, 8 KV heads, cache 8192, D=128, q-len 1 (CPU tensors); best of 7 rounds of 500 calls.
"""

from __future__ import annotations

import time

import torch

from attnprof.kernels import import_from_folder


class NoLaunch:
    def __getitem__(self, grid):
        return lambda *args, **kwargs: None


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


def main() -> None:
    kernel = import_from_folder()
    decode = kernel.decode
    decode.flash_attn_triton_decode_split = decode.flash_attn_triton_decode_combine = NoLaunch()
    decode.sm_count = lambda device: 132  # an H200's, so that the split count is the GPU's
    q = torch.randn(8, 1, 32, 128).half()
    cache = torch.randn(8, 8192, 8, 128).half()
    lengths = torch.full((8,), 8192, dtype=torch.int32)
    calls = {"flash_attn_with_kvcache": lambda: kernel.flash_attn_with_kvcache(q, cache, cache, cache_seqlens=lengths,
                                                                                causal=True),
             "decode()": lambda: decode.decode(q, cache, cache, lengths, 0.1, (1 << 30, 0))}
    for name, call in calls.items():
        print(f"{name:<24} {best_us(call):.1f} us per call")


if __name__ == "__main__":
    main()
