"""H200 runs behind docs/kernel.md's masked training tables, at the issue's three mask cases (B2, 32/8 heads,
D128, bf16). From the repository root:

    PYTHONPATH=src python3 benchmarks/kernel/triton_masked_backward.py --part sweep|forward-configs|train [--rounds 5]
        [--cases window256_s2048,...] [--sweep-cases window256_s2048] [--train-configs fastest,...]

(--part prewarm alone first compiles, in parallel processes, the defaults and flex at --cases, with
--every-config the sweep's configurations too, --forward-configs forward-configs' too.)

sweep: the masked backward alone, the default (the Gluon backward where it takes the case) and the Triton
passes at each CANDIDATES configuration, in alternating rounds of CUDA-graph replays (device time only),
each one's gradients checked against the Triton passes' default's; forward-configs: the masked
forward's default against FORWARD_CANDIDATES and flex at window 256, in alternating rounds (graph replay);
train: the forward (graph replay) and the training step (forward + backward; triton.testing.do_bench and 30
steps back to back by the wall clock, host included; graph replay, the GPU's work alone) of flex and ours
(the default backward, and the --train-configs ones) in alternating rounds, and their errors against
float64; last it prints each one's speed against flex per case.
"""

from __future__ import annotations

import argparse
import json
import os
import sys
import time
from pathlib import Path

import torch

sys.path.insert(0, str(Path(__file__).parent))
import triton_masks as bench  # noqa: E402

KERNEL = bench.KERNEL
MB = KERNEL.backward.masked_backward
Config = MB.MaskedBackwardConfig
DEFAULT = MB.CONFIGS[128]
# the sweep's rivals of the default, by name (session 4 swept these tiles with every block through the masked
# step, a form since dropped, docs/kernel.md): 64 keys a dK/dV program (less of a short window's edges
# wasted), 32 rows a step (no spill), and the dQ pass's tiles and stages
CANDIDATES = {"default": DEFAULT,
              "dkdv_64x64_w4": DEFAULT._replace(dkdv_m=64, dkdv_n=64, dkdv_warps=4, dkdv_stages=2),
              "dkdv_32x128_w8_s3": DEFAULT._replace(dkdv_m=32, dkdv_n=128, dkdv_warps=8, dkdv_stages=3),
              "dq_128x32": DEFAULT._replace(dq_n=32),
              "dq_64x64_w4": DEFAULT._replace(dq_m=64, dq_n=64, dq_warps=4, dq_stages=3),
              "dq_stages2": DEFAULT._replace(dq_stages=2)}
FORWARD_CANDIDATES = [(64, 64, 4, 3, 4), (64, 64, 4, 4, 2), (128, 64, 8, 3, 2)]  # masks.GPU_CONFIG's rivals


def case_inputs(seq: int, mask: str):
    """Our backward's own inputs for one case: q, k, v, out, lse, dout in [B, S, H, D], and its arguments."""
    q, k, v = (t.transpose(1, 2) for t in bench.mask_inputs(seq))
    kwargs = bench.mask_kwargs(mask)
    window = KERNEL.flash_api.window_bounds(True, kwargs.get("window_size", (-1, -1)))
    if "document_len" in kwargs:
        cu, longest = KERNEL.flash_api.documents(seq, kwargs["document_len"], q.device)
    else:
        cu, longest = KERNEL.flash_api.documents(seq, seq, q.device)
    scale = q.shape[-1] ** -0.5
    out, lse = KERNEL.masks.masked_forward(q, k, v, cu, cu, longest, scale, window)
    dout = torch.randn_like(out)
    return (q, k, v, out, lse, dout, cu, cu, longest, longest, scale, window, True)


