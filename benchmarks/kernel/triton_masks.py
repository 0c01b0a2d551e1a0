"""H200 run behind docs/kernel.md's mask tables: attnprof's masked forward (windows, documents) against
flex_attention with its block mask, and a ragged packed batch against the padded dense call, with errors
against float64; and the timing helpers the decode and masked-backward scripts share. From the repository
root:

    PYTHONPATH=src python3 benchmarks/kernel/triton_masks.py --part masks|ragged [--sweep] [--flex] [--rounds 5]

The masked forwards are timed by CUDA-graph replay (device time only, 5 calls per graph, median of 5
replays), ours and flex in alternating rounds (medians, ranges, per-round ratios); the ragged batch, its
forward and its training step, with triton.testing.do_bench (CUDA events, median). Decode: triton_decode.py;
training steps with masks: triton_masked_backward.py.
"""

from __future__ import annotations

import argparse
import json

import torch
import torch.nn.functional as F
import triton
from torch.nn.attention import SDPBackend, sdpa_kernel

from attnprof.kernels import import_from_folder
from attnprof.problem import Problem, reference_output

KERNEL = import_from_folder()
MASKS = KERNEL.masks
DEFAULT_MASK_CONFIGS = (MASKS.GPU_CONFIG, MASKS.SHORT_WINDOW_CONFIG)
HQ, HKV, DIM = 32, 8, 128
# (BLOCK_M, BLOCK_N, warps, stages, row blocks per program)
MASK_CONFIGS = ((64, 64, 4, 3, 1), (64, 64, 4, 2, 2), (64, 64, 4, 3, 2), (64, 64, 4, 3, 4), (64, 64, 4, 4, 2),
                (128, 64, 8, 3, 2))


def graph_us(fn, calls: int = 20) -> float:
    """Device time per call: `calls` calls captured in one CUDA graph, median of 5 replays."""
    for _ in range(3):
        fn()
    torch.cuda.synchronize()
    graph = torch.cuda.CUDAGraph()
    with torch.cuda.graph(graph):
        for _ in range(calls):
            fn()
    times = []
    for _ in range(5):
        start, end = torch.cuda.Event(enable_timing=True), torch.cuda.Event(enable_timing=True)
        start.record()
        graph.replay()
        end.record()
        torch.cuda.synchronize()
        times.append(start.elapsed_time(end) * 1e3 / calls)
    return sorted(times)[2]


def copy_ceiling_tbs() -> float:
    """Bytes read plus bytes written by a 1 GiB device-to-device copy, per second (the best of a graph replay's
    and do_bench's timing: on the H100 of 2026-12-07 the graph replay alone gave 2.44 TB/s, the best 3.02)."""
    src = torch.randn(1 << 29, dtype=torch.bfloat16, device="cuda")
    dst = torch.empty_like(src)
    us = min(graph_us(lambda: dst.copy_(src), calls=10), bench_us(lambda: dst.copy_(src)))
    return 2 * src.numel() * src.element_size() / us / 1e6


def bench_us(fn) -> float:
    return triton.testing.do_bench(fn, warmup=25, rep=100, return_mode="median") * 1e3


def max_err(got, want) -> float:
    return (got.double() - want).abs().max().item()


def relative_diff(got, want) -> float:
    """The largest difference between two tuples of tensors (gradients, or an output and its LSE), each relative
    to the largest element of `want`'s."""
    return max(((g.float() - w.float()).abs().max() / w.float().abs().max()).item()
               for g, w in zip(got, want, strict=True))


def sdpa(backend, q, k, v):  # [B, H, S, D]
    with sdpa_kernel([backend]):
        return F.scaled_dot_product_attention(q, k, v, enable_gqa=True)


def sdpa_causal(backend, q, k, v):
    with sdpa_kernel([backend]):
        return F.scaled_dot_product_attention(q, k, v, is_causal=True, enable_gqa=True)


