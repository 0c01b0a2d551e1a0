"""attnprof's attention kernels on the GPU: every configuration of the plain Triton kernel and of the Gluon
(Hopper) forward, attention() as users call it, the tutorial-style baseline, cuDNN and flash, side by
side, with each one's max abs error against float64; then attention() against cuDNN in alternating
rounds (the headline: median of the per-round speed ratios, with their range).

    PYTHONPATH=src python3 benchmarks/kernel/triton_attention.py --out DIR [--only NAME,NAME]

Times are medians of triton.testing.do_bench (CUDA events, after warm-up). Errors are measured on two
(batch, head) pairs of every shape, the first and the last, against float64 attention; before each
checked run a NaN-filled block of the output's size is freed, so a row left unwritten shows as NaN.
All configurations are compiled first, without running, in parallel worker processes (Triton's
on-disk cache then serves the timing process). Within a shape the library kernels and the plain
configurations run before the warp-specialised ones, and a watchdog stops the run, naming the
configuration, if one call does not finish in WATCHDOG_S seconds (a kernel that deadlocks hangs the
GPU stream forever). Writes DIR/triton_attention.json after each shape; prints one table per shape.
"""

from __future__ import annotations

import argparse
import concurrent.futures
import json
import multiprocessing
import os
import sys
import threading
import time
from dataclasses import asdict, dataclass
from pathlib import Path

import torch
import triton
from torch.nn.attention import SDPBackend, sdpa_kernel

sys.path.insert(0, str(Path(__file__).resolve().parent))
import triton_baseline  # noqa: E402
from triton_kernel_path import load_flash_attn_triton  # noqa: E402

DTYPES = {"bf16": torch.bfloat16, "fp16": torch.float16}
WATCHDOG_S = 60  # one call with its timing loop; the slowest shape takes well under 5 s
WATCHDOG = None  # set by main()


@dataclass(frozen=True)
class Shape:
    name: str
    batch: int
    heads: int
    kv_heads: int
    seq: int
    head_dim: int
    causal: bool
    dtype: str = "bf16"

    def tflop(self) -> float:
        flops = 4 * self.batch * self.heads * self.seq**2 * self.head_dim
        return flops / (2 if self.causal else 1) / 1e12

    def compile_class(self) -> tuple:
        """What the compiled kernels depend on (lengths only through their divisibility by 16)."""
        return self.heads, self.kv_heads, self.head_dim, self.causal, self.dtype


SHAPES = [
    Shape("s4096-d128-causal", 4, 16, 16, 4096, 128, True),
    Shape("s4096-d128", 4, 16, 16, 4096, 128, False),
    Shape("s8192-d128-causal", 4, 16, 16, 8192, 128, True),
    Shape("s8192-d128", 4, 16, 16, 8192, 128, False),
    Shape("s4096-d64-causal", 4, 16, 16, 4096, 64, True),
    Shape("s8192-d64-causal", 4, 16, 16, 8192, 64, True),
    Shape("b8-s1024-d64-causal", 8, 16, 16, 1024, 64, True),
    Shape("s1024-d128-causal", 4, 16, 16, 1024, 128, True),
    Shape("s4096-d128-causal-fp16", 4, 16, 16, 4096, 128, True, "fp16"),
    Shape("gqa32-8-b2-s2048-d128-causal", 2, 32, 8, 2048, 128, True),
]


def inputs(shape: Shape, seq: int | None = None, batch: int | None = None, seed: int = 0):
    gen = torch.Generator(device="cuda").manual_seed(seed)
    seq, batch = seq or shape.seq, batch or shape.batch
    dtype = DTYPES[shape.dtype]

    def make(heads):
        return torch.randn(batch, heads, seq, shape.head_dim, device="cuda", generator=gen).to(dtype)

    return make(shape.heads), make(shape.kv_heads), make(shape.kv_heads)


def our_configs(kernel, shape: Shape) -> list[triton.Config]:
    launch = kernel._launch
    return [c for c in launch.candidate_configs() if shape.head_dim in launch.head_dims_of(c)]


