"""H200 run behind docs/kernel.md's decode tables: attnprof's split-KV decode (flash_attn_with_kvcache's kernel)
against SDPA (cuDNN, flash) at B8, 32 query heads, 8 KV heads, D128, bf16. From the repository root:

    PYTHONPATH=src python3 benchmarks/kernel/triton_decode.py [--sweep] [--rounds 5]
    PYTHONPATH=src python3 benchmarks/kernel/triton_decode.py --b1-sweep     # batch 1 only, then exit

(--prewarm alone first compiles the decode's kernels in parallel processes.)

Timed by CUDA-graph replay (device time only, 20 calls per graph, median of 5 replays), ours (the fused
combine, the two-kernel form, and that with the combine as the split kernel's programmatic dependent), cuDNN
and flash in alternating rounds (medians, ranges, per-round ratios);
bandwidth counts the K and V bytes a call must read, against a 1 GiB device-to-device copy in the same
process. Errors against float64: each output's worst element and its relative norm; --sweep times split
counts and tile configurations. Last, a paged cache (vLLM's layout, pages of 256 rows shuffled): ours, and
flex_attention through torch's PagedAttention on the same pages, against the same keys contiguous, ours and cuDNN
(which SDPA gives no page table).
"""

from __future__ import annotations

import argparse
import json

import torch
import triton
from torch.nn.attention import SDPBackend
from triton_masks import (
    DIM,
    HKV,
    HQ,
    KERNEL,
    alternating,
    copy_ceiling_tbs,
    graph_us,
    max_err,
    sdpa,
)

from attnprof.problem import Problem, reference_output

DEC = KERNEL.decode
BATCH = 8
CACHES = (2048, 8192, 32768, 131072)


def ours_decode(q, k, v, lens, causal=True, splits=None, config=None, fused=None, pdl=None):
    """Our decode on [B, H, S, D] tensors (read through transposed views, no copy)."""
    window = KERNEL.flash_api.window_bounds(causal, (-1, -1))
    out, _ = DEC.decode(q.transpose(1, 2), k.transpose(1, 2), v.transpose(1, 2), lens, q.shape[-1] ** -0.5,
                        window, splits=splits, config=config, fused=fused, pdl=pdl)
    return out.transpose(1, 2)


def decode_inputs(cache: int, q_len: int, batch: int = BATCH, seed: int = 0):
    gen = torch.Generator(device="cuda").manual_seed(cache + q_len + 1000 * seed)
    q = torch.randn(batch, HQ, q_len, DIM, device="cuda", dtype=torch.bfloat16, generator=gen)
    k, v = (torch.randn(batch, HKV, cache, DIM, device="cuda", dtype=torch.bfloat16, generator=gen) for _ in range(2))
    return q, k, v, torch.full((batch,), cache, dtype=torch.int32, device="cuda")


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
                    "ours_two_kernels": ours_decode(q, k, v, lens, causal=False, fused=False),
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


def _compile_decode(q_len_and_splits: tuple) -> str:  # (q-len, splits, fused)
    """One decode kernel set at a 1024-key cache (the same specialisations as the timed caches'), for
    Triton's disk cache."""
    q_len, splits, fused = q_len_and_splits
    q, k, v, lens = decode_inputs(1024, q_len)
    ours_decode(q, k, v, lens, causal=False, splits=splits, fused=fused)
    torch.cuda.synchronize()
    return str(q_len_and_splits)


def prewarm() -> None:
    """Compile, in parallel processes, the decode kernels the decode part runs (q-len 1, 4, 16; one split too)."""
    import multiprocessing

    with multiprocessing.get_context("spawn").Pool(7) as pool:
        cases = [(q_len, None, fused) for q_len in (1, 4, 16) for fused in (None, False)] + [(1, 1, None)]
        for done in pool.imap_unordered(_compile_decode, cases):
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


def b1_sweep() -> list[dict]:
    """Batch 1, q-len 1, 2k-8k keys: ours at each (BLOCK_N, stages, TMA), split count and combine form, cuDNN, and
    a device-to-device copy of the same K and V bytes (the ceiling at this size, launch latency included), each
    by graph replay. The split heuristic at batch 1 is chosen from this."""
    rows = []
    for cache in (2048, 4096, 8192):
        q, k, v, lens = decode_inputs(cache, 1, batch=1)
        kv = torch.cat([k, v]).flatten()
        dst = torch.empty_like(kv)
        row = {"cache": cache, "kv_MB": 2 * k.numel() * k.element_size() / 1e6,
               "copy_same_bytes_us": graph_us(lambda: dst.copy_(kv)),  # noqa: B023
               "cudnn_us": graph_us(lambda: sdpa(SDPBackend.CUDNN_ATTENTION, q, k, v)),  # noqa: B023
               "ours_default_us": graph_us(lambda: ours_decode(q, k, v, lens))}  # noqa: B023
        # TMA descriptors with either combine; pointer loads ("p": no descriptor per program) with the combine
        # kernel only (the fused combine was the slower form at batch 1 at every setting, docs/kernel.md)
        settings = [((bn, st, True), fused) for bn, st in ((64, 3), (64, 2), (32, 3)) for fused in (False, True)]
        settings += [((bn, st, False), False) for bn, st in ((64, 3), (64, 2), (32, 3))]
        fastest = None
        for config, fused in settings:
            tile = f"{config[0]}x{config[1]}{'' if config[2] else 'p'}"
            for splits in (4, 8, 16, 32, 64):
                name = f"ours{tile}_{'fused' if fused else 'two'}_s{splits}"
                row[name] = graph_us(
                    lambda: ours_decode(q, k, v, lens, splits=splits, config=config, fused=fused))  # noqa: B023
                if fastest is None or row[name] < row[fastest["name"]]:
                    fastest = {"name": name, "splits": splits, "config": config, "fused": fused}
        row["fastest"] = fastest  # decode()'s arguments for it: triton_vs_cudnn.py --b1-sweep runs it in rounds
        print(json.dumps(row), flush=True)
        rows.append(row)
    return rows