def mask_inputs(seq: int, batch: int = 2):
    gen = torch.Generator(device="cuda").manual_seed(seq)
    q = torch.randn(batch, HQ, seq, DIM, device="cuda", dtype=torch.bfloat16, generator=gen)
    k, v = (torch.randn(batch, HKV, seq, DIM, device="cuda", dtype=torch.bfloat16, generator=gen) for _ in range(2))
    return q, k, v


MASK_CASES = {"window256_s2048": (2048, "window=256"), "window1024_s16384": (16384, "window=1024"),
              "document1024_s8192": (8192, "document=1024")}


def mask_kwargs(mask: str) -> dict:
    """attnprof's mask as masked_attention's arguments: window=W is causal with keys i-W+1..i, document=N
    causal inside documents of N tokens."""
    kind, size = mask.split("=")
    if kind == "window":
        return {"causal": True, "window_size": (int(size) - 1, 0)}
    return {"causal": True, "document_len": int(size)}


def ours_masked(q, k, v, mask: str, config=None):
    MASKS.GPU_CONFIG, MASKS.SHORT_WINDOW_CONFIG = (config, config) if config else DEFAULT_MASK_CONFIGS
    return KERNEL.masked_attention(q, k, v, **mask_kwargs(mask))


def flex_fn(seq: int, mask: str):
    from torch.nn.attention.flex_attention import create_block_mask, flex_attention

    from attnprof.variants.flex import mask_mod

    problem = Problem(batch=2, heads=HQ, kv_heads=HKV, seq=seq, head_dim=DIM, mask=mask)
    block_mask = create_block_mask(mask_mod(problem, "cuda"), None, None, seq, seq, device="cuda")
    compiled = torch.compile(flex_attention)
    return lambda q, k, v: compiled(q, k, v, block_mask=block_mask, enable_gqa=True)


