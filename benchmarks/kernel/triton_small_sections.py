"""The sections of benchmarks/kernel/triton_small.py beyond the candidates: what the caller's [B, S, H, D] layout
costs, the host cost per forward at a tiny shape, and where a training step's time goes at the article's
problem (latency, host time, synchronising calls, a profile). triton_small.py's main() runs them.

Alone, it runs the step on the caller's layout (layout_step) at B4 S4096 H16 D128 causal, bf16:

    PYTHONPATH=src python3 benchmarks/kernel/triton_small_sections.py --layout-step --out DIR
"""

from __future__ import annotations

import argparse
import collections
import json
import sys
from pathlib import Path

import torch

sys.path.insert(0, str(Path(__file__).resolve().parent))
import triton_small as small  # noqa: E402


def print_layouts(name: str, r: dict) -> None:
    print(f"\n== {name} (bf16, causal): forward device us (speed vs cuDNN), forward latency us, step device us")
    for label, d in r["forward_device_ms"].items():
        s = r["step_device_ms"].get(label)
        step_text = f"{s['median'] * 1e3:8.1f} ({s['speed']:.3f})" if s else "-"
        latency = r["forward_latency_us"][label]["median"]
        print(f"  {label:<36} {d['median'] * 1e3:8.1f} ({d['speed']:.3f})  {latency:8.1f}  {step_text}"
              f"  err {r['error'].get(label, float('nan')):.2e}", flush=True)


def layouts(module, batch, seq, heads, head_dim) -> dict:
    """flash_attn_func on [B, S, H, D] (read where it lies) against the copies it made before, attention() on
    contiguous [B, H, S, D] (the kernel alone) and cuDNN on the same [B, S, H, D] memory (SDPA on views)."""
    q, k, v, dout = small.inputs(batch, heads, seq, head_dim, layout="bshd")
    qc, kc, vc = (t.transpose(1, 2).contiguous() for t in (q, k, v))
    forwards = {  # each takes and returns [B, S, H, D]
        "cudnn": lambda q, k, v: small.cudnn(q.transpose(1, 2), k.transpose(1, 2), v.transpose(1, 2)).transpose(1, 2),
        "flash_attn_func bshd": lambda q, k, v: module.flash_attn_func(q, k, v, causal=True),
        "bshd copied to bhsd first (before)": lambda q, k, v: module.attention(
            *(t.transpose(1, 2).contiguous() for t in (q, k, v)), causal=True).transpose(1, 2),
    }
    none = lambda: None  # noqa: E731
    fwd = {name: (none, lambda f=f: f(q, k, v)) for name, f in forwards.items()}
    errors = {name: small.reference_error(f().transpose(1, 2), qc, kc, vc) for name, (_, f) in fwd.items()}
    fwd["attention bhsd (kernel alone)"] = (none, lambda: module.attention(qc, kc, vc, causal=True))
    leaves = [t.requires_grad_() for t in (q, k, v)]
    steps = {name: (none, small.step(f, leaves, dout)) for name, f in forwards.items()}
    return {"forward_device_ms": small.alternate(fwd, small.device_ms),
            "forward_latency_us": small.alternate(fwd, small.latency_us, 3),
            "step_device_ms": small.alternate(steps, small.device_ms, 3), "error": errors}


def step_time(module, label: str) -> dict:
    """At the article's problem: a step's latency (one sync per CALLS steps), its host time (no sync), the
    forward's, whether anything in it synchronises (torch's sync debug mode), and a profile of 10 steps."""
    import warnings

    q, k, v, dout = small.inputs(*small.SHAPES["b8-s1024-d64-causal"])
    leaves = [t.requires_grad_() for t in (q, k, v)]
    none = lambda: None  # noqa: E731
    steps = {"cudnn": (none, small.step(lambda *t: small.cudnn(*t), leaves, dout)),
             label: (none, small.step(lambda *t: module.attention(*t, causal=True), leaves, dout))}
    result = {"step_latency_us": small.alternate(steps, lambda f: small.latency_us(f, 200), 3),
              "step_host_us": small.alternate(steps, lambda f: small.latency_us(f, 100, sync=False), 3)}
    torch.cuda.synchronize()
    with warnings.catch_warnings(record=True) as seen:
        warnings.simplefilter("always")
        torch.cuda.set_sync_debug_mode(1)
        for _ in range(3):
            steps[label][1]()
        torch.cuda.set_sync_debug_mode(0)
    result["synchronising_calls"] = sorted({str(w.message)[:200] for w in seen})
    acts = [torch.profiler.ProfilerActivity.CPU, torch.profiler.ProfilerActivity.CUDA]
    with torch.profiler.profile(activities=acts) as prof:
        for _ in range(10):
            steps[label][1]()
        torch.cuda.synchronize()
    result["profile"] = prof.key_averages().table(sort_by="self_cpu_time_total", row_limit=25,
                                                  max_name_column_width=70)
    return result


