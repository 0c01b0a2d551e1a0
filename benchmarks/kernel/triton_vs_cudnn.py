"""Issue 44's side-by-side run, on whatever card it lands: attnprof's kernel against cuDNN (SDPA's cuDNN backend)
and flex_attention, in one process, alternating rounds (triton_masks.alternating: each function once a round,
medians, ranges and per-round ratios). From the repository root:

    PYTHONPATH=src python3 benchmarks/kernel/triton_vs_cudnn.py --out DIR [--part dense,validate,decode,features]
        [--rounds 5]

- dense: forward and backward alone (autograd.grad on a kept graph) at D128, S 4k-16k, causal and not,
  B x S = 16k tokens, 16 heads, bf16, against cuDNN; triton.testing.do_bench medians (CUDA events). d64: the
  same at D64, S4k-8k causal and the article's problem (B8 S1024 causal). The
  backward also deterministic: the Gluon one in its fixed order (ours_deterministic) and the two-pass one
  (ours_two_pass; session 19's run named these ours_fixed_order and ours_deterministic).
- decode: B1, q-len 1, 32/8 heads, D128, caches of 2k-8k keys (flash_attn_with_kvcache) against cuDNN, by
  CUDA-graph replay; bandwidth as the K and V bytes over time, against a 1 GiB device copy's. With
  --b1-sweep FILE (triton_decode.py --b1-sweep's JSON from the same card), the sweep's fastest setting per
  cache also runs in the rounds ("ours_swept"): a sweep's one-shot pick, confirmed or not by alternation. In
  the same rounds, "ours_pdl" and "ours_no_pdl" (the combine kernel as the split kernel's programmatic dependent
  or after it), and "copy_same_traffic": a device copy of K (as many bytes moved as the decode reads), the
  ceiling's own operation at this size, launch and DRAM latency included.
- features: softcap (Gemma-2, cap 30) and learnable sinks (gpt-oss) at B2 H16 S4096 D128 causal, forward and
  a forward + backward step, against flex_attention (compiled; softcap by score_mod, the sinks by rescaling
  flex's output with its LSE, out * sigmoid(lse - sink), the usual way to add them to flex).
- head_dims: head dim 256 and q/k 192 with v 128 at B2 H16 S4096 causal, forward and backward alone, against each
  SDPA backend that takes the shape (cuDNN, flash, efficient; a backend that refuses is recorded with its reason).
- forward_configs: the Gluon forward's other configurations against the default and cuDNN, D128 S4k-8k.
- validate: host time per flash_attn_varlen_func call (8 packed sequences of 512 tokens): the same cu_seqlens
  every call (checked once), a new one every call (one synchronisation each), validate=False.
Writes DIR/triton_vs_cudnn.json and prints one JSON line per row.
"""

from __future__ import annotations

import argparse
import functools
import itertools
import json
import os
import time
from unittest import mock

import torch
import triton
from torch.nn.attention import SDPBackend, sdpa_kernel
from triton_masks import KERNEL, alternating, bench_us, copy_ceiling_tbs, graph_us, relative_diff

DENSE = [(4, 4096, True), (4, 4096, False), (2, 8192, True), (2, 8192, False), (1, 16384, True)]  # B, S, causal
# head dim 64, the "D64 and the article's problem at least 1.0x": S4k-8k causal, and the article's problem
# (B8 H16 S1024 D64 causal, what `kernels benchmark` times against SDPA) against cuDNN here
D64 = [(4, 4096, True), (2, 8192, True), (8, 1024, True)]
HEADS, DIM = 16, 128


def _cudnn(q, k, v, causal):
    with sdpa_kernel([SDPBackend.CUDNN_ATTENTION]):
        return torch.nn.functional.scaled_dot_product_attention(q, k, v, is_causal=causal, enable_gqa=True)


def _leaves(*shapes):
    return [torch.randn(*s, device="cuda", dtype=torch.bfloat16).requires_grad_() for s in shapes]