def _compile_one(fields: tuple) -> str:
    """Compile one backward (a MaskedBackwardConfig's fields) or forward (masks.GPU_CONFIG's) configuration
    for both kinds of mask bound at small shapes with the large ones' integer specialisations (divisible by
    16 or not), so that Triton's disk cache serves the timed runs; ("flex", case): flex's training step at
    that case's shape, for torch.compile's cache; ("gluon",): the default backward at window 256 (the Gluon
    kernel on an H200)."""
    if fields == ("gluon",):
        MB.masked_backward(*case_inputs(2048, "window=256"))
    if fields[0] == "flex":
        seq, mask = bench.MASK_CASES[fields[1]]
        q, k, v = (t.requires_grad_() for t in bench.mask_inputs(seq))
        step(bench.flex_fn(seq, mask), (q, k, v), torch.randn_like(q))
    for mask in ("window=256", "document=1024") if fields[0] not in ("flex", "gluon") else ():
        if len(fields) == len(Config._fields):
            MB.masked_backward(*case_inputs(2048, mask), config=Config(*fields))
        else:
            bench.ours_masked(*bench.mask_inputs(2048), mask, fields)
    torch.cuda.synchronize()
    return str(fields)


def prewarm(every_config: bool, forward_configs: bool, cases: list[str]) -> None:
    """Compile in parallel processes what the other parts run: the defaults and flex's steps at these cases,
    with every_config every configuration of the sweep too, with forward_configs those of forward-configs."""
    import multiprocessing

    configs = [tuple(DEFAULT), *bench.DEFAULT_MASK_CONFIGS]
    if every_config:
        configs += [tuple(c) for c in CANDIDATES.values() if c != DEFAULT]
    if forward_configs:
        configs += FORWARD_CANDIDATES
    configs += [("flex", case) for case in cases] + [("gluon",)]
    with multiprocessing.get_context("spawn").Pool(min(16, len(configs))) as pool:
        for done in pool.imap_unordered(_compile_one, configs):
            print("compiled", done, flush=True)


def sweep_case(seq: int, mask: str, rounds: int) -> dict:
    """The backward alone at every CANDIDATES configuration of the Triton passes, and the default (the Gluon
    backward where it takes the case), in alternating rounds of graph replays (device time), each one's
    gradients' largest difference from the Triton passes' default's (relative to the largest element)."""
    args = case_inputs(seq, mask)
    base = MB.masked_backward(*args, config=DEFAULT)
    fns = {"ours default": lambda: MB.masked_backward(*args)}
    result = {"diff_vs_default": {"ours default": bench.relative_diff(fns["ours default"](), base)}, "errors": {}}
    for name, config in CANDIDATES.items():
        try:
            result["diff_vs_default"][name] = bench.relative_diff(MB.masked_backward(*args, config=config), base)
            fns[name] = lambda config=config: MB.masked_backward(*args, config=config)
        except Exception as e:  # a configuration that does not compile or fit
            result["errors"][name] = f"{type(e).__name__}: {str(e)[:120]}"
    result |= bench.alternating(fns, rounds, lambda fn: bench.graph_us(fn, calls=5))
    print(json.dumps(result), flush=True)
    return result


def fastest(sweep: dict) -> str:
    """The candidate with the smallest median time in a sweep_case result."""
    return min((name for name in CANDIDATES if name in sweep), key=lambda name: sweep[name]["median"])


def forward_rounds(rounds: int) -> dict:
    """Window 256, S2048: the default masked forward, FORWARD_CANDIDATES and flex, in turn (graph replay),
    each one's error (batch 0, heads 0-3) against float64 beside."""
    q, k, v = bench.mask_inputs(2048)
    problem = bench.Problem(batch=1, heads=4, kv_heads=1, seq=2048, head_dim=bench.DIM, mask="window=256")
    want = bench.reference_output(q[:1, :4], k[:1, :1], v[:1, :1], problem)
    flex = bench.flex_fn(2048, "window=256")
    fns = {"default": lambda: bench.ours_masked(q, k, v, "window=256")}
    fns |= {str(c): lambda c=c: bench.ours_masked(q, k, v, "window=256", c) for c in FORWARD_CANDIDATES}
    fns["flex"] = lambda: flex(q, k, v)
    errors = {name: bench.max_err(fn()[:1, :4], want) for name, fn in fns.items()}
    result = {"errors": errors, **bench.alternating(fns, rounds, lambda fn: bench.graph_us(fn, calls=5))}
    print(json.dumps(result), flush=True)
    return result


