"""Head dim 256 and q/k 192 with v 128: the kernel's tile candidates against the shipped configurations and
cuDNN, in one process, alternating rounds (triton_masks.alternating, triton.testing.do_bench medians). From the
repository root:

    PYTHONPATH=src python3 benchmarks/kernel/triton_wide_configs.py --out DIR [--rounds 5] [--parts forward]

Why: the shipped wide configurations were picked to fit sm_90 without spilling, not measured (docs/kernel.md, "Head
dims 256 and 192/128"), and their dK/dV programs own 32 keys, so that pass's products have 32 rows and compile to
mma.sync, not wgmma (sm_90 PTX, Triton 3.6 and 3.9); with 64 keys a program they compile to wgmma, spilling 0-96
bytes with 16 or 32 query rows a step. Each shape, B2 H16 S4096 causal bf16:
- dense backward alone (the two-pass backward, `backward._backward.backward(config=...)`) at every
  BACKWARD_CANDIDATES configuration, the single pass (`backward._backward_single.backward`) at every
  SINGLE_CANDIDATES one, and cuDNN's (SDPA) in the same rounds;
- masked backward alone (window 1024, `masked_backward.masked_backward(config=...)`) at the same tiles, and as
  the single pass (FLASH_ATTN_TRITON_ATOMIC_DQ=1) at SINGLE_CANDIDATES' tiles;
- dense forward (`_launch.forward(config=...)`) at every FORWARD_CANDIDATES configuration and cuDNN's;
each candidate's largest difference from the shipped configuration's result, relative to its largest element.
Everything is compiled first in parallel processes (Triton's disk cache then serves this one).
Writes DIR/triton_wide_configs.json and prints one JSON line per part.
"""

from __future__ import annotations

import argparse
import json
import multiprocessing
import os
import sys
from pathlib import Path
from unittest import mock

import torch
import triton

sys.path.insert(0, str(Path(__file__).resolve().parent))
from triton_masks import KERNEL, alternating, relative_diff  # noqa: E402
from triton_vs_cudnn import _backward_only, _cudnn  # noqa: E402

BATCH, HEADS, SEQ, WINDOW = 2, 16, 4096, 1024
SHAPES = ((256, 256), (192, 128))  # (q/k head dim, v head dim)
Dense = KERNEL.backward._backward.BackwardConfig
Masked = KERNEL.backward.masked_backward.MaskedBackwardConfig
# (dkdv_m, dkdv_n, dq_m, dq_n, warps, stages), the shipped one (_backward.CONFIGS) first, then the 32-key tiles
# shipped before session 19 and its rivals; the masked backward runs its shipped one and the same tiles
BACKWARD_CANDIDATES = {
    256: [Dense(64, 64, 64, 64, 8, 2), Dense(32, 32, 64, 32, 8, 2), Dense(64, 64, 64, 32, 8, 2),
          Dense(32, 64, 64, 64, 8, 2), Dense(64, 64, 128, 64, 8, 2)],
    192: [Dense(32, 64, 64, 64, 8, 2), Dense(64, 32, 64, 32, 8, 2), Dense(64, 64, 64, 64, 8, 2),
          Dense(16, 128, 64, 64, 8, 2), Dense(32, 128, 64, 64, 8, 2), Dense(64, 64, 64, 64, 8, 3)]}
Single = KERNEL.backward._backward_single.SingleConfig
# the single pass (FLASH_ATTN_TRITON_ATOMIC_DQ=1: 5 products where the two-pass backward runs 7, dQ by TMA reduces),
# its shipped tiles first (32 query rows a step: no spill, the dQ product on mma.sync), then 64 rows a step (every
# product on wgmma; 256: 144 bytes of spill in 2 stages, 288 in one; 192/128: 2 stages, 64) and at 192/128 128 keys
# a program (48 bytes); at 256 also 32 keys a program in 4 warps, every product on mma.sync, where the masked single
# pass spills 32 bytes against 536-552 at the shipped tiles
SINGLE_PASS = mock.patch.dict(os.environ, {"FLASH_ATTN_TRITON_ATOMIC_DQ": "1"})  # around a call: the single pass
SINGLE_CANDIDATES = {256: [Single(32, 64, 8, 2), Single(64, 64, 8, 2), Single(64, 64, 8, 1), Single(32, 32, 4, 2)],
                     192: [Single(32, 64, 8, 2), Single(64, 64, 8, 2), Single(32, 128, 8, 2)]}