def baseline_configs(shape: Shape) -> list[triton.Config]:
    return triton_baseline._short_enough(triton_baseline.tutorial_configs(), None, N_CTX=shape.seq,
                                         STAGE=3 if shape.causal else 1)


def compile_task(task):
    """Worker: compile one configuration for a small input of the same compile class; nothing runs."""
    shape, who, index = task
    kernel, _ = load_flash_attn_triton()
    q, k, v = inputs(shape, seq=256, batch=1)
    try:
        if who == "ours":
            kernel._launch.compile_config(q, k, v, shape.causal, our_configs(kernel, shape)[index])
        else:
            triton_baseline.attention(q, k, v, shape.causal, config=baseline_configs(shape)[index], compile_only=True)
        return task, None
    except Exception as e:  # a configuration that cannot compile is reported, not fatal
        return task, f"{type(e).__name__}: {str(e)[:160]}"


def precompile(kernel, shapes: list[Shape], workers: int) -> dict:
    classes = {s.compile_class(): s for s in shapes}.values()
    tasks = [(s, "ours", i) for s in classes for i in range(len(our_configs(kernel, s)))]
    tasks += [(s, "baseline", i) for s in classes if s.heads == s.kv_heads for i in range(len(baseline_configs(s)))]
    start = time.time()
    context = multiprocessing.get_context("spawn")
    with concurrent.futures.ProcessPoolExecutor(workers, mp_context=context) as pool:
        failures = {(t[0].compile_class(), t[1], t[2]): why for t, why in pool.map(compile_task, tasks) if why}
    print(f"compiled {len(tasks)} kernels in {time.time() - start:.0f} s with {workers} workers; "
          f"{len(failures)} failed", flush=True)
    for key, why in failures.items():
        print(f"  compile failed {key}: {why}", flush=True)
    return failures


class Watchdog:
    """Ends the process, naming the call, when one call runs longer than `limit_s` (a deadlocked
    kernel never returns); results already written stay on disk."""

    def __init__(self, limit_s: float):
        self.limit_s, self.label, self.since = limit_s, None, None
        threading.Thread(target=self._watch, daemon=True).start()

    def start(self, label: str) -> None:
        self.label, self.since = label, time.monotonic()

    def stop(self) -> None:
        self.since = None

    def _watch(self) -> None:
        while True:
            time.sleep(1)
            since = self.since
            if since is not None and time.monotonic() - since > self.limit_s:
                print(f"\nWATCHDOG: {self.label} ran over {self.limit_s:.0f} s; stopping", flush=True)
                os._exit(3)


def median_ms(fn) -> float:
    return triton.testing.do_bench(fn, warmup=10, rep=60, return_mode="median")