def summary(values: list[float]) -> dict:
    ordered = sorted(values)
    return {"median": round(ordered[len(ordered) // 2], 4), "min": round(ordered[0], 4), "max": round(ordered[-1], 4)}


def alternating(fns: dict, rounds: int, timer=None) -> dict:
    """Each function timed once a round, in turn, for `rounds` rounds: each one's median, range and times by
    round, and of the per-round ratio of every other one's time to the first's (above 1: the first is faster)."""
    times = {name: [] for name in fns}
    for _ in range(rounds):
        for name, fn in fns.items():
            times[name].append((timer or bench_us)(fn))
    first = next(iter(fns))
    ratios = {f"{name}/{first}": summary([t / f for t, f in zip(times[name], times[first], strict=True)])
              for name in list(fns)[1:]}
    # each round's time kept too: any other pair's per-round ratio is read later (card_check_tables.py)
    return {**{name: {**summary(values), "rounds": [round(t, 4) for t in values]} for name, values in times.items()},
            **ratios}


def masks_part(sweep: bool, with_flex: bool, rounds: int) -> list[dict]:
    """Forward: errors of batch 0, heads 0-3 against float64; ours (and flex) by graph replay in turns."""
    rows = []
    for name, (seq, mask) in MASK_CASES.items():
        q, k, v = mask_inputs(seq)
        problem = Problem(batch=1, heads=4, kv_heads=1, seq=seq, head_dim=DIM, mask=mask)
        want = reference_output(q[:1, :4], k[:1, :1], v[:1, :1], problem)
        row = {"case": name, "ours_err": max_err(ours_masked(q, k, v, mask)[:1, :4], want)}
        for config in MASK_CONFIGS if sweep else ():
            row[f"ours_us{config}"] = graph_us(lambda: ours_masked(q, k, v, mask, config), calls=5)  # noqa: B023
        fns = {"ours": lambda: ours_masked(q, k, v, mask)}  # noqa: B023
        if with_flex:
            flex = flex_fn(seq, mask)
            row["flex_err"] = max_err(flex(q, k, v)[:1, :4], want)
            fns["flex"] = lambda: flex(q, k, v)  # noqa: B023
        row["us"] = alternating(fns, rounds, lambda fn: graph_us(fn, calls=5))
        pairs = problem.attended_pairs() * 2 * HQ
        row["ours_TFLOPs"] = round(4 * DIM * pairs / row["us"]["ours"]["median"] / 1e6, 1)
        print(json.dumps(row), flush=True)
        rows.append(row)
    return rows


def _step(fn, leaves, grad) -> None:
    """One training step of fn on leaves, their gradients fresh (not accumulated into the last step's)."""
    for t in leaves:
        t.grad = None
    fn(*leaves).backward(grad)


def ragged_part() -> dict:
    """16 sequences of 1-4096 tokens, causal, as one varlen call, each alone, and as the padded dense call:
    the forward and the training step (forward + backward), do_bench."""
    gen = torch.Generator().manual_seed(26)
    lengths = [1, 4096] + torch.randint(1, 4097, (14,), generator=gen).tolist()
    cu = torch.tensor([0] + torch.tensor(lengths).cumsum(0).tolist(), dtype=torch.int32, device="cuda")
    total = int(cu[-1])
    q = torch.randn(total, HQ, DIM, device="cuda", dtype=torch.bfloat16)
    k, v = (torch.randn(total, HKV, DIM, device="cuda", dtype=torch.bfloat16) for _ in range(2))
    out = KERNEL.flash_attn_varlen_func(q, k, v, cu, cu, max(lengths), max(lengths), causal=True)
    alone = 0.0
    for s, e in zip(cu[:-1].tolist(), cu[1:].tolist(), strict=True):
        one = torch.tensor([0, e - s], dtype=torch.int32, device="cuda")
        single = KERNEL.flash_attn_varlen_func(q[s:e], k[s:e], v[s:e], one, one, e - s, e - s, causal=True)
        alone = max(alone, (out[s:e].double() - single.double()).abs().max().item())
    padded = [torch.randn(len(lengths), h, 4096, DIM, device="cuda", dtype=torch.bfloat16) for h in (HQ, HKV, HKV)]
    calls = {"varlen": lambda *t: KERNEL.flash_attn_varlen_func(*t, cu, cu, 4096, 4096, causal=True),
             "padded_ours": lambda *t: KERNEL.attention(*t, causal=True),
             "padded_cudnn": lambda *t: sdpa_causal(SDPBackend.CUDNN_ATTENTION, *t)}
    inputs = {"varlen": (q, k, v), "padded_ours": padded, "padded_cudnn": padded}
    row = {"lengths": lengths, "max_diff_vs_alone": alone}
    row |= {f"{name}_us": bench_us(lambda f=f, t=inputs[name]: f(*t)) for name, f in calls.items()}
    for t in (q, k, v, *padded):
        t.requires_grad_()
    grads = {name: torch.randn_like(inputs[name][0]) for name in calls}
    row |= {f"{name}_step_us": bench_us(lambda f=f, t=inputs[name], g=grads[name]: _step(f, t, g))
            for name, f in calls.items()}
    print(json.dumps(row), flush=True)
    return row


def main() -> None:
    parser = argparse.ArgumentParser()
    parser.add_argument("--part", action="append", choices=("masks", "ragged"), required=True)
    parser.add_argument("--sweep", action="store_true")
    parser.add_argument("--flex", action="store_true")
    parser.add_argument("--rounds", type=int, default=5)
    parser.add_argument("--out", default="/tmp")
    args = parser.parse_args()
    results = {"device": torch.cuda.get_device_name(), "torch": torch.__version__, "triton": triton.__version__}
    if "masks" in args.part:
        results["masks"] = masks_part(args.sweep, args.flex, args.rounds)
    if "ragged" in args.part:
        results["ragged"] = ragged_part()
    with open(f"{args.out}/masks.json", "w") as f:
        json.dump(results, f, indent=1)


if __name__ == "__main__":
    main()