# (BLOCK_M, BLOCK_N, stages, warps[, warp specialised]), the shipped one (_launch.SM90_CONFIGS[256]) first: the
# H100's nearest rivals (session 19); Triton's warp specialisation (a producer warpgroup feeding two consumer ones,
# 168 registers, no spill, 229664 bytes of shared memory at 256: sm_90 ptxas, Triton 3.6); and at 192/128 a third
# stage and 128 keys a block, which Q and K as 128 + 64 columns rather than padded to 256 fit (docs/kernel.md
# "Session 21": all compile without spilling); a candidate that does not fit is recorded with its error
WS = (128, 64, 2, 4, True)
FORWARD_CANDIDATES = {256: [(128, 64, 2, 8), (128, 32, 3, 8), (64, 64, 2, 4), WS],
                      192: [(128, 64, 2, 8), (128, 32, 3, 8), (64, 64, 2, 4), WS, (128, 64, 3, 8), (128, 128, 2, 8),
                            (128, 128, 2, 4, True), (128, 64, 3, 4, True)]}
PARTS = ("backward", "masked", "forward")


def masked_of(c) -> tuple:
    """The masked backward's configuration with a dense one's tiles, warps and stages in both passes."""
    return Masked(c.dkdv_m, c.dkdv_n, c.warps, c.stages, c.dq_m, c.dq_n, c.warps, c.stages)


def masked_candidates(qk: int) -> list:
    """The masked backward's shipped configuration, then the dense candidates' tiles it is not."""
    shipped = KERNEL.backward.masked_backward.CONFIGS[qk]
    return [shipped] + [m for m in map(masked_of, BACKWARD_CANDIDATES[qk]) if m != shipped]


def forward_config(fields: tuple) -> triton.Config:
    block_m, block_n, stages, warps, ws = (*fields, False)[:5]
    return KERNEL._launch.make_config(block_n, stages, ws=ws, persistent=False, warps=warps, block_m=block_m)


def inputs(qk: int, v_dim: int, seed: int = 0):
    """q, k, v, dO [B, H, S, D] bf16, with the dense forward's out and LSE."""
    gen = torch.Generator(device="cuda").manual_seed(seed)
    q, k = (torch.randn(BATCH, HEADS, SEQ, qk, device="cuda", dtype=torch.bfloat16, generator=gen) for _ in range(2))
    v, dout = (torch.randn(BATCH, HEADS, SEQ, v_dim, device="cuda", dtype=torch.bfloat16, generator=gen)
               for _ in range(2))
    out, lse = KERNEL._launch.forward(q, k, v, causal=True, sm_scale=None)
    return q, k, v, dout, out, lse


def calls(qk: int, v_dim: int) -> dict:
    """Every timed call of one shape by its name: (part, function)."""
    q, k, v, dout, out, lse = inputs(qk, v_dim)
    scale = qk ** -0.5
    found = {}
    for c in BACKWARD_CANDIDATES[qk]:
        found[f"dense {tuple(c)}"] = ("backward", lambda c=c: KERNEL.backward._backward.backward(
            q, k, v, out, lse, dout, sm_scale=scale, causal=True, causal_off=0, config=c))
    for c in SINGLE_CANDIDATES[qk]:
        found[f"single {tuple(c)}"] = ("backward", lambda c=c: KERNEL.backward._backward_single.backward(
            q, k, v, out, lse, dout, sm_scale=scale, causal=True, causal_off=0, config=c))
    bshd = [t.transpose(1, 2) for t in (q, k, v, dout)]
    cu, _ = KERNEL.flash_api.documents(SEQ, SEQ, q.device)
    window = KERNEL.flash_api.window_bounds(True, (WINDOW - 1, 0))
    m_out, m_lse = KERNEL.masks.masked_forward(*bshd[:3], cu, cu, SEQ, scale, window)
    for c in masked_candidates(qk):
        found[f"masked {tuple(c)}"] = ("masked", lambda c=c: KERNEL.backward.masked_backward.masked_backward(
            *bshd[:3], m_out, m_lse, bshd[3], cu, cu, SEQ, SEQ, scale, window, True, config=c))
    shipped = KERNEL.backward.masked_backward.CONFIGS[qk]
    for c in SINGLE_CANDIDATES[qk]:  # the masked single pass at the dense one's tiles (read at each backward)
        tiles = shipped._replace(dkdv_m=c.block_m, dkdv_n=c.block_n, dkdv_warps=c.warps, dkdv_stages=c.stages)
        found[f"masked single {tuple(c)}"] = ("masked", SINGLE_PASS(
            lambda t=tiles: KERNEL.backward.masked_backward.masked_backward(
                *bshd[:3], m_out, m_lse, bshd[3], cu, cu, SEQ, SEQ, scale, window, True, config=t)))
    for fields in FORWARD_CANDIDATES[qk]:
        found[f"forward {fields}"] = ("forward", lambda f=fields: KERNEL._launch.forward(
            q, k, v, causal=True, sm_scale=None, config=forward_config(f)))
    return found