def ours_with(config: Config, mask: str, gluon: bool = True):
    """Our masked attention whose backward (run later, by .backward()) takes this configuration; gluon=False
    keeps the Triton passes where the Gluon backward would take the inputs (FLASH_ATTN_TRITON_ATOMIC_DQ=0)."""
    def fn(q, k, v):
        MB.CONFIGS[128] = config
        os.environ["FLASH_ATTN_TRITON_ATOMIC_DQ"] = "gluon" if gluon else "0"
        return bench.ours_masked(q, k, v, mask)
    return fn


def train_case(seq: int, mask: str, rounds: int, errors: bool, configs: list[str]) -> dict:
    """Forward (no grad, graph replay) and training step (do_bench, and back to back) of flex and ours (the
    default, then each named CANDIDATES configuration's backward) in turns, and the forward's and the
    gradients' errors against float64. Ratios are ours over flex (under 1: ours faster)."""
    q, k, v = (t.requires_grad_() for t in bench.mask_inputs(seq))
    dout = torch.randn_like(q)
    fns = {"flex": bench.flex_fn(seq, mask), "ours": ours_with(DEFAULT, mask)}
    fns |= {f"ours {name}": ours_with(CANDIDATES.get(name, DEFAULT), mask, gluon=name != "triton")
            for name in configs if name != "default"}
    row = {}
    with torch.no_grad():
        if errors:
            problem = bench.Problem(batch=1, heads=4, kv_heads=1, seq=seq, head_dim=bench.DIM, mask=mask)
            want = bench.reference_output(q[:1, :4], k[:1, :1], v[:1, :1], problem)
            row["fwd_err"] = {key: bench.max_err(fns[key](q, k, v)[:1, :4], want) for key in ("flex", "ours")}
            del want
        forwards = {key: lambda fn=fns[key]: fn(q, k, v) for key in ("flex", "ours")}
        row["fwd_us"] = bench.alternating(forwards, rounds, lambda fn: bench.graph_us(fn, calls=5))
    if errors:
        row["grad_err"] = gradient_errors((q, k, v), dout, seq, mask, fns)
    steps = {key: lambda fn=fn: step(fn, (q, k, v), dout) for key, fn in fns.items()}
    row |= {"step_us": bench.alternating(steps, rounds), "loop_us": bench.alternating(steps, rounds, loop_us)}
    try:  # the GPU's work alone: steps captured in a CUDA graph
        row["step_graph_us"] = bench.alternating(steps, rounds, lambda fn: bench.graph_us(fn, calls=5))
    except Exception as e:  # capture refused (flex's compiled backward, say)
        row["step_graph_error"] = f"{type(e).__name__}: {str(e)[:200]}"
    MB.CONFIGS[128] = DEFAULT
    os.environ.pop("FLASH_ATTN_TRITON_ATOMIC_DQ")
    return row


def speeds(row: dict) -> dict:
    """Speed against flex (flex's time over ours: the inverse of each per-round ratio) of every timed part."""
    return {part: {key.split("/")[0]: f"{1 / r['median']:.3f} ({1 / r['max']:.3f}-{1 / r['min']:.3f})"
                   for key, r in row[part].items() if key.endswith("/flex")}
            for part in ("fwd_us", "step_us", "loop_us", "step_graph_us") if part in row}


