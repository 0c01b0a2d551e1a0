"""attnprof's Triton backward against cuDNN's (SDPA's cuDNN backend), in one process, alternating rounds:
backward alone, the whole step (forward + backward), the step's peak memory, and gradient errors
against float64 next to cuDNN's; for the default backward ("ours": the warp-specialised Gluon single pass
where it applies on sm_90, else the two-pass one) and one column for each FLASH_ATTN_TRITON_ATOMIC_DQ value
--single names (0: the two-pass backward; 1: the plain Triton single pass; gluon: the Gluon kernel wherever
it applies). With --sweep, every backward configuration in sweep_configs() first.

    PYTHONPATH=src python3 benchmarks/kernel/triton_backward.py --out DIR [--only NAME,NAME] [--sweep NAME,NAME]
        [--single 0,gluon]

Times are medians of triton.testing.do_bench (CUDA events, after warm-up); the speed is cuDNN's time over
ours (> 1: ours faster), the median of ROUNDS per-round ratios with their range. Every kernel is compiled
first in parallel worker processes (Triton's disk cache then serves this one). Errors: the first and the
last (batch, head) of a shape, float64 gradients of that head on the GPU; max abs error over dQ, dK, dV.
--sweep times every configuration in sweep_configs() at the shapes named (and every plain forward
configuration at those of FORWARD_SWEEP).
Writes DIR/triton_backward.json after each shape and prints one line per shape.
"""

from __future__ import annotations

import argparse
import concurrent.futures
import json
import multiprocessing
import os
import statistics
import sys
from pathlib import Path

import torch
import triton
from torch.nn.attention import SDPBackend, sdpa_kernel
from triton.runtime.errors import OutOfResources

sys.path.insert(0, str(Path(__file__).resolve().parent))
from triton_kernel_path import load_flash_attn_triton  # noqa: E402

ROUNDS = 5
ATOMIC_DQ = "FLASH_ATTN_TRITON_ATOMIC_DQ"
SINGLE_VALUES = ("0", "1", "gluon")  # what a --single column sets the variable to
WHO = ["cudnn", "ours"]  # ours: the default backward; then ATOMIC_DQ=VALUE per --single value
SHAPES = {  # batch, heads, seq, head_dim, causal
    "s4096-d128-causal": (4, 16, 4096, 128, True), "s4096-d128": (4, 16, 4096, 128, False),
    "s8192-d128-causal": (4, 16, 8192, 128, True), "s8192-d128": (4, 16, 8192, 128, False),
    "s4096-d64-causal": (4, 16, 4096, 64, True), "b16-s2048-d128-causal": (16, 16, 2048, 128, True),
    "b8-s1024-d64-causal": (8, 16, 1024, 64, True), "s2048-d128-causal": (4, 16, 2048, 128, True),
    "s2048-d128": (4, 16, 2048, 128, False), "b8-s2048-d64-causal": (8, 16, 2048, 64, True),
}


def sweep_configs(module, head_dim: int) -> list[tuple[str, tuple]]:
    """(strategy, configuration): the two-pass backward's shipped one and the single pass's candidates
    (block_m, block_n, warps, stages), the ones with the fewest spills in sm_90 compiles."""
    single = module.backward._backward_single.SingleConfig
    candidates = {128: [single(64, 64, 8, 3), single(64, 64, 8, 2), single(64, 128, 8, 2), single(64, 128, 8, 1),
                        single(32, 128, 8, 2)],
                  64: [single(64, 128, 8, 2), single(64, 128, 8, 3), single(64, 64, 4, 3), single(32, 128, 4, 2),
                       single(64, 64, 8, 3)]}[head_dim]
    return [("_backward", module.backward._backward.CONFIGS[head_dim])] + [("_backward_single", c) for c in candidates]


def inputs(shape: tuple, seed: int = 0):
    batch, heads, seq, head_dim, _ = shape
    gen = torch.Generator(device="cuda").manual_seed(seed)
    q, k, v, dout = (torch.randn(batch, heads, seq, head_dim, device="cuda", generator=gen, dtype=torch.bfloat16)
                     for _ in range(4))
    return [t.requires_grad_() for t in (q, k, v)], dout


FORWARD_SWEEP = ("b8-s1024-d64-causal", "b16-s2048-d128-causal")  # small problems: which plain config wins


def _compile(task: tuple) -> str:
    """Worker: compile one backward configuration, or one plain forward configuration, for a shape;
    what failed (a configuration that does not fit) is reported, not raised."""
    try:
        return _compile_one(*task)
    except Exception as e:
        return f"{task}: {type(e).__name__}: {str(e)[:200]}"