def _backward_only(fn, leaves):
    """A function timing the backward alone: the forward's graph kept, its gradients taken again each call."""
    out = fn()
    grad = torch.randn_like(out)
    return lambda: torch.autograd.grad(out, leaves, grad, retain_graph=True)


def dense_row(batch: int, seq: int, causal: bool, rounds: int, dim: int = DIM) -> dict:
    q, k, v = _leaves(*[(batch, HEADS, seq, dim)] * 3)
    fns = {"ours": lambda: KERNEL.attention(q, k, v, causal=causal), "cudnn": lambda: _cudnn(q, k, v, causal)}
    flops = 4 * batch * HEADS * seq * seq * dim / (2 if causal else 1)
    forward = alternating(fns, rounds)
    # the deterministic backward (the Gluon kernel's fixed order) beside the default, and the two-pass one it
    # replaced (FLASH_ATTN_TRITON_ATOMIC_DQ=0, set around each backward it times)
    fns["ours_deterministic"] = lambda: KERNEL.attention(q, k, v, causal=causal, deterministic=True)
    backwards = {name: _backward_only(fn, (q, k, v)) for name, fn in fns.items()}
    two_pass = mock.patch.dict(os.environ, {"FLASH_ATTN_TRITON_ATOMIC_DQ": "0"})  # read at each backward
    backwards["ours_two_pass"] = two_pass(_backward_only(fns["ours_deterministic"], (q, k, v)))
    backward = alternating(backwards, rounds)
    return {"batch": batch, "seq": seq, "causal": causal, "head_dim": dim, "forward_us": forward,
            "backward_us": backward,
            "forward_TFLOPs_ours": flops / forward["ours"]["median"] / 1e6,
            "backward_TFLOPs_ours": 2.5 * flops / backward["ours"]["median"] / 1e6}


def dense_part(rounds: int, dim: int = DIM) -> list[dict]:
    rows = []
    for batch, seq, causal in DENSE if dim == DIM else D64:
        rows.append(dense_row(batch, seq, causal, rounds, dim))
        print(json.dumps(rows[-1]), flush=True)
    return rows


# the persistent ones too (one program per SM walking the tiles, longest first; made for short sequences): on the
# H100 (session 23) persistent took 1.21-1.25x the default's time here, and persistent_s3 needs 262600 bytes of
# shared memory at D128, more than sm_90 has (refused, its reason in the row)
FORWARD_CANDIDATES = ("pingpong", "overlap_s3", "pingpong_s3", "overlap_n64_s3", "overlap_n64_s4", "persistent",
                      "persistent_s3")


def forward_configs_part(rounds: int) -> list[dict]:
    """The Gluon forward's other configurations (forward/_hopper_launch.CONFIGS) against the one attention()
    runs, at D128 S4k-8k, with cuDNN in the same rounds: what a per-card table would choose from."""
    hopper = KERNEL._launch._hopper_launch
    rows = []
    for batch, seq, causal in DENSE[:3]:
        q, k, v = (torch.randn(batch, HEADS, seq, DIM, device="cuda", dtype=torch.bfloat16) for _ in range(3))
        args, meta = KERNEL._launch.launch_args(q, k, v, causal, None)
        group = KERNEL._launch.launch_head_group(args, meta)
        fns = {"ours": lambda: KERNEL.attention(q, k, v, causal=causal),  # noqa: B023
               "cudnn": lambda: _cudnn(q, k, v, causal)}  # noqa: B023
        want, errors, refused = _cudnn(q, k, v, causal).float(), {}, {}
        for name in FORWARD_CANDIDATES:  # each compiled and run once, then launched as a plan, as attention() is
            try:
                launched = hopper.first_launch(args, meta, group, name)
            except triton.runtime.errors.OutOfResources as e:  # compiled, but does not fit the card
                refused[name] = str(e).splitlines()[0][:160]
                continue
            if launched is None:  # this Triton cannot compile it (first_launch warned why)
                continue
            compiled, descriptors = launched
            errors[name] = (args["Out"].float() - want).abs().max().item()
            fns[name] = functools.partial(compiled.run, {"LSE": args["LSE"], **descriptors})
        row = {"batch": batch, "seq": seq, "causal": causal, "default": hopper.configuration(
                   DIM, hopper.problem_flops(batch * HEADS, seq, DIM, causal)),
               "max_abs_diff_vs_cudnn": errors, "refused": refused, "forward_us": alternating(fns, rounds)}
        print(json.dumps(row), flush=True)
        rows.append(row)
    return rows


