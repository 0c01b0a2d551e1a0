"""What a [B, S, H, D] call costs beside a [B, H, S, D] one, through the hub loader and through the source.

    PYTHONPATH=src:/tmp/site python3 benchmarks/kernel/triton_layouts.py      # on the H200, `kernels` importable

`kernels benchmark` timed `flash_attn_func` at 0.68x SDPA-cuDNN at B4 S4096 H16 D128 causal where
`attention()` runs at cuDNN's speed; this separates the layout from the loader: each call's device time
(`triton.testing.do_bench`, CUDA events after warm-up) and its latency per call (30 calls, each
synchronised, the median), for flash_attn_func on [B, S, H, D] and attention() on contiguous
[B, H, S, D], loaded by `kernels.get_local_kernel` and imported from the source folder, beside SDPA's
cuDNN backend, at the long shape and the article's problem in fp16 and bf16.
"""

from __future__ import annotations

import sys
import time
from pathlib import Path

import torch
import triton

FOLDER = Path(__file__).resolve().parents[2] / "src" / "attnprof" / "kernels" / "flash_attn_triton"
SHAPES = ((4, 4096, 16, 128), (8, 1024, 16, 64))  # batch, seq, heads, head_dim; causal


def latency_us(fn, calls: int = 30) -> float:
    samples = []
    for _ in range(calls):
        start = time.perf_counter()
        fn()
        torch.cuda.synchronize()
        samples.append(time.perf_counter() - start)
    return sorted(samples)[calls // 2] * 1e6


def calls(hub, src, q, k, v) -> dict:
    qh, kh, vh = (t.transpose(1, 2).contiguous() for t in (q, k, v))
    return {
        "hub flash_attn_func bshd": lambda: hub.flash_attn_func(q, k, v, causal=True),
        "src flash_attn_func bshd": lambda: src.flash_attn_func(q, k, v, causal=True),
        "hub attention bhsd": lambda: hub.attention(qh, kh, vh, causal=True),
        "src attention bhsd": lambda: src.attention(qh, kh, vh, causal=True),
        "sdpa cudnn bhsd": lambda: torch.nn.functional.scaled_dot_product_attention(qh, kh, vh, is_causal=True),
    }


def main() -> None:
    from kernels import get_local_kernel

    hub = get_local_kernel(FOLDER)
    sys.path.insert(0, str(FOLDER / "torch-ext"))
    import flash_attn_triton as src

    print(torch.cuda.get_device_name(), torch.__version__, triton.__version__, flush=True)
    for batch, seq, heads, head_dim in SHAPES:
        for dtype in (torch.float16, torch.bfloat16):
            q, k, v = (torch.randn(batch, seq, heads, head_dim, device="cuda", dtype=dtype) for _ in range(3))
            for name, fn in calls(hub, src, q, k, v).items():
                with torch.nn.attention.sdpa_kernel([torch.nn.attention.SDPBackend.CUDNN_ATTENTION]):
                    fn()
                    torch.cuda.synchronize()
                    device_ms = triton.testing.do_bench(fn, warmup=25, rep=100)
                    latency = latency_us(fn)
                print(f"B{batch} S{seq} H{heads} D{head_dim} {str(dtype)[6:]} {name}: device {device_ms * 1e3:.1f} us, "
                      f"latency/call median {latency:.1f} us", flush=True)


if __name__ == "__main__":
    main()