def _compile_one(kind: str, name: str, index: int | None, singles: tuple = ()) -> str:
    module = load_flash_attn_triton()[0]
    batch, heads, seq, head_dim, causal = SHAPES[name]
    (q, k, v), dout = inputs((1, 1, seq, head_dim, causal))
    if kind == "fwd":
        module._launch.compile_config(q, k, v, causal, module._launch.candidate_configs()[index])
        return name
    out, lse = torch.randn_like(dout), torch.randn(1, 1, seq, device="cuda")  # values do not matter to a compile
    runs = [(s, getattr(module.backward, s).CONFIGS[head_dim]) for s in ("_backward", "_backward_single")]
    for strategy, config in runs if index is None else [sweep_configs(module, head_dim)[index]]:
        getattr(module.backward, strategy).backward(q, k, v, out, lse, dout, sm_scale=head_dim ** -0.5,
                                                    causal=causal, causal_off=0, config=config)
    for value in singles:  # the Gluon kernels, chosen by the variable
        os.environ[ATOMIC_DQ] = value
        module.backward._backward_single.backward(q, k, v, out, lse, dout, sm_scale=head_dim ** -0.5, causal=causal,
                                         causal_off=0, config=module.backward._backward_single.CONFIGS[head_dim])
        os.environ.pop(ATOMIC_DQ)
    torch.cuda.synchronize()
    return name


def precompile(names: list[str], swept: list[str], singles: list[str]) -> None:
    module = load_flash_attn_triton()[0]
    tasks = [("bwd", n, None, tuple(singles)) for n in names]
    tasks += [("bwd", n, i) for n in swept for i in range(len(sweep_configs(module, SHAPES[n][3])))]
    forwards = range(len(module._launch.candidate_configs()))
    tasks += [("fwd", n, i) for n in swept if n in FORWARD_SWEEP for i in forwards]
    context = multiprocessing.get_context("spawn")
    with concurrent.futures.ProcessPoolExecutor(max_workers=14, mp_context=context) as pool:
        for outcome in pool.map(_compile, tasks):
            if outcome not in SHAPES:
                print(f"compile failed: {outcome}", flush=True)


def step_fns(module, shape, q, k, v, dout):
    causal = shape[-1]

    def cudnn():
        with sdpa_kernel([SDPBackend.CUDNN_ATTENTION]):
            return torch.nn.functional.scaled_dot_product_attention(q, k, v, is_causal=causal)

    def ours():
        return module.attention(q, k, v, causal=causal)


    def backward_of(fwd):
        out = fwd()
        return lambda: torch.autograd.grad(out, (q, k, v), dout, retain_graph=True)

    def step_of(fwd):
        return lambda: torch.autograd.grad(fwd(), (q, k, v), dout)

    fns = {"cudnn": (backward_of(cudnn), step_of(cudnn), cudnn), "ours": (backward_of(ours), step_of(ours), ours)}
    for who in WHO[2:]:
        fns[who] = tuple(atomic_dq(fn, who) for fn in (backward_of(ours), step_of(ours), ours))
    return fns


def atomic_dq(fn, who: str):
    """fn with the backward of column who (ATOMIC_DQ=VALUE) chosen while it runs."""
    def call():
        os.environ[ATOMIC_DQ] = who.removeprefix("ATOMIC_DQ=")
        try:
            return fn()
        finally:
            os.environ.pop(ATOMIC_DQ)
    return call


def peak_step_mib(step) -> float:
    torch.cuda.synchronize()
    before = torch.cuda.memory_allocated()
    torch.cuda.reset_peak_memory_stats()
    step()
    torch.cuda.synchronize()
    return (torch.cuda.max_memory_allocated() - before) / 2**20


def grad_errors(module, shape, q, k, v, dout) -> dict:
    """Max abs error of (dQ, dK, dV) against float64 on the first and last (batch, head), ours and cuDNN's."""
    causal = shape[-1]
    errors = dict.fromkeys(WHO, 0.0)
    for b, h in ((0, 0), (shape[0] - 1, shape[1] - 1)):
        qs, ks, vs = (t.detach()[b:b + 1, h:h + 1].clone().requires_grad_() for t in (q, k, v))
        ds = dout[b:b + 1, h:h + 1]
        ref = [t.detach().double().requires_grad_() for t in (qs, ks, vs)]
        want = torch.autograd.grad(torch.nn.functional.scaled_dot_product_attention(*ref, is_causal=causal),
                                   ref, ds.double())
        with sdpa_kernel([SDPBackend.CUDNN_ATTENTION]):
            theirs = torch.autograd.grad(torch.nn.functional.scaled_dot_product_attention(
                qs, ks, vs, is_causal=causal), (qs, ks, vs), ds)
        ours = torch.autograd.grad(module.attention(qs, ks, vs, causal=causal), (qs, ks, vs), ds)
        leaves = (qs, ks, vs)
        got_by = {"ours": ours, "cudnn": theirs}
        for who in WHO[2:]:
            got_by[who] = atomic_dq(lambda t=leaves, d=ds: torch.autograd.grad(
                module.attention(*t, causal=causal), t, d), who)()
        for name, got in got_by.items():
            err = max((g.double() - w).abs().max().item() for g, w in zip(got, want, strict=True))
            errors[name] = max(errors[name], err)
    return errors


def bench(fn) -> float | None:
    """Median ms, or None for a configuration that cannot launch (out of shared memory)."""
    try:
        return triton.testing.do_bench(fn, warmup=25, rep=100, return_mode="median")
    except OutOfResources:
        return None