def _sdpa(backend):
    def call(q, k, v):
        with sdpa_kernel([backend]):
            return torch.nn.functional.scaled_dot_product_attention(q, k, v, is_causal=True)
    return call


def head_dims_part(rounds: int) -> list[dict]:
    rows = []
    for qk, v_dim in ((256, 256), (192, 128)):
        q, k = _leaves(*[(2, HEADS, 4096, qk)] * 2)
        (v,) = _leaves((2, HEADS, 4096, v_dim))
        fns = {"ours": lambda: KERNEL.attention(q, k, v, causal=True)}  # noqa: B023
        refused = {}
        for backend in (SDPBackend.CUDNN_ATTENTION, SDPBackend.FLASH_ATTENTION, SDPBackend.EFFICIENT_ATTENTION):
            try:
                _sdpa(backend)(q, k, v)
                fns[backend.name.lower()] = lambda b=backend: _sdpa(b)(q, k, v)  # noqa: B023
            except RuntimeError as e:
                refused[backend.name.lower()] = str(e).splitlines()[0][:160]
        with torch.no_grad():
            want = fns[list(fns)[-1]]() if len(fns) > 1 else None
            agreement = None if want is None else relative_diff((fns["ours"](),), (want,))
        row = {"qk": qk, "v": v_dim, "refused": refused, "ours_vs_last_relative": agreement,
               "forward_us": alternating(fns, rounds),
               "backward_us": alternating({n: _backward_only(fn, (q, k, v)) for n, fn in fns.items()}, rounds)}
        print(json.dumps(row), flush=True)
        rows.append(row)
    return rows


ROTATION = 20  # caches one replay of ROTATION calls walks, each read once: K and V come from DRAM, not L2


def _decode_calls(q, ks, vs, lens, swept: dict | None) -> dict:
    """Ours, cuDNN (and ours at the sweep's setting) on batch-1 decode, and a copy moving as many bytes, each call
    on the next of the caches (ks[i], vs[i]) in turn."""
    def cycling(call):
        calls = itertools.cycle([lambda i=i: call(ks[i], vs[i]) for i in range(len(ks))])
        return lambda: next(calls)()

    decode = KERNEL.decode.decode
    window = KERNEL.flash_api.window_bounds(False, (-1, -1))
    fns = {"ours": cycling(lambda k, v: KERNEL.flash_attn_with_kvcache(
               q.transpose(1, 2), k.transpose(1, 2), v.transpose(1, 2), cache_seqlens=lens)),
           "cudnn": cycling(lambda k, v: _cudnn(q, k, v, False))}
    if swept:
        fns["ours_swept"] = cycling(lambda k, v: decode(q.transpose(1, 2), k.transpose(1, 2), v.transpose(1, 2),
                                                        lens, DIM ** -0.5, window, **swept)[0])
    # the combine kernel launched as the split kernel's programmatic dependent, and after it (decode.CardSettings.
    # pdl_max_rows picks one per card for the default): session 23 found the H100's default (dependent) and an
    # explicit dependent launch equal, which says nothing of the dependent launch itself
    for name, pdl in (("ours_pdl", True), ("ours_no_pdl", False)):
        fns[name] = cycling(lambda k, v, pdl=pdl: decode(q.transpose(1, 2), k.transpose(1, 2), v.transpose(1, 2),
                                                         lens, DIM ** -0.5, window, pdl=pdl)[0])
    # the ceiling's own operation at the decode's traffic: a device copy of K (its bytes read and as many
    # written: K and V's bytes moved, as the decode reads them), one launch, from the same caches in turn; at a few
    # MB launch and DRAM latency, not bandwidth, bound it, and its share of the 1 GiB copy's is what any kernel
    # that moves these bytes can be held to
    dst = torch.empty_like(ks[0])
    fns["copy_same_traffic"] = cycling(lambda k, v: dst.copy_(k))
    return fns