def _compile(task: tuple) -> str:
    """Worker: run one call once (Triton compiles it into its disk cache); a failure is reported, not raised."""
    qk, v_dim, name = task
    try:
        calls(qk, v_dim)[name][1]()
        torch.cuda.synchronize()
        return f"compiled {qk}/{v_dim} {name}"
    except Exception as e:  # noqa: BLE001 - a configuration that does not compile or fit: reported
        return f"failed {qk}/{v_dim} {name}: {type(e).__name__}: {str(e)[:160]}"


def precompile(parts: list[str]) -> None:
    tasks = [(qk, v_dim, name) for qk, v_dim in SHAPES for name, (kind, _) in calls(qk, v_dim).items()
             if kind in parts]
    torch.cuda.empty_cache()
    with multiprocessing.get_context("spawn").Pool(min(12, len(tasks))) as pool:
        for outcome in pool.imap_unordered(_compile, tasks):
            print(outcome, flush=True)


def cudnn_calls(qk: int, v_dim: int) -> dict:
    """cuDNN's (SDPA) forward and backward alone at the shape: the backward on a kept graph."""
    q, k, v = inputs(qk, v_dim)[:3]
    leaves = [t.detach().requires_grad_() for t in (q, k, v)]
    return {"backward": _backward_only(lambda: _cudnn(*leaves, True), leaves),
            "forward": torch.no_grad()(lambda: _cudnn(q, k, v, True))}


def shape_rows(qk: int, v_dim: int, rounds: int, parts: list[str]) -> list[dict]:
    found = calls(qk, v_dim)
    cudnn = cudnn_calls(qk, v_dim)
    rows = []
    for part in parts:
        fns, diffs, errors = {}, {}, {}
        shipped = None
        for name, (kind, fn) in found.items():
            if kind != part:
                continue
            try:
                result = fn()
            except Exception as e:  # noqa: BLE001 - does not compile or fit: recorded, the others go on
                errors[name] = f"{type(e).__name__}: {str(e)[:160]}"
                continue
            shipped = result if shipped is None else shipped
            diffs[name], fns[name] = relative_diff(result, shipped), fn
        if part != "masked":
            fns["cudnn"] = cudnn[part]
        row = {"qk": qk, "v": v_dim, "part": part, "diff_vs_shipped": diffs, "errors": errors,
               "us": alternating(fns, rounds)}
        print(json.dumps(row), flush=True)
        rows.append(row)
    return rows


def main() -> None:
    parser = argparse.ArgumentParser()
    parser.add_argument("--out", type=Path, required=True)
    parser.add_argument("--rounds", type=int, default=5)
    parser.add_argument("--parts", default=",".join(PARTS), help=f"a comma-separated subset of {PARTS}")
    args = parser.parse_args()
    parts = [part for part in PARTS if part in args.parts.split(",")]
    precompile(parts)
    results = {"device": torch.cuda.get_device_name(), "torch": torch.__version__, "triton": triton.__version__,
               "cudnn": torch.backends.cudnn.version(), "rows": []}
    for qk, v_dim in SHAPES:
        results["rows"] += shape_rows(qk, v_dim, args.rounds, parts)
        args.out.mkdir(parents=True, exist_ok=True)
        (args.out / "triton_wide_configs.json").write_text(json.dumps(results, indent=1))


if __name__ == "__main__":
    main()