def measure_shape(module, name: str, configs: list) -> dict:
    shape = SHAPES[name]
    (q, k, v), dout = inputs(shape)
    fns = step_fns(module, shape, q, k, v, dout)
    rounds = {f"{who}_{part}": [] for who in WHO for part in ("bwd", "step")}
    for _ in range(ROUNDS):
        for who in WHO:
            rounds[f"{who}_bwd"].append(bench(fns[who][0]))
            rounds[f"{who}_step"].append(bench(fns[who][1]))
    result = {"shape": shape, "ms": {key: statistics.median(v) for key, v in rounds.items()}}
    for who in WHO[1:]:
        for part in ("bwd", "step"):
            ratios = sorted(c / o for c, o in zip(rounds[f"cudnn_{part}"], rounds[f"{who}_{part}"], strict=True))
            prefix = "" if who == "ours" else f"{who}_"
            result[f"{prefix}{part}_speed"] = {"median": statistics.median(ratios), "min": ratios[0], "max": ratios[-1]}
    result["peak_step_mib"] = {who: peak_step_mib(fns[who][1]) for who in WHO}
    result["grad_max_abs_error"] = grad_errors(module, shape, q, k, v, dout)
    if configs:
        result["sweep_bwd_ms"] = sweep(module, shape, q, k, v, dout, configs)
    if configs and name in FORWARD_SWEEP:
        result["sweep_fwd_ms"] = {str(c): bench(lambda c=c: module._launch.forward(
            q.detach(), k.detach(), v.detach(), causal=shape[-1], sm_scale=None, config=c))
            for c in module._launch.candidate_configs()}
        result["sweep_fwd_ms"]["cudnn"] = bench(lambda: fns["cudnn"][2]())
    return result


def sweep(module, shape, q, k, v, dout, configs) -> dict:
    causal = shape[-1]
    out, lse = module._launch.forward(q.detach(), k.detach(), v.detach(), causal=causal, sm_scale=None)
    timed = {}
    for strategy, config in configs:
        timed[f"{strategy}{tuple(config)}"] = bench(lambda s=strategy, c=config: getattr(module.backward, s).backward(
            q, k, v, out, lse, dout, sm_scale=shape[3] ** -0.5, causal=causal, causal_off=0, config=c))
    return timed


def speed_text(speed: dict) -> str:
    return f"{speed['median']:.3f} ({speed['min']:.3f}-{speed['max']:.3f})"


def main() -> None:
    parser = argparse.ArgumentParser()
    parser.add_argument("--out", type=Path, required=True)
    parser.add_argument("--only", default=",".join(SHAPES))
    parser.add_argument("--sweep", default="", help="shapes at which to time every configuration")
    parser.add_argument("--single", default="0", help="more columns by their FLASH_ATTN_TRITON_ATOMIC_DQ, "
                        "comma-separated (0: two-pass; 1: plain Triton single pass; gluon: the Gluon kernel, sm_90)")
    args = parser.parse_args()
    singles = [v for v in args.single.split(",") if v]
    if any(v not in SINGLE_VALUES for v in singles):
        parser.error(f"--single takes {', '.join(SINGLE_VALUES)}")
    WHO.extend(f"ATOMIC_DQ={v}" for v in singles)
    names = args.only.split(",")
    module, how = load_flash_attn_triton()
    swept = [n for n in args.sweep.split(",") if n]
    precompile(names, swept, ["gluon"])  # the default's Gluon kernel, compiled in a worker like the others
    results = {"how_loaded": how, "device": torch.cuda.get_device_name(), "torch": torch.__version__,
               "triton": triton.__version__, "shapes": {}}
    for name in names:
        configs = sweep_configs(module, SHAPES[name][3]) if name in swept else []
        r = results["shapes"][name] = measure_shape(module, name, configs)
        ms, bwd, step = r["ms"], r["bwd_speed"], r["step_speed"]
        singles_text = "".join(
            f"; {who} bwd {ms[f'{who}_bwd']:.3f} speed {speed_text(r[f'{who}_bwd_speed'])} step "
            f"{ms[f'{who}_step']:.3f} speed {speed_text(r[f'{who}_step_speed'])}" for who in WHO[2:])
        print(f"{name}: bwd cuDNN {ms['cudnn_bwd']:.3f} ours {ms['ours_bwd']:.3f} ms speed {speed_text(bwd)}; "
              f"step cuDNN {ms['cudnn_step']:.3f} ours {ms['ours_step']:.3f} speed {speed_text(step)}{singles_text}; "
              f"peak MiB {r['peak_step_mib']}; errors {r['grad_max_abs_error']}; "
              f"sweep {r.get('sweep_bwd_ms')} fwd {r.get('sweep_fwd_ms')}", flush=True)
        args.out.mkdir(parents=True, exist_ok=True)
        (args.out / "triton_backward.json").write_text(json.dumps(results, indent=1))


if __name__ == "__main__":
    main()