def swept_settings(path: str | None) -> dict:
    """{cache: decode()'s splits, config and fused} of each b1 sweep row's fastest setting."""
    if not path:
        return {}
    with open(path) as f:
        rows = json.load(f)["b1_sweep"]
    # JSON made the config tuple a list: decode() keys plans by it
    return {row["cache"]: {"splits": row["fastest"]["splits"], "config": tuple(row["fastest"]["config"]),
                           "fused": row["fastest"]["fused"]} for row in rows}


def decode_part(rounds: int, b1_sweep: str | None = None) -> dict:
    """Batch-1 decode at 2k-8k cached keys: once on one cache (8-34 MB of K and V, which stay in an H100's or
    H200's L2 from call to call) and once walking ROTATION caches (each call reads its K and V from DRAM, what a
    model's layers do), each against the copy ceiling."""
    ceiling = copy_ceiling_tbs()
    swept = swept_settings(b1_sweep)
    rows = []
    for cache in (2048, 4096, 8192):
        q = torch.randn(1, 32, 1, DIM, device="cuda", dtype=torch.bfloat16)
        ks, vs = ([torch.randn(1, 8, cache, DIM, device="cuda", dtype=torch.bfloat16) for _ in range(ROTATION)]
                  for _ in range(2))
        lens = torch.full((1,), cache, dtype=torch.int32, device="cuda")
        kv_bytes = 2 * ks[0].numel() * ks[0].element_size()
        row = {"cache": cache, "swept": swept.get(cache)}
        for name, copies in (("l2_warm", 1), ("from_dram", ROTATION)):
            fns = _decode_calls(q, ks[:copies], vs[:copies], lens, swept.get(cache))
            row[name] = alternating(fns, rounds, functools.partial(graph_us, calls=ROTATION))
            for who in fns:
                row[name][who]["share_of_copy"] = round(kv_bytes / row[name][who]["median"] / 1e6 / ceiling, 3)
        print(json.dumps(row), flush=True)
        rows.append(row)
    return {"copy_TBs": ceiling, "rows": rows}


def _step(fn, leaves):
    """forward + backward of (out * 1).sum() style: a fixed upstream gradient, gradients of every leaf."""
    grad = None

    def run():
        nonlocal grad
        out = fn()
        grad = torch.randn_like(out) if grad is None else grad
        return torch.autograd.grad(out, leaves, grad)
    return run


