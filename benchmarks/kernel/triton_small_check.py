"""The shipped forward and step, as a user calls them, against cuDNN at small problems: one check of what
`attention()` chooses by itself (no candidate forced), side by side in one process, alternating rounds.

    PYTHONPATH=src python3 benchmarks/kernel/triton_small_check.py [NAME ...]   # NAME: a part of a shape's name

Device time: `triton.testing.do_bench` medians (CUDA events, L2 flushed), 9 alternating rounds for a
forward, 7 for a step; latency: calls with one synchronisation (300 per forward, 100 per step), 5 rounds.
The speed is cuDNN's time over ours (> 1: ours faster), the median of per-round ratios (range). The step
is `torch.autograd.grad` of the forward for q, k and v. Error: max |ours - cuDNN| over the whole output.
"""

from __future__ import annotations

import sys
from pathlib import Path

import torch

sys.path.insert(0, str(Path(__file__).resolve().parent))
import triton_small as ts  # noqa: E402
from triton_kernel_path import load_flash_attn_triton  # noqa: E402

SHAPES = {"b8-s1024-d64-causal (article)": (8, 16, 1024, 64, True), "b16-s2048-d128-causal": (16, 16, 2048, 128, True),
          "b4-s1024-d128-causal": (4, 16, 1024, 128, True), "b8-s1024-d64-full": (8, 16, 1024, 64, False)}


def cudnn(q, k, v, causal: bool):
    with ts.sdpa_kernel([ts.SDPBackend.CUDNN_ATTENTION]):
        return torch.nn.functional.scaled_dot_product_attention(q, k, v, is_causal=causal)


def compare(label: str, fns: dict, rounds: int, calls: int) -> None:
    dev = ts.alternate({k: (lambda: None, f) for k, f in fns.items()}, ts.device_ms, rounds)
    lat = ts.alternate({k: (lambda: None, f) for k, f in fns.items()}, lambda f: ts.latency_us(f, calls), 5)
    for name in fns:
        d, t = dev[name], lat[name]
        print(f"  {label} {name:6} {d['median'] * 1e3:8.1f} us speed {d['speed']:.3f} ({d['speed_range'][0]:.3f}-"
              f"{d['speed_range'][1]:.3f})  latency {t['median']:8.1f} us speed {t['speed']:.3f} "
              f"({t['speed_range'][0]:.3f}-{t['speed_range'][1]:.3f})", flush=True)


def check(module, name: str, b: int, h: int, s: int, d: int, causal: bool) -> None:
    q, k, v, dout = ts.inputs(b, h, s, d)

    def ours(*t):
        return module.attention(*t, causal=causal)

    def theirs(*t):
        return cudnn(*t, causal)

    print(f"== {name}: |ours - cuDNN| {(ours(q, k, v).double() - theirs(q, k, v).double()).abs().max():.2e}")
    compare("fwd ", {"cudnn": lambda: theirs(q, k, v), "ours": lambda: ours(q, k, v)}, 9, ts.CALLS)
    if name.endswith("(article)"):
        leaves = [t.detach().clone().requires_grad_() for t in (q, k, v)]
        compare("step", {"cudnn": ts.step(theirs, leaves, dout), "ours": ts.step(ours, leaves, dout)}, 7, 100)


def main() -> None:
    module, how = load_flash_attn_triton()
    print(f"{torch.cuda.get_device_name()}, torch {torch.__version__}; kernel {how}", flush=True)
    for name, shape in SHAPES.items():
        if not sys.argv[1:] or any(part in name for part in sys.argv[1:]):
            check(module, name, *shape)


if __name__ == "__main__":
    main()