def host_cost(module) -> dict:
    """Host us per forward at B1 H2 S128 D64 (the GPU always waits): cuDNN, the plain kernel, the Gluon one."""
    q, k, v, _ = small.inputs(1, 2, 128, 64)
    plans = {}
    fns = {"cudnn": (lambda: None, lambda: small.cudnn(q, k, v)),
           "plain": (lambda: small.choose(module, 64, small.CANDIDATES["b8-s1024-d64-causal"][0], plans),
                     lambda: module.attention(q, k, v, causal=True)),
           "gluon overlap": (lambda: small.choose(module, 64, ("gluon overlap", "overlap", None, None), plans),
                             lambda: module.attention(q, k, v, causal=True))}
    return small.alternate(fns, lambda f: small.latency_us(f, 500, sync=False))


def steps_at_the_article(module, shipped: tuple, results: dict, out: Path) -> None:
    """The step with the shipped forward and with the fastest candidate at the article's problem."""
    article, candidates = results["b8-s1024-d64-causal"]["device_ms"], small.CANDIDATES["b8-s1024-d64-causal"]
    best = min((c for c in candidates if c[0] in article), key=lambda c: article[c[0]]["median"])
    for candidate in dict.fromkeys([candidates[0], best]):
        small.restore(module, shipped)
        small.choose(module, 64, candidate, {})
        r = results[f"step {candidate[0]}"] = step_time(module, candidate[0])
        print(f"\n== step at the article's problem with {candidate[0]}: latency us "
              f"{ {n: round(x['median'], 1) for n, x in r['step_latency_us'].items()} }, host us (no sync) "
              f"{ {n: round(x['median'], 1) for n, x in r['step_host_us'].items()} }; synchronising calls: "
              f"{r['synchronising_calls']}", flush=True)
        (out / f"profile_{len(results)}.txt").write_text(r["profile"])


def layout_step(module, batch: int, seq: int, heads: int, head_dim: int) -> dict:
    """A training step's device time (forward + backward) on [B, S, H, D] memory, read and written where it lies
    (flash_attn_func), against the same step on contiguous [B, H, S, D] leaves copied before the timing (the
    kernel alone: what no copy inside the step should reach) and cuDNN on the same [B, S, H, D] views, in
    alternating rounds; and the GPU kernels one [B, S, H, D] step launches (a copy would show as its own kernel)."""
    q, k, v, dout = small.inputs(batch, heads, seq, head_dim, layout="bshd")
    leaves = [t.requires_grad_() for t in (q, k, v)]
    copied = [t.detach().transpose(1, 2).contiguous().requires_grad_() for t in (q, k, v)]
    none = lambda: None  # noqa: E731
    steps = {
        "cudnn": (none, small.step(lambda *t: small.cudnn(*(x.transpose(1, 2) for x in t)).transpose(1, 2),
                                   leaves, dout)),
        "flash_attn_func bshd, in place": (none, small.step(lambda *t: module.flash_attn_func(*t, causal=True),
                                                            leaves, dout)),
        "attention bhsd, copied before": (none, small.step(lambda *t: module.attention(*t, causal=True), copied,
                                                           dout.transpose(1, 2).contiguous())),
    }
    result = {"step_device_ms": small.alternate(steps, small.device_ms)}
    steps["flash_attn_func bshd, in place"][1]()
    torch.cuda.synchronize()
    with torch.profiler.profile(activities=[torch.profiler.ProfilerActivity.CUDA]) as prof:
        steps["flash_attn_func bshd, in place"][1]()
        torch.cuda.synchronize()
    kernels = collections.Counter(e.name for e in prof.events() if e.device_type == torch.autograd.DeviceType.CUDA)
    result["kernels_per_bshd_step"] = dict(sorted(kernels.items()))
    return result


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--layout-step", action="store_true", help="the step on [B, S, H, D] (the only part so far)")
    parser.add_argument("--out", type=Path, default=Path("."))
    args = parser.parse_args()
    if not args.layout_step:
        parser.error("nothing to run: pass --layout-step (benchmarks/kernel/triton_small.py runs the other sections)")
    module, how = small.load_flash_attn_triton()
    print(f"{torch.cuda.get_device_name()}, torch {torch.__version__}, kernel {how}", flush=True)
    r = layout_step(module, 4, 4096, 16, 128)
    print("\n== step on [B, S, H, D], B4 S4096 H16 D128 causal bf16: device us (speed vs cuDNN, range)")
    for label, d in r["step_device_ms"].items():
        print(f"  {label:<34} {d['median'] * 1e3:8.1f} ({d['speed']:.3f}, {d['speed_range'][0]:.3f}-"
              f"{d['speed_range'][1]:.3f})")
    print("GPU kernels of one [B, S, H, D] step:", r["kernels_per_bshd_step"], flush=True)
    args.out.mkdir(parents=True, exist_ok=True)
    (args.out / "triton_layout_step.json").write_text(json.dumps(r, indent=1))


if __name__ == "__main__":
    main()