def features_part(rounds: int) -> list[dict]:
    from torch.nn.attention.flex_attention import create_block_mask, flex_attention

    cap, seq = 30.0, 4096
    q, k, v = _leaves(*[(2, HEADS, seq, DIM)] * 3)
    sink = torch.randn(HEADS, device="cuda", requires_grad=True)
    mask = create_block_mask(lambda b, h, qi, ki: ki <= qi, None, None, seq, seq)
    flex = torch.compile(flex_attention)

    def flex_softcap():
        return flex(q, k, v, block_mask=mask, score_mod=lambda s, b, h, qi, ki: cap * torch.tanh(s / cap))

    def flex_sink():
        out, lse = flex(q, k, v, block_mask=mask, return_lse=True)
        return out * torch.sigmoid(lse - sink[None, :, None])[..., None].to(out.dtype)

    cases = {"softcap": ({"ours": lambda: KERNEL.masked_attention(q, k, v, causal=True, softcap=cap),
                          "flex": flex_softcap}, (q, k, v)),
             "sink": ({"ours": lambda: KERNEL.masked_attention(q, k, v, causal=True, learnable_sink=sink),
                       "flex": flex_sink}, (q, k, v, sink))}
    rows = []
    for name, (fns, leaves) in cases.items():
        with torch.no_grad():
            ours, theirs = (fn() for fn in fns.values())
            agreement = relative_diff((ours,), (theirs,))
            forward = alternating({n: (lambda fn=fn: fn()) for n, fn in fns.items()}, rounds)
        try:
            step = alternating({n: _step(fn, leaves) for n, fn in fns.items()}, rounds)
        except Exception as e:  # flex's LSE gradient where this torch lacks it
            step = {"error": f"{type(e).__name__}: {str(e)[:160]}"}
        rows.append({"case": name, "ours_vs_flex_relative": agreement, "forward_us": forward, "step_us": step})
        print(json.dumps(rows[-1]), flush=True)
    return rows


def validate_part() -> dict:
    """Host µs per varlen call (no grad), synchronised once after each run of 200 calls."""
    q, k, v = (torch.randn(8 * 512, HEADS, DIM, device="cuda", dtype=torch.bfloat16) for _ in range(3))
    offsets = list(range(0, 8 * 512 + 1, 512))
    cu = torch.tensor(offsets, dtype=torch.int32, device="cuda")
    calls = {"same_tensor": lambda: KERNEL.flash_attn_varlen_func(q, k, v, cu, cu, 512, 512, causal=True),
             "new_tensor": lambda: (lambda c: KERNEL.flash_attn_varlen_func(q, k, v, c, c, 512, 512, causal=True))(
                 torch.tensor(offsets, dtype=torch.int32, device="cuda")),
             "validate_false": lambda: KERNEL.flash_attn_varlen_func(q, k, v, cu, cu, 512, 512, causal=True,
                                                                     validate=False)}
    result = {}
    for name, fn in calls.items():
        fn()
        torch.cuda.synchronize()
        best = float("inf")
        for _ in range(3):
            start = time.perf_counter()
            for _ in range(200):
                fn()
            torch.cuda.synchronize()
            best = min(best, (time.perf_counter() - start) / 200 * 1e6)
        result[name] = round(best, 1)
    result["gpu_us_per_call"] = round(bench_us(calls["same_tensor"]), 1)
    print(json.dumps({"validate_host_us": result}), flush=True)
    return result


def main() -> None:
    parser = argparse.ArgumentParser()
    parser.add_argument("--out", default="/tmp")
    parser.add_argument("--part", default="dense,validate,decode,features")
    parser.add_argument("--rounds", type=int, default=5)
    parser.add_argument("--b1-sweep", help="triton_decode.py --b1-sweep's JSON: its fastest settings join the rounds")
    args = parser.parse_args()
    results = {"device": torch.cuda.get_device_name(), "torch": torch.__version__, "triton": triton.__version__,
               "cudnn": torch.backends.cudnn.version()}
    print(json.dumps(results), flush=True)
    parts = {"dense": lambda: dense_part(args.rounds), "d64": lambda: dense_part(args.rounds, 64),
             "decode": lambda: decode_part(args.rounds, args.b1_sweep),
             "features": lambda: features_part(args.rounds), "validate": validate_part,
             "head_dims": lambda: head_dims_part(args.rounds),
             "forward_configs": lambda: forward_configs_part(args.rounds)}
    for part in args.part.split(","):
        results[part] = parts[part]()
        with open(f"{args.out}/triton_vs_cudnn.json", "w") as f:
            json.dump(results, f, indent=1)


if __name__ == "__main__":
    main()