def references(q, k, v, causal: bool) -> dict:
    """float64 outputs for the first and the last (batch, head) pair."""
    group = q.shape[1] // k.shape[1]
    refs = {}
    for b, h in ((0, 0), (q.shape[0] - 1, q.shape[1] - 1)):
        qh, kh, vh = q[b, h].double(), k[b, h // group].double(), v[b, h // group].double()
        scores = qh @ kh.T * q.shape[-1] ** -0.5
        if causal:
            scores.masked_fill_(torch.ones_like(scores, dtype=torch.bool).triu(1), float("-inf"))
        refs[b, h] = scores.softmax(-1) @ vh
        del scores
    return refs


def max_error(run, q, refs: dict) -> float:
    torch.full_like(q, float("nan"))  # freed at once: the output below likely reuses this block
    out = run()
    return max((out[b, h].double() - want).abs().max().item() for (b, h), want in refs.items())


def measure(label, run, q, refs, shape: Shape) -> dict:
    WATCHDOG.start(label)
    try:
        error = max_error(run, q, refs)
        ms = median_ms(run)
    except Exception as e:
        return {"label": label, "error": f"{type(e).__name__}: {str(e)[:120]}"}
    finally:
        WATCHDOG.stop()
    return {"label": label, "ms": ms, "tflops": shape.tflop() / (ms / 1e3), "max_abs_err": error}


def sdpa(backend, shape: Shape):
    gqa = shape.heads != shape.kv_heads

    def run(q, k, v):
        with sdpa_kernel(backend):
            return torch.nn.functional.scaled_dot_product_attention(q, k, v, is_causal=shape.causal, enable_gqa=gqa)

    return run


def bench_shape(kernel, shape: Shape, failures: dict) -> list[dict]:
    q, k, v = inputs(shape)
    refs = references(q, k, v, shape.causal)
    rows = [measure("cuDNN", lambda: sdpa(SDPBackend.CUDNN_ATTENTION, shape)(q, k, v), q, refs, shape),
            measure("flash", lambda: sdpa(SDPBackend.FLASH_ATTENTION, shape)(q, k, v), q, refs, shape)]
    if shape.heads == shape.kv_heads:
        for i, c in enumerate(baseline_configs(shape)):
            if (shape.compile_class(), "baseline", i) not in failures:
                rows.append(measure("tutorial " + config_label(c),
                                    lambda c=c: triton_baseline.attention(q, k, v, shape.causal, config=c),
                                    q, refs, shape))
    forward = kernel._launch.forward
    configs = list(enumerate(our_configs(kernel, shape)))
    for i, c in sorted(configs, key=lambda ic: ic[1].kwargs["WARP_SPECIALIZE"]):  # plain ones first
        label = "ours plain-triton " + config_label(c)
        if (shape.compile_class(), "ours", i) in failures:
            rows.append({"label": label, "error": failures[shape.compile_class(), "ours", i]})
            continue
        row = measure(label, lambda c=c: forward(q, k, v, causal=shape.causal, sm_scale=None, config=c)[0],
                      q, refs, shape)
        rows.append({**row, "config": {**c.kwargs, "num_warps": c.num_warps, "num_stages": c.num_stages}})
    rows += hopper_rows(kernel, shape, q, k, v, refs)
    rows.append(measure("ours attention()", lambda: kernel.attention(q, k, v, causal=shape.causal), q, refs, shape))
    return rows


def hopper_rows(kernel, shape: Shape, q, k, v, refs) -> list[dict]:
    """The Gluon (Hopper) forward in each of its configurations, where it applies."""
    launch = kernel._launch
    if launch._hopper_launch.unsupported(q, k, shape.causal, 0):
        return []
    rows = []
    for name in launch._hopper_launch.CONFIGS:
        def run(name=name):
            args, meta = launch.launch_args(q, k, v, shape.causal, None)
            group = launch.launch_head_group(args, meta)
            assert launch._hopper_launch.first_launch(args, meta, group, name), "the Gluon forward did not compile"
            return args["Out"]
        rows.append(measure(f"ours hopper {name}", run, q, refs, shape))
    return rows


def interleaved(kernel, shape: Shape, rounds: int = 7) -> dict:
    """attention() against cuDNN in alternating rounds: the median of the per-round speed ratios and its
    range, so that a clock that drifts during the run moves both sides alike."""
    q, k, v = inputs(shape, seed=1)
    ours = lambda: kernel.attention(q, k, v, causal=shape.causal)  # noqa: E731
    cudnn = lambda: sdpa(SDPBackend.CUDNN_ATTENTION, shape)(q, k, v)  # noqa: E731
    WATCHDOG.start(f"interleaved {shape.name}")
    pairs = [(median_ms(cudnn), median_ms(ours)) for _ in range(rounds)]
    WATCHDOG.stop()
    ratios = sorted(c / o for c, o in pairs)
    return {"rounds": rounds, "cudnn_ms": sorted(c for c, _ in pairs)[rounds // 2],
            "ours_ms": sorted(o for _, o in pairs)[rounds // 2], "speed_vs_cudnn_median": ratios[rounds // 2],
            "speed_vs_cudnn_min": ratios[0], "speed_vs_cudnn_max": ratios[-1]}


def config_label(c: triton.Config) -> str:
    kw = c.kwargs
    form = ("ws" if kw.get("WARP_SPECIALIZE") else "plain") + ("+persistent" if kw.get("PERSISTENT") else "")
    form = form if "PERSISTENT" in kw else "tutorial"
    return f"{form} m{kw['BLOCK_M']} n{kw['BLOCK_N']} s{c.num_stages} w{c.num_warps}"


def summary(shape: Shape, rows: list[dict]) -> dict:
    timed = [r for r in rows if "ms" in r]

    def best(prefix):
        group = [r for r in timed if r["label"].startswith(prefix)]
        return min(group, key=lambda r: r["ms"]) if group else None

    picks = {"cudnn": best("cuDNN"), "flash": best("flash"), "ours_best": best("ours "),
             "ours_attention": best("ours attention()"), "ours_plain_best": best("ours plain-triton"),
             "ours_hopper_best": best("ours hopper"), "tutorial_best": best("tutorial ")}
    cudnn = picks["cudnn"]["ms"] if picks["cudnn"] else None
    return {"shape": asdict(shape), **{k: v for k, v in picks.items() if v},
            "speed_vs_cudnn": {k: cudnn / v["ms"] for k, v in picks.items() if v and cudnn}}


def print_table(shape: Shape, rows: list[dict], summ: dict) -> None:
    print(f"\n== {shape.name}  (B={shape.batch} H={shape.heads}/{shape.kv_heads} S={shape.seq} D={shape.head_dim} "
          f"{shape.dtype}{' causal' if shape.causal else ''})")
    for r in sorted(rows, key=lambda r: r.get("ms", float("inf"))):
        if "ms" in r:
            print(f"  {r['label']:<44} {r['ms']:8.3f} ms {r['tflops']:6.0f} TF/s  err {r['max_abs_err']:.2e}")
        else:
            print(f"  {r['label']:<44} failed: {r['error']}")
    speeds = "  ".join(f"{k}={v:.3f}" for k, v in summ["speed_vs_cudnn"].items())
    print(f"  speed vs cuDNN: {speeds}", flush=True)
    i = summ["interleaved"]
    print(f"  attention() vs cuDNN, {i['rounds']} alternating rounds: {i['ours_ms']:.3f} vs {i['cudnn_ms']:.3f} ms, "
          f"speed {i['speed_vs_cudnn_median']:.3f}x (range {i['speed_vs_cudnn_min']:.3f}-"
          f"{i['speed_vs_cudnn_max']:.3f})", flush=True)


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--out", type=Path, default=Path("."))
    parser.add_argument("--only", default="", help="comma-separated shape names")
    parser.add_argument("--workers", type=int, default=max(1, min(14, (os.cpu_count() or 2) - 2)))
    args = parser.parse_args()
    shapes = [s for s in SHAPES if not args.only or s.name in args.only.split(",")]
    kernel, how = load_flash_attn_triton()
    print(f"{torch.cuda.get_device_name()}, torch {torch.__version__}, triton {triton.__version__}, "
          f"cuDNN {torch.backends.cudnn.version()}; kernel {how}", flush=True)
    failures = precompile(kernel, shapes, args.workers)
    global WATCHDOG
    WATCHDOG = Watchdog(WATCHDOG_S)
    results = []
    for shape in shapes:
        rows = bench_shape(kernel, shape, failures)
        results.append({**summary(shape, rows), "rows": rows, "interleaved": interleaved(kernel, shape)})
        print_table(shape, rows, results[-1])
        args.out.mkdir(parents=True, exist_ok=True)
        (args.out / "triton_attention.json").write_text(json.dumps(results, indent=1))
    print("\nshape                         cuDNN ms  attention() ms  speed (alternating, range)  plain-triton best ms"
          "  tutorial ms  flash ms")
    for r in results:
        def ms(key, r=r):
            return f"{r[key]['ms']:.3f}" if key in r else "-"
        i = r["interleaved"]
        speed = f"{i['speed_vs_cudnn_median']:.3f} ({i['speed_vs_cudnn_min']:.3f}-{i['speed_vs_cudnn_max']:.3f})"
        print(f"{r['shape']['name']:<29} {ms('cudnn'):>8} {ms('ours_attention'):>15} {speed:>27} "
              f"{ms('ours_plain_best'):>21} {ms('tutorial_best'):>12} {ms('flash'):>9}")


if __name__ == "__main__":
    main()