def loop_us(fn, calls: int = 30) -> float:
    """Wall-clock time per call of `calls` calls back to back, synchronised at both ends: what a training
    loop sees, host time included (do_bench times each call between events instead)."""
    fn()
    torch.cuda.synchronize()
    start = time.perf_counter()
    for _ in range(calls):
        fn()
    torch.cuda.synchronize()
    return (time.perf_counter() - start) / calls * 1e6


def step(fn, leaves, dout) -> None:
    for t in leaves:
        t.grad = None
    fn(*leaves).backward(dout)


def gradient_errors(leaves, dout, seq: int, mask: str, fns: dict) -> dict:
    """Each function's dq, dk, dv of batch 0, query heads 0-3 and their KV head against float64: the
    largest error relative to the largest element."""
    problem = bench.Problem(batch=1, heads=4, kv_heads=1, seq=seq, head_dim=bench.DIM, mask=mask)
    heads = (4, 1, 1)
    wants = [t[:1, :h].detach().double().requires_grad_() for t, h in zip(leaves, heads, strict=True)]
    (bench.reference_output(*wants, problem) * dout[:1, :4].double()).sum().backward()
    errors = {}
    for key, fn in fns.items():
        step(fn, leaves, dout)
        errors[key] = {name: ((t.grad[:1, :h].double() - want.grad).abs().max() / want.grad.abs().max()).item()
                       for name, t, h, want in zip(("dq", "dk", "dv"), leaves, heads, wants, strict=True)}
    del wants
    torch.cuda.empty_cache()
    return errors


def main() -> None:
    parser = argparse.ArgumentParser()
    parser.add_argument("--part", action="append", choices=("prewarm", "sweep", "forward-configs", "train"),
                        required=True)
    parser.add_argument("--rounds", type=int, default=5)
    parser.add_argument("--every-config", action="store_true", help="prewarm: the sweep's configurations too")
    parser.add_argument("--forward-configs", action="store_true", help="prewarm: forward-configs' too")
    parser.add_argument("--no-errors", action="store_true", help="train: skip the gradients' float64 check")
    parser.add_argument("--out", default="/tmp")
    parser.add_argument("--cases", default=",".join(bench.MASK_CASES), help="prewarm, train: which of the mask cases")
    parser.add_argument("--train-configs", default="",
                        help="train: CANDIDATES names whose backward runs beside the default's ('fastest': the "
                             "sweep's fastest at that case, or at the first swept case, when --part sweep runs too; "
                             "'triton': the Triton passes where the default is the Gluon backward)")
    parser.add_argument("--sweep-cases", default="window256_s2048", help="sweep: which of the mask cases")
    args = parser.parse_args()
    cases = args.cases.split(",")
    results = {"device": torch.cuda.get_device_name(), "torch": torch.__version__}
    if "prewarm" in args.part:
        prewarm(args.every_config, args.forward_configs, cases)
        return
    if "sweep" in args.part:
        results["sweep"] = {name: sweep_case(*bench.MASK_CASES[name], args.rounds)
                            for name in args.sweep_cases.split(",")}
    if "forward-configs" in args.part:
        results["forward_window256"] = forward_rounds(args.rounds)
    if "train" in args.part:
        results["train"] = {}
        for name in cases:
            swept = results.get("sweep", {})
            configs = [fastest(swept.get(name) or next(iter(swept.values()))) if c == "fastest" else c
                       for c in args.train_configs.split(",") if c]
            row = train_case(*bench.MASK_CASES[name], args.rounds, not args.no_errors, list(dict.fromkeys(configs)))
            results["train"][name] = row | {"speed_vs_flex": speeds(row)}
            print(name, json.dumps(results["train"][name]), flush=True)
    os.makedirs(args.out, exist_ok=True)
    with open(f"{args.out}/masked_backward.json", "w") as f:
        json.dump(results, f, indent=1)
    for name, row in results.get("train", {}).items():
        print(name, json.dumps(row["speed_vs_flex"]))


if __name__ == "__main__":
    main()