def paged(k: torch.Tensor, v: torch.Tensor, page: int, gen: torch.Generator):
    """k, v [B, H, S, D] as vLLM's paged cache: pages [B * S / page, page, H, D] in a shuffled order, and the
    int32 block table [B, S / page] that finds them."""
    batch, heads, seq, dim = k.shape
    order = torch.randperm(batch * seq // page, generator=gen).to(k.device)
    table = order.reshape(batch, seq // page).to(torch.int32)
    pages = []
    for t in (k, v):
        # page j of sequence b at row b * S / page + j, then moved to where the table says
        rows = t.transpose(1, 2).reshape(batch * seq // page, page, heads, dim)
        out = torch.empty_like(rows)
        out[order] = rows
        pages.append(out)
    return (*pages, table)


def flex_paged(q: torch.Tensor, k_pages: torch.Tensor, v_pages: torch.Tensor, table: torch.Tensor):
    """flex_attention (compiled) through torch's PagedAttention on the pages table finds: the same pages in flex's
    layout ([1, H, pages * page, D], one copy made here) and the same page table, every key visible (q-len 1
    against full caches): what torch offers for a paged cache, where SDPA has none."""
    from torch.nn.attention.experimental._paged_attention import PagedAttention
    from torch.nn.attention.flex_attention import create_block_mask, flex_attention

    batch, _, q_len, _ = q.shape
    n_pages, page, kv_heads, _ = k_pages.shape
    logical = table.shape[1]
    paging = PagedAttention(n_pages, page, batch, device=str(q.device))
    paging.page_table[:, :logical] = table.long()
    owners = torch.arange(batch, device=q.device)[:, None].expand(-1, logical)
    paging.physical_to_logical[owners, table.long()] = torch.arange(logical, device=q.device).expand(batch, -1)
    k_flex, v_flex = (t.permute(2, 0, 1, 3).reshape(1, kv_heads, n_pages * page, t.shape[-1]).expand(batch, -1, -1, -1)
                      for t in (k_pages, v_pages))
    logical_mask = create_block_mask(lambda b, h, qi, ki: ki >= 0, batch, None, q_len, logical * page,
                                     device=str(q.device), BLOCK_SIZE=(128, page))
    mask, score_mod = paging.convert_logical_block_mask(logical_mask), paging.get_score_mod(None)
    flex = torch.compile(flex_attention)
    return lambda: flex(q, k_flex, v_flex, block_mask=mask, score_mod=score_mod, enable_gqa=True)


def paged_table(ceiling: float, rounds: int, page: int = 256) -> list[dict]:
    """Ours on a paged cache (pages of `page` rows in a shuffled order) beside flex_attention on the same pages
    (torch's PagedAttention), and ours and cuDNN on the same keys contiguous, B8 q-len 1, by graph replay in
    alternating rounds: what paging costs, and ours against what torch offers for it (SDPA's cuDNN takes no page
    table, so cuDNN is timed on the contiguous cache). A flex that fails is recorded with its reason."""
    rows = []
    for cache in (8192, 32768):
        q, k, v, lens = decode_inputs(cache, 1)
        k_pages, v_pages, table = paged(k, v, page, torch.Generator().manual_seed(cache))
        q_bshd = q.transpose(1, 2)
        fns = {"ours_paged": lambda: KERNEL.flash_attn_with_kvcache(  # noqa: B023
                   q_bshd, k_pages, v_pages, cache_seqlens=lens, block_table=table),  # noqa: B023
               "ours": lambda: KERNEL.flash_attn_with_kvcache(  # noqa: B023
                   q_bshd, k.transpose(1, 2), v.transpose(1, 2), cache_seqlens=lens),  # noqa: B023
               "cudnn": lambda: sdpa(SDPBackend.CUDNN_ATTENTION, q, k, v)}  # noqa: B023
        kv_bytes = 2 * k.numel() * k.element_size()
        contiguous = fns["ours"]().float()
        row = {"cache": cache, "page": page,
               "paged_vs_contiguous_max_diff": (fns["ours_paged"]().float() - contiguous).abs().max().item()}
        try:  # compiled here, before any graph capture
            fns["flex_paged"] = flex_paged(q, k_pages, v_pages, table)
            row["flex_vs_ours_max_diff"] = (fns["flex_paged"]().transpose(1, 2).float() - contiguous).abs().max().item()
        except Exception as e:  # noqa: BLE001 - this torch's flex or PagedAttention refuses: said, the rest timed
            fns.pop("flex_paged", None)
            row["flex_paged_error"] = f"{type(e).__name__}: {str(e)[:160]}"
        row |= alternating(fns, rounds, graph_us)
        for name in fns:
            row[name]["share"] = round(kv_bytes / row[name]["median"] / 1e6 / ceiling, 3)
        print(json.dumps(row), flush=True)
        rows.append(row)
    return rows


def graph_equals_eager(fn) -> bool:
    """Whether a CUDA-graph replay of fn (replayed twice) gives its eager output, bit for bit."""
    eager = fn().clone()
    graph = torch.cuda.CUDAGraph()
    with torch.cuda.graph(graph):
        out = fn()
    graph.replay()
    graph.replay()
    torch.cuda.synchronize()
    return torch.equal(out, eager)


def decode_table(ceiling: float, rounds: int) -> list[dict]:
    """Ours, cuDNN and flash in alternating rounds (graph replay) per cache and q-len; bandwidth from medians."""
    rows = []
    for cache, q_len in [(c, 1) for c in CACHES] + [(8192, 4), (8192, 8), (8192, 16), (32768, 16)]:
        q, k, v, lens = decode_inputs(cache, q_len)
        kv_bytes = 2 * k.numel() * k.element_size()
        fns = {"ours": lambda: ours_decode(q, k, v, lens),  # noqa: B023
               "ours_two_kernels": lambda: ours_decode(q, k, v, lens, fused=False),  # noqa: B023
               # the two kernels, the combine as the split kernel's dependent (decode.CardSettings.pdl_max_rows)
               "ours_pdl": lambda: ours_decode(q, k, v, lens, fused=False, pdl=True),  # noqa: B023
               "ours_no_pdl": lambda: ours_decode(q, k, v, lens, fused=False, pdl=False),  # noqa: B023
               # both K/V reads at the default's splits (decode.BY_CARD picks one per card and split length)
               "ours_tma": lambda: ours_decode(q, k, v, lens, config=DEC.GPU_CONFIG._replace(tma=True)),  # noqa: B023
               "ours_pointers": lambda: ours_decode(  # noqa: B023
                   q, k, v, lens, config=DEC.GPU_CONFIG._replace(tma=False)),  # noqa: B023
               "cudnn": lambda: sdpa(SDPBackend.CUDNN_ATTENTION, q, k, v),  # noqa: B023
               "flash": lambda: sdpa(SDPBackend.FLASH_ATTENTION, q, k, v)}  # noqa: B023
        row = {"cache": cache, "q_len": q_len, "kv_MB": kv_bytes / 1e6, **alternating(fns, rounds, graph_us),
               "graph_equals_eager": {name: graph_equals_eager(fns[name])
                                      for name in ("ours", "ours_two_kernels", "ours_pdl", "ours_no_pdl")}}
        for name in fns:
            tbs = kv_bytes / row[name]["median"] / 1e6
            row[name] |= {"TB/s": round(tbs, 2), "share": round(tbs / ceiling, 3)}
        print(json.dumps(row), flush=True)
        rows.append(row)
    return rows


def main() -> None:
    parser = argparse.ArgumentParser()
    parser.add_argument("--prewarm", action="store_true")
    parser.add_argument("--sweep", action="store_true")
    parser.add_argument("--b1-sweep", action="store_true")
    parser.add_argument("--rounds", type=int, default=5)
    parser.add_argument("--out", default="/tmp")
    args = parser.parse_args()
    if args.prewarm:
        prewarm()
        return
    results = {"device": torch.cuda.get_device_name(), "torch": torch.__version__, "triton": triton.__version__}
    if args.b1_sweep:
        results["b1_sweep"] = b1_sweep()
        with open(f"{args.out}/decode_b1_sweep.json", "w") as f:
            json.dump(results, f, indent=1)
        return
    results["copy_TBs"] = copy_ceiling_tbs()
    print("copy ceiling TB/s", results["copy_TBs"], flush=True)
    results["decode_errors"] = decode_errors()
    if args.sweep:
        results["decode_sweep"] = decode_sweep()
    results["decode"] = decode_table(results["copy_TBs"], args.rounds)
    results["paged"] = paged_table(results["copy_TBs"], args.rounds)
    with open(f"{args.out}/decode.json", "w") as f:
        json.dump(results, f, indent=1)


if __name__ == "__main__":
    main()
