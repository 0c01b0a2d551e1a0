"""The backward's single passes on a GPU before they are timed: --check compares each Gluon kernel's gradients
with the two-pass backward's at a small shape (prints which values of FLASH_ATTN_TRITON_ATOMIC_DQ agree, for
the device script to time only those); --profile runs each backward once at B4 H16 S4096 D128 causal, bf16,
for `ncu -k regex:...` to read their kernels' counters.

    PYTHONPATH=src python3 benchmarks/kernel/triton_backward_probe.py --check gluon
    ncu --clock-control none -k regex:'bwd_(dkdv|dq|hopper)$' python3 benchmarks/kernel/triton_backward_probe.py
        --profile 0,gluon
"""

from __future__ import annotations

import argparse
import os
import sys
from pathlib import Path

import torch

sys.path.insert(0, str(Path(__file__).resolve().parent))
from triton_kernel_path import load_flash_attn_triton  # noqa: E402

ATOMIC_DQ = "FLASH_ATTN_TRITON_ATOMIC_DQ"


def grads(module, value: str, q, k, v, dout, causal: bool):
    """dQ, dK, dV of attention() with the variable set to value ("0": the two-pass backward)."""
    os.environ[ATOMIC_DQ] = value
    leaves = [t.detach().clone().requires_grad_() for t in (q, k, v)]
    out = torch.autograd.grad(module.attention(*leaves, causal=causal), leaves, dout)
    torch.cuda.synchronize()
    os.environ.pop(ATOMIC_DQ)
    return out


def check(module, values: list[str]) -> list[str]:
    """The values whose gradients are within 2e-2 (relative, Frobenius) of the two-pass ones at two shapes."""
    agreeing = []
    for value in values:
        worst = 0.0
        for (batch, heads, kv_heads, seq, head_dim), causal in (((2, 4, 2, 1024, 128), True),
                                                                 ((1, 4, 4, 768, 64), False)):
            gen = torch.Generator(device="cuda").manual_seed(seq)
            q, dout = (torch.randn(batch, heads, seq, head_dim, device="cuda", generator=gen, dtype=torch.bfloat16)
                       for _ in range(2))
            k, v = (torch.randn(batch, kv_heads, seq, head_dim, device="cuda", generator=gen, dtype=torch.bfloat16)
                    for _ in range(2))
            want = grads(module, "0", q, k, v, dout, causal)
            got = grads(module, value, q, k, v, dout, causal)
            worst = max([worst] + [((g.float() - w.float()).norm() / w.float().norm()).item()
                                   for g, w in zip(got, want, strict=True)])
        print(f"{value}: worst relative difference from the two-pass gradients {worst:.2e}", flush=True)
        if worst < 2e-2:
            agreeing.append(value)
    return agreeing


def main() -> None:
    parser = argparse.ArgumentParser()
    parser.add_argument("--check", default="")
    parser.add_argument("--profile", default="")
    args = parser.parse_args()
    module = load_flash_attn_triton()[0]
    if args.check:
        print("agree:", ",".join(check(module, args.check.split(","))), flush=True)
    for value in filter(None, args.profile.split(",")):
        gen = torch.Generator(device="cuda").manual_seed(0)
        q, k, v, dout = (torch.randn(4, 16, 4096, 128, device="cuda", generator=gen, dtype=torch.bfloat16)
                         for _ in range(4))
        grads(module, value, q, k, v, dout, True)


if __name__ == "__main__":
    main()
