"""H200 run behind docs/kernel.md's decode and mask tables: attnprof's split-KV decode and masked forward
against SDPA (cuDNN, flash) and flex_attention, with errors against float64. From the repository root:

    PYTHONPATH=src python3 benchmarks/triton_decode_masks.py --part decode|masks|ragged [--sweep] [--flex]
        [--rounds 5]

(--part prewarm alone first compiles the decode's kernels in parallel processes.)

Decode and the masked forwards are timed by CUDA-graph replay (device time only, 20 and 5 calls per graph,
median of 5 replays), the ragged batch with triton.testing.do_bench (CUDA events, median); the decode
against cuDNN and flash, and the masked forward against flex, in alternating rounds (medians, ranges,
per-round ratios). Decode errors: each output's worst element and its relative norm against float64.
Training steps with masks: triton_masked_backward.py. Bandwidth counts the K and V bytes a decode call must
read against a device-to-device copy measured in the same process.
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
DEC = KERNEL.decode
MASKS = KERNEL.masks
DEFAULT_MASK_CONFIGS = (MASKS.GPU_CONFIG, MASKS.SHORT_WINDOW_CONFIG)
BATCH, HQ, HKV, DIM = 8, 32, 8, 128
CACHES = (2048, 8192, 32768, 131072)
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


def bench_us(fn) -> float:
    return triton.testing.do_bench(fn, warmup=25, rep=100, return_mode="median") * 1e3


def copy_ceiling_tbs() -> float:
    """Bytes read plus bytes written by a 1 GiB device-to-device copy, per second (the best of two timings)."""
    src = torch.randn(1 << 29, dtype=torch.bfloat16, device="cuda")
    dst = torch.empty_like(src)
    us = min(graph_us(lambda: dst.copy_(src), calls=10), bench_us(lambda: dst.copy_(src)))
    return 2 * src.numel() * src.element_size() / us / 1e6


def sdpa(backend, q, k, v):  # [B, H, S, D]
    with sdpa_kernel([backend]):
        return F.scaled_dot_product_attention(q, k, v, enable_gqa=True)


def sdpa_causal(backend, q, k, v):
    with sdpa_kernel([backend]):
        return F.scaled_dot_product_attention(q, k, v, is_causal=True, enable_gqa=True)


def ours_decode(q, k, v, lens, causal=True, splits=None, config=None):
    """Our decode on [B, H, S, D] tensors (read through transposed views, no copy)."""
    window = KERNEL.flash_api.window_bounds(causal, (-1, -1))
    out, _ = DEC.decode(q.transpose(1, 2), k.transpose(1, 2), v.transpose(1, 2), lens, q.shape[-1] ** -0.5,
                        window, splits=splits, config=config)
    return out.transpose(1, 2)


def decode_inputs(cache: int, q_len: int, batch: int = BATCH, seed: int = 0):
    gen = torch.Generator(device="cuda").manual_seed(cache + q_len + 1000 * seed)
    q = torch.randn(batch, HQ, q_len, DIM, device="cuda", dtype=torch.bfloat16, generator=gen)
    k, v = (torch.randn(batch, HKV, cache, DIM, device="cuda", dtype=torch.bfloat16, generator=gen) for _ in range(2))
    return q, k, v, torch.full((batch,), cache, dtype=torch.int32, device="cuda")


def max_err(got, want) -> float:
    return (got.double() - want).abs().max().item()


def relative_err(got, want) -> float:
    """||got - want|| / ||want||, the whole output's error (max_err is its worst element's)."""
    return ((got.double() - want).norm() / want.norm()).item()


def decode_errors(caches=(2048, 8192, 32768), seeds: int = 2) -> dict:
    """q=1 at each cache (B8, the bar's shape, `seeds` fresh inputs each) against float64: ours at its default
    split count and at one split (no combine), cuDNN and flash; and a ragged q=4 batch."""
    errors = {}
    for cache in caches:
        for seed in range(seeds):
            q, k, v, lens = decode_inputs(cache, 1, seed=seed)
            problem = Problem(batch=BATCH, heads=HQ, kv_heads=HKV, seq=cache, head_dim=DIM, mode="decode", q_len=1,
                              mask="none")
            want = reference_output(q, k, v, problem)
            outs = {"ours": ours_decode(q, k, v, lens, causal=False),
                    "ours_1split": ours_decode(q, k, v, lens, causal=False, splits=1),
                    "cudnn": sdpa(SDPBackend.CUDNN_ATTENTION, q, k, v),
                    "flash": sdpa(SDPBackend.FLASH_ATTENTION, q, k, v)}
            errors[f"q1_{cache}_seed{seed}"] = {name: {"max": max_err(out, want), "rel": relative_err(out, want)}
                                                for name, out in outs.items()}
            print(json.dumps({f"q1_{cache}_seed{seed}": errors[f"q1_{cache}_seed{seed}"]}), flush=True)
            del want, outs
    errors["ragged_q4"] = ragged_decode_error()
    print(json.dumps({"ragged_q4": errors["ragged_q4"]}), flush=True)
    return errors


def ragged_decode_error() -> dict:
    """Caches of 4096, 1000, 17 and 4 keys, q-len 4, causal: the worst element against each sequence alone."""
    q, k, v, _ = decode_inputs(4096, 4, batch=4)
    lens = torch.tensor([4096, 1000, 17, 4], dtype=torch.int32, device="cuda")
    out = KERNEL.flash_attn_with_kvcache(q.transpose(1, 2), k.transpose(1, 2), v.transpose(1, 2), cache_seqlens=lens,
                                         causal=True).transpose(1, 2)
    worst = 0.0
    for b, n in enumerate(lens.tolist()):
        alone = Problem(batch=1, heads=HQ, kv_heads=HKV, seq=n, head_dim=DIM, mode="decode", q_len=4)
        want = reference_output(q[b:b + 1], k[b:b + 1, :, :n], v[b:b + 1, :, :n], alone)
        worst = max(worst, max_err(out[b:b + 1], want))
    return {"ours": worst, "lengths": lens.tolist()}


def _compile_decode(q_len_and_splits: tuple) -> str:
    """One decode kernel set at a 1024-key cache (the same specialisations as the timed caches'), for
    Triton's disk cache."""
    q_len, splits = q_len_and_splits
    q, k, v, lens = decode_inputs(1024, q_len)
    ours_decode(q, k, v, lens, causal=False, splits=splits)
    torch.cuda.synchronize()
    return str(q_len_and_splits)


def prewarm() -> None:
    """Compile, in parallel processes, the decode kernels the decode part runs (q-len 1, 4, 16; one split too)."""
    import multiprocessing

    with multiprocessing.get_context("spawn").Pool(4) as pool:
        for done in pool.imap_unordered(_compile_decode, [(1, None), (1, 1), (4, None), (16, None)]):
            print("compiled decode", done, flush=True)


def decode_sweep() -> list[dict]:
    rows = []
    for cache in (8192, 32768):
        q, k, v, lens = decode_inputs(cache, 1)
        for config in ((64, 3), (64, 4), (128, 2), (128, 3)):
            for splits in (2, 4, 8, 16, 32):
                us = graph_us(lambda: ours_decode(q, k, v, lens, splits=splits, config=config))  # noqa: B023
                rows.append({"cache": cache, "config": config, "splits": splits, "us": us})
                print(json.dumps(rows[-1]), flush=True)
    return rows


def decode_table(ceiling: float, rounds: int) -> list[dict]:
    """Ours, cuDNN and flash in alternating rounds (graph replay) per cache and q-len; bandwidth from medians."""
    rows = []
    for cache, q_len in [(c, 1) for c in CACHES] + [(8192, 4), (8192, 16), (32768, 16)]:
        q, k, v, lens = decode_inputs(cache, q_len)
        kv_bytes = 2 * k.numel() * k.element_size()
        fns = {"ours": lambda: ours_decode(q, k, v, lens),  # noqa: B023
               "cudnn": lambda: sdpa(SDPBackend.CUDNN_ATTENTION, q, k, v),  # noqa: B023
               "flash": lambda: sdpa(SDPBackend.FLASH_ATTENTION, q, k, v)}  # noqa: B023
        row = {"cache": cache, "q_len": q_len, "kv_MB": kv_bytes / 1e6, **alternating(fns, rounds, graph_us)}
        for name in fns:
            tbs = kv_bytes / row[name]["median"] / 1e6
            row[name] |= {"TB/s": round(tbs, 2), "share": round(tbs / ceiling, 3)}
        print(json.dumps(row), flush=True)
        rows.append(row)
    return rows


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
    """Each function timed once a round, in turn, for `rounds` rounds: each one's median and range, and of
    the per-round ratio of every other one's time to the first's (above 1: the first is faster)."""
    times = {name: [] for name in fns}
    for _ in range(rounds):
        for name, fn in fns.items():
            times[name].append((timer or bench_us)(fn))
    first = next(iter(fns))
    ratios = {f"{name}/{first}": summary([t / f for t, f in zip(times[name], times[first], strict=True)])
              for name in list(fns)[1:]}
    return {**{name: summary(values) for name, values in times.items()}, **ratios}


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


def ragged_part() -> dict:
    """16 sequences of 1-4096 tokens, causal, as one varlen call, each alone, and as the padded dense call."""
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
    row = {"lengths": lengths, "max_diff_vs_alone": alone,
           "varlen_us": bench_us(lambda: KERNEL.flash_attn_varlen_func(q, k, v, cu, cu, 4096, 4096, causal=True)),
           "padded_ours_us": bench_us(lambda: KERNEL.attention(*padded, causal=True)),
           "padded_cudnn_us": bench_us(lambda: sdpa_causal(SDPBackend.CUDNN_ATTENTION, *padded))}
    print(json.dumps(row), flush=True)
    return row


def main() -> None:
    parser = argparse.ArgumentParser()
    parser.add_argument("--part", action="append", choices=("prewarm", "decode", "masks", "ragged"), required=True)
    parser.add_argument("--sweep", action="store_true")
    parser.add_argument("--flex", action="store_true")
    parser.add_argument("--rounds", type=int, default=5)
    parser.add_argument("--out", default="/tmp")
    args = parser.parse_args()
    if "prewarm" in args.part:
        prewarm()
        return
    results = {"device": torch.cuda.get_device_name(), "torch": torch.__version__, "triton": triton.__version__}
    if "decode" in args.part:
        results["copy_TBs"] = copy_ceiling_tbs()
        print("copy ceiling TB/s", results["copy_TBs"], flush=True)
        results["decode_errors"] = decode_errors()
        if args.sweep:
            results["decode_sweep"] = decode_sweep()
        results["decode"] = decode_table(results["copy_TBs"], args.rounds)
    if "masks" in args.part:
        results["masks"] = masks_part(args.sweep, args.flex, args.rounds)
    if "ragged" in args.part:
        results["ragged"] = ragged_part()
    with open(f"{args.out}/decode_masks.json", "w") as f:
        json.dump(results, f, indent=1)


if __name__ == "__main__":
    main()
