"""Small problems on the H200: which forward (Gluon or plain, which configuration) wins, side by side with
cuDNN in one process, in alternating rounds; what the caller's [B, S, H, D] layout costs; and where a
training step's time goes at the article's problem.

    PYTHONPATH=src python3 benchmarks/kernel/triton_small.py --out DIR

Every candidate runs through attention() as a user calls it (its plan per shape), with the module's
choice set to that candidate: the Gluon forward's configuration at every size (_hopper_launch.BY_SIZE) or
the plain kernel's (_launch.SM90_CONFIGS, Gluon off), each with plans of its own. Device time:
triton.testing.do_bench medians (CUDA events, L2 flushed before each call); the speed is cuDNN's time
over the candidate's (> 1: ours faster), the median of ROUNDS per-round ratios. Latency per call: CALLS
calls with one synchronisation, per call. Errors: max abs error against float64 on the first and the
last (batch, head). Kernels are compiled first in parallel worker processes. Writes DIR/triton_small.json.
"""

from __future__ import annotations

import argparse
import concurrent.futures
import json
import multiprocessing
import os
import statistics
import sys
import threading
import time
from pathlib import Path

import torch
import triton
from torch.nn.attention import SDPBackend, sdpa_kernel

sys.path.insert(0, str(Path(__file__).resolve().parent))
from triton_kernel_path import load_flash_attn_triton  # noqa: E402

ROUNDS, CALLS = 5, 300
WORKER_S = 25  # a compile worker's limit
SHAPES = {"b8-s1024-d64-causal": (8, 16, 1024, 64), "b16-s2048-d128-causal": (16, 16, 2048, 128),
          "b4-s1024-d128-causal": (4, 16, 1024, 128)}  # batch, heads, seq, head_dim; all causal, bf16
PLAIN = {64: ("plain n64 s3 w4", (64, 3, 4, False)), 128: ("plain ws n128 s2", (128, 2, 4, True))}  # shipped
CANDIDATES = {  # shape: (label, Gluon configuration or None, plain (block_n, stages, warps, ws) or None, L2 MiB)
    "b8-s1024-d64-causal": [(PLAIN[64][0], None, PLAIN[64][1], None),
                            ("plain n64 s3 w8", None, (64, 3, 8, False), None),
                            ("plain n64 s4 w4", None, (64, 4, 4, False), None)]
    + [(f"gluon {name}", name, None, None) for name in ("overlap", "overlap_s3", "overlap_n64_s3", "overlap_n64_s4",
                                                         "pingpong", "two_per_sm_n64_s2", "two_per_sm_n64_s3")]
    + [(f"gluon {name}, L2 group 32 MiB", name, None, 32) for name in ("overlap", "two_per_sm_n64_s2")]
    + [(f"gluon {name}", name, None, None) for name in ("persistent", "persistent_s3", "persistent_n64_s4")]
    + [(f"gluon {name}", name, None, None) for name in ("two_per_sm_n64_s2_skip", "two_per_sm_n64_s3_skip")]
    + [("gluon two_per_sm_n64_s2 again", "two_per_sm_n64_s2", None, None)]  # the same twice: the noise
    + [(f"gluon {name} (L2 group 32 MiB)", name, None, 32) for name in ("two_per_sm_n64_s2", "two_per_sm_n64_s2_skip")],
    "b16-s2048-d128-causal": [(PLAIN[128][0], None, PLAIN[128][1], None)]
    + [(f"gluon {name}", name, None, None) for name in ("overlap", "overlap_s3", "pingpong", "pingpong_s3")]
    + [(f"gluon overlap, L2 group {mib} MiB", "overlap", None, mib) for mib in (8, 32)]
    + [("gluon persistent", "persistent", None, None)],
    "b4-s1024-d128-causal": [(PLAIN[128][0], None, PLAIN[128][1], None), ("gluon overlap", "overlap", None, None),
                             ("gluon persistent", "persistent", None, None)],
}


def choose(module, head_dim: int, candidate: tuple, plans: dict) -> None:
    """Make attention() run this candidate, with plans of its own (kept in `plans` across rounds)."""
    label, gluon, plain, l2_mib = candidate
    launch = module._launch
    hopper = launch._hopper_launch
    hopper.BY_SIZE = {**hopper.BY_SIZE, head_dim: ((0, gluon),) if gluon else ()}
    hopper.TRAINING_LEAST = {}  # the candidate in training steps too
    if not gluon:
        block_n, stages, warps, ws = plain
        launch.SM90_CONFIGS[head_dim] = launch.make_config(block_n, stages, ws=ws, persistent=False, warps=warps)
    launch.L2_GROUP_BYTES = (l2_mib or 16) << 20
    sys.modules[module.__name__ + ".forward._forward_plans"]._FORWARD_PLANS = plans.setdefault(label, {})


def inputs(batch, heads, seq, head_dim, layout="bhsd", seed=0):
    gen = torch.Generator(device="cuda").manual_seed(seed)
    shape = (batch, heads, seq, head_dim) if layout == "bhsd" else (batch, seq, heads, head_dim)
    return [torch.randn(shape, device="cuda", generator=gen, dtype=torch.bfloat16) for _ in range(4)]


def _compile(task: tuple) -> str:
    """Worker: one candidate's forward at a small input of its shape's head dim, or (index None) a shipped
    forward and backward."""
    name, index = task
    watchdog = threading.Timer(WORKER_S, os._exit, (3,))  # a kernel that deadlocks never returns: end the worker
    watchdog.daemon = True
    watchdog.start()
    try:
        return _compile_one(name, index)
    finally:
        watchdog.cancel()


def _compile_one(name: str, index: int | None) -> str:
    module = load_flash_attn_triton()[0]
    batch, heads, seq, head_dim = SHAPES[name]
    q, k, v, dout = inputs(1, heads, seq, head_dim)
    try:
        if index is None:
            leaves = [t.requires_grad_() for t in (q, k, v)]
            step(lambda *t: module.attention(*t, causal=True), leaves, dout)()
        else:
            choose(module, head_dim, CANDIDATES[name][index], {})
            module.attention(q, k, v, causal=True)
        torch.cuda.synchronize()
        return ""
    except Exception as e:  # reported, and the candidate skipped
        label = "step" if index is None else CANDIDATES[name][index][0]
        return f"{name} {label}: {type(e).__name__}: {str(e)[-300:]}"


def precompile(tasks: list | None = None) -> set:
    """Compile every candidate (or those of `tasks`) in worker processes; the labels of those that failed."""
    if tasks is None:
        tasks = [(name, i) for name in SHAPES for i in range(len(CANDIDATES[name]))]
        tasks += [("b8-s1024-d64-causal", None), ("b16-s2048-d128-causal", None)]  # the backwards of the steps
    start = time.time()
    with concurrent.futures.ProcessPoolExecutor(14, mp_context=multiprocessing.get_context("spawn")) as pool:
        futures = {task: pool.submit(_compile, task) for task in tasks}
        failed = [_outcome(task, future) for task, future in futures.items()]
        failed = [why for why in failed if why]
    print(f"compiled {len(tasks)} candidates in {time.time() - start:.0f} s; {len(failed)} failed", flush=True)
    for why in failed:
        print("  compile failed:", why, flush=True)
    return {why.split(":")[0] for why in failed}


def _outcome(task: tuple, future) -> str:
    try:
        return future.result()
    except Exception as e:  # the worker ended (its watchdog, a crash): the pool is broken for the rest
        label = "step" if task[1] is None else CANDIDATES[task[0]][task[1]][0]
        return f"{task[0]} {label}: {type(e).__name__}"


def reference_error(out, q, k, v) -> float:
    worst = 0.0
    for b, h in ((0, 0), (q.shape[0] - 1, q.shape[1] - 1)):
        qh, kh, vh = (t[b, h].double() for t in (q, k, v))
        scores = (qh @ kh.T * q.shape[-1] ** -0.5).masked_fill(
            torch.ones(q.shape[2], k.shape[2], dtype=torch.bool, device=q.device).triu(1), float("-inf"))
        worst = max(worst, (out[b, h].double() - scores.softmax(-1) @ vh).abs().max().item())
    return worst


def device_ms(fn) -> float:
    return triton.testing.do_bench(fn, warmup=10, rep=40, return_mode="median")


def latency_us(fn, calls: int = CALLS, sync: bool = True) -> float:
    fn()
    torch.cuda.synchronize()
    start = time.perf_counter()
    for _ in range(calls):
        fn()
    if sync:
        torch.cuda.synchronize()
    return (time.perf_counter() - start) / calls * 1e6


def cudnn(q, k, v, **kw):
    with sdpa_kernel([SDPBackend.CUDNN_ATTENTION]):
        return torch.nn.functional.scaled_dot_product_attention(q, k, v, is_causal=True, **kw)


def alternate(fns: dict, measure, rounds: int = ROUNDS) -> dict:
    """Each (setup, function)'s median over alternating rounds (setup() before each measurement), and its
    speed against 'cudnn' (median of per-round ratios, with the range)."""
    times = {name: [] for name in fns}
    for _ in range(rounds):
        for name, (setup, fn) in fns.items():
            setup()
            times[name].append(measure(fn))
    result = {}
    for name, t in times.items():
        ratios = sorted(c / o for c, o in zip(times["cudnn"], t, strict=True))
        result[name] = {"median": statistics.median(t), "speed": ratios[len(ratios) // 2],
                        "speed_range": [ratios[0], ratios[-1]]}
    return result


def small_shape(module, name: str, failed: set, keep=lambda label: True, rounds: int = ROUNDS,
                latency_rounds: int = 3) -> dict:
    batch, heads, seq, head_dim = SHAPES[name]
    q, k, v, _ = inputs(batch, heads, seq, head_dim)
    plans, errors = {}, {"cudnn": reference_error(cudnn(q, k, v), q, k, v)}
    fns = {"cudnn": (lambda: None, lambda: cudnn(q, k, v))}
    for candidate in CANDIDATES[name]:
        if f"{name} {candidate[0]}" in failed or not keep(candidate[0]):
            continue
        choose(module, head_dim, candidate, plans)
        torch.full_like(q, float("nan"))  # freed at once: an output row left unwritten likely reads NaN
        errors[candidate[0]] = reference_error(module.attention(q, k, v, causal=True), q, k, v)
        fns[candidate[0]] = (lambda c=candidate: choose(module, head_dim, c, plans),
                             lambda: module.attention(q, k, v, causal=True))
    return {"device_ms": alternate(fns, device_ms, rounds), "latency_us": alternate(fns, latency_us, latency_rounds),
            "error": errors}


def print_small(name: str, r: dict) -> None:
    print(f"\n== {name} (bf16, causal): device ms / speed vs cuDNN (range); latency us / speed; max abs error")
    for label, d in sorted(r["device_ms"].items(), key=lambda kv: kv[1]["median"]):
        lat = r["latency_us"][label]
        print(f"  {label:<34} {d['median'] * 1e3:7.1f} us {d['speed']:.3f} ({d['speed_range'][0]:.3f}-"
              f"{d['speed_range'][1]:.3f})  {lat['median']:7.1f} us {lat['speed']:.3f}  err {r['error'][label]:.2e}",
              flush=True)


def restore(module, shipped: tuple) -> None:
    """The shipped choices back, with fresh plans."""
    hopper = module._launch._hopper_launch
    hopper.BY_SIZE, plain, module._launch.L2_GROUP_BYTES, hopper.TRAINING_LEAST = shipped
    module._launch.SM90_CONFIGS.update(plain)
    sys.modules[module.__name__ + ".forward._forward_plans"]._FORWARD_PLANS = {}


def step(forward, leaves, dout):
    return lambda: torch.autograd.grad(forward(*leaves), leaves, dout)


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--out", type=Path, default=Path("."))
    args = parser.parse_args()
    import triton_small_sections as sections  # it imports this module: not at the top

    module, how = load_flash_attn_triton()
    print(f"{torch.cuda.get_device_name()}, torch {torch.__version__}, triton {triton.__version__}, "
          f"cuDNN {torch.backends.cudnn.version()}; kernel {how}", flush=True)
    hopper = module._launch._hopper_launch
    launch = module._launch
    shipped = (hopper.BY_SIZE, dict(launch.SM90_CONFIGS), launch.L2_GROUP_BYTES, hopper.TRAINING_LEAST)
    failed = precompile()
    results = {}
    args.out.mkdir(parents=True, exist_ok=True)

    def save():
        (args.out / "triton_small.json").write_text(json.dumps(results, indent=1))

    # most wanted first: a call cut short by its limit still leaves these
    results["b8-s1024-d64-causal"] = small_shape(module, "b8-s1024-d64-causal", failed)
    print_small("b8-s1024-d64-causal", results["b8-s1024-d64-causal"])
    save()
    restore(module, shipped)
    results["layouts-b4-s4096-h16-d128"] = sections.layouts(module, 4, 4096, 16, 128)
    sections.print_layouts("layouts-b4-s4096-h16-d128", results["layouts-b4-s4096-h16-d128"])
    save()
    sections.steps_at_the_article(module, shipped, results, args.out)
    save()
    for name in ("b16-s2048-d128-causal", "b4-s1024-d128-causal"):
        results[name] = small_shape(module, name, failed)
        print_small(name, results[name])
        save()
    restore(module, shipped)
    results["host_us_per_forward"] = sections.host_cost(module)
    print("\nhost us per forward, B1 H2 S128 D64:", {n: round(r["median"], 1)
                                                     for n, r in results["host_us_per_forward"].items()}, flush=True)
    restore(module, shipped)
    results["layouts-b8-s1024-h16-d64"] = sections.layouts(module, 8, 1024, 16, 64)
    sections.print_layouts("layouts-b8-s1024-h16-d64", results["layouts-b8-s1024-h16-d64"])
    save()


if __name__ == "__main__":
    main()
