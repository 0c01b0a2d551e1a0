"""Record reference traces with the article's harness, independently of attnprof.

These traces are the ground truth the analysis is checked against: they are made by
plain torch.profiler code (3 warm-up calls, schedule(wait=1, warmup=1, active=3), each
forward in record_function("attn_fwd")), exactly as the article's four scripts do.

Training steps (forward + backward: torch.autograd.grad of q, k, v, the step in
record_function("attn_step")), decode calls against a KV cache, grouped-query prefill and a
sliding window are recorded the same way (`--sets train,decode,gqa,window`); decode, GQA and window
traces record input shapes (record_shapes), as the findings about bytes and masks need.

    python benchmarks/device_runs/record_traces.py --out DIR [--device cuda] [--sets attention,llama,train,...]
        [--llama-train]
"""

from __future__ import annotations

import argparse
import gzip
import json
import os
import time
from pathlib import Path

import torch
import torch.nn.functional as F
from torch.profiler import ProfilerActivity, profile, record_function, schedule


def naive(q, k, v, mask, inplace):
    scale = q.shape[-1] ** -0.5
    scores = torch.matmul(q, k.transpose(-2, -1)) * scale  # [B, H, S, S]
    scores = scores.masked_fill_(mask, float("-inf")) if inplace else scores.masked_fill(mask, float("-inf"))
    return torch.matmul(torch.softmax(scores, dim=-1), v)


def sdpa(q, k, v, backend):
    if backend is None:
        return F.scaled_dot_product_attention(q, k, v, is_causal=True)
    from torch.nn.attention import sdpa_kernel

    with sdpa_kernel(backend):
        return F.scaled_dot_product_attention(q, k, v, is_causal=True)


def profile_fn(fn, path: Path, region: str, activities, shapes=False, grad=False):
    with torch.enable_grad() if grad else torch.no_grad():
        for _ in range(3):
            fn()
        if torch.cuda.is_available():
            torch.cuda.synchronize()
        sched = schedule(wait=1, warmup=1, active=3, repeat=1)
        with profile(activities=activities, schedule=sched, record_shapes=shapes) as prof:
            for _ in range(5):
                with record_function(region):
                    fn()
                prof.step()
    prof.export_chrome_trace(str(path))
    return prof


def attention_traces(out: Path, device: str, activities):
    B, H, S, D = (8, 16, 1024, 64) if device == "cuda" else (1, 2, 64, 32)
    dtype = torch.bfloat16
    g = torch.Generator(device=device).manual_seed(0)
    q, k, v = (torch.randn(B, H, S, D, device=device, dtype=dtype, generator=g) for _ in range(3))
    mask = torch.ones(S, S, dtype=torch.bool, device=device).triu(1)
    from torch.nn.attention import SDPBackend

    runs = {
        "naive": lambda: naive(q, k, v, mask, False),
        "inplace": lambda: naive(q, k, v, mask, True),
        "sdpa-math": lambda: sdpa(q, k, v, SDPBackend.MATH),
        "sdpa-flash": lambda: sdpa(q, k, v, SDPBackend.FLASH_ATTENTION),
        "sdpa-auto": lambda: sdpa(q, k, v, None),
    }
    if device == "cuda":
        runs["sdpa-efficient"] = lambda: sdpa(q, k, v, SDPBackend.EFFICIENT_ATTENTION)
        runs["sdpa-cudnn"] = lambda: sdpa(q, k, v, SDPBackend.CUDNN_ATTENTION)
        from torch.nn.attention.flex_attention import create_block_mask, flex_attention

        bm = create_block_mask(lambda b, h, qi, ki: qi >= ki, None, None, S, S, device=device)
        flex = torch.compile(flex_attention)
        runs["flex"] = lambda: flex(q, k, v, block_mask=bm)
        inplace_c = torch.compile(lambda: naive(q, k, v, mask, True))
        runs["inplace+compile"] = inplace_c
    tag = f"{B}_{H}_{S}_{D}_bf16"
    record_all(runs, out, tag, "attn_fwd", activities)
    profile_fn(runs["naive"], out / f"{tag}_naive_shapes.json.gz", "attn_fwd", activities, shapes=True)


def record_all(runs: dict, out: Path, tag: str, region: str, activities, shapes=False, grad=False):
    for name, fn in runs.items():
        t0 = time.time()
        try:
            profile_fn(fn, out / f"{tag}_{name}.json.gz", region, activities, shapes=shapes, grad=grad)
            print(f"{tag}_{name}: ok {time.time() - t0:.1f}s", flush=True)
        except Exception as e:  # record and go on: one failing variant must not stop the rest
            print(f"{tag}_{name}: FAILED {type(e).__name__}: {' '.join(str(e).split())[:300]}", flush=True)


def inputs(B, Hq, Hkv, Sq, Sk, D, device, grad=False):
    g = torch.Generator(device=device).manual_seed(0)
    shapes = ((B, Hq, Sq, D), (B, Hkv, Sk, D), (B, Hkv, Sk, D))
    return tuple(torch.randn(s, device=device, dtype=torch.bfloat16, generator=g).requires_grad_(grad)
                 for s in shapes)


def expanded(q, k, v, mask, inplace=False):
    """Hand-written GQA: K/V copied out to the query heads, then the naive forward."""
    groups = q.shape[1] // k.shape[1]
    k, v = k.repeat_interleave(groups, dim=1), v.repeat_interleave(groups, dim=1)
    if mask is None:
        scores = torch.matmul(q, k.transpose(-2, -1)) * q.shape[-1] ** -0.5
        return torch.matmul(torch.softmax(scores, dim=-1), v)
    return naive(q, k, v, mask, inplace)


def sdpa_kw(q, k, v, backend, **kw):
    from torch.nn.attention import sdpa_kernel

    if backend is None:
        return F.scaled_dot_product_attention(q, k, v, **kw)
    with sdpa_kernel(backend):
        return F.scaled_dot_product_attention(q, k, v, **kw)


def train_traces(out: Path, device: str, activities):
    """One training step per profiler step: forward, then torch.autograd.grad of q, k and v."""
    from torch.nn.attention import SDPBackend
    from torch.nn.attention.flex_attention import create_block_mask, flex_attention

    B, H, S, D = (4, 16, 1024, 64) if device == "cuda" else (1, 2, 64, 32)
    q, k, v = inputs(B, H, H, S, S, D, device, grad=True)
    dout = torch.randn_like(q)
    mask = torch.ones(S, S, dtype=torch.bool, device=device).triu(1)
    forwards = {"naive": lambda: naive(q, k, v, mask, False), "inplace": lambda: naive(q, k, v, mask, True)}
    backends = {"math": SDPBackend.MATH, "flash": SDPBackend.FLASH_ATTENTION, "auto": None}
    if device == "cuda":
        backends |= {"efficient": SDPBackend.EFFICIENT_ATTENTION, "cudnn": SDPBackend.CUDNN_ATTENTION}
        bm = create_block_mask(lambda b, h, qi, ki: qi >= ki, None, None, S, S, device=device)
        flex = torch.compile(flex_attention)
        forwards["flex"] = lambda: flex(q, k, v, block_mask=bm)
    for name, backend in backends.items():
        forwards[f"sdpa-{name}"] = lambda backend=backend: sdpa_kw(q, k, v, backend, is_causal=True)

    def step(forward):
        return lambda: torch.autograd.grad(forward(), (q, k, v), dout)

    runs = {name: step(fwd) for name, fwd in forwards.items()}
    record_all(runs, out, f"train_{B}_{H}_{S}_{D}_bf16", "attn_step", activities, grad=True)


def decode_traces(out: Path, device: str, activities):
    """One new query per sequence against a KV cache; GQA with 4 query heads per K/V head."""
    from torch.nn.attention import SDPBackend
    from torch.nn.attention.flex_attention import flex_attention

    B, Hq, Hkv, S, D = (8, 32, 8, 8192, 128) if device == "cuda" else (2, 4, 1, 128, 32)
    q, k, v = inputs(B, Hq, Hkv, 1, S, D, device)
    runs = {"naive": lambda: expanded(q, k, v, None),
            "sdpa-math": lambda: sdpa_kw(q, k, v, SDPBackend.MATH, enable_gqa=True)}
    if device == "cuda":
        flex = torch.compile(flex_attention)
        runs |= {"sdpa-cudnn": lambda: sdpa_kw(q, k, v, SDPBackend.CUDNN_ATTENTION, enable_gqa=True),
                 "sdpa-flash": lambda: sdpa_kw(q, k, v, SDPBackend.FLASH_ATTENTION, enable_gqa=True),
                 "flex": lambda: flex(q, k, v, enable_gqa=True)}
    record_all(runs, out, f"decode_{B}_{Hq}_{Hkv}_{S}_{D}_bf16", "attn_fwd", activities, shapes=True)


def gqa_traces(out: Path, device: str, activities):
    """Grouped-query prefill: K/V expanded by hand against SDPA with enable_gqa."""
    B, Hq, Hkv, S, D = (2, 32, 8, 2048, 128) if device == "cuda" else (1, 4, 2, 64, 32)
    q, k, v = inputs(B, Hq, Hkv, S, S, D, device)
    mask = torch.ones(S, S, dtype=torch.bool, device=device).triu(1)
    runs = {"naive": lambda: expanded(q, k, v, mask),
            "sdpa-auto": lambda: sdpa_kw(q, k, v, None, is_causal=True, enable_gqa=True)}
    record_all(runs, out, f"gqa_{B}_{Hq}_{Hkv}_{S}_{D}_bf16", "attn_fwd", activities, shapes=True)


def window_traces(out: Path, device: str, activities):
    """A causal sliding window of 256: SDPA given it as a dense boolean mask, flex as a block mask."""
    from torch.nn.attention import SDPBackend
    from torch.nn.attention.flex_attention import create_block_mask, flex_attention

    W = 256 if device == "cuda" else 16
    B, H, S, D = (4, 16, 4096, 64) if device == "cuda" else (1, 2, 64, 32)
    q, k, v = inputs(B, H, H, S, S, D, device)
    pos = torch.arange(S, device=device)
    keep = (pos[None, :] <= pos[:, None]) & (pos[:, None] - pos[None, :] < W)  # [S, S], True: attend
    runs = {"sdpa-auto-dense": lambda: sdpa_kw(q, k, v, None, attn_mask=keep)}
    if device == "cuda":
        bm = create_block_mask(lambda b, h, qi, ki: (qi >= ki) & (qi - ki < W), None, None, S, S, device=device)
        flex = torch.compile(flex_attention)
        runs |= {"sdpa-efficient-dense": lambda: sdpa_kw(q, k, v, SDPBackend.EFFICIENT_ATTENTION, attn_mask=keep),
                 "flex": lambda: flex(q, k, v, block_mask=bm)}
    record_all(runs, out, f"window{W}_{B}_{H}_{S}_{D}_bf16", "attn_fwd", activities, shapes=True)


def llama(layers, hidden, attn, device):
    from transformers import LlamaConfig, LlamaForCausalLM

    cfg = LlamaConfig(
        hidden_size=hidden, intermediate_size=hidden * 11 // 4, num_hidden_layers=layers,
        num_attention_heads=16, num_key_value_heads=16, vocab_size=32000,
        max_position_embeddings=4096, attn_implementation=attn,
    )
    return LlamaForCausalLM(cfg).to(device=device, dtype=torch.bfloat16)


def llama_forward_traces(out: Path, device: str, activities):
    ids = torch.randint(0, 32000, (2, 512), device=device)
    for attn in ("eager", "sdpa"):
        model = llama(4, 512, attn, device).eval()
        profile_fn(lambda model=model: model(ids), out / f"llama_fwd_{attn}.json.gz", "model_fwd", activities)
        print(f"llama fwd {attn}: ok", flush=True)


def llama_train_trace(out: Path, device: str, activities):
    model = llama(12, 1024, "sdpa", device).train()
    opt = torch.optim.AdamW(model.parameters(), lr=1e-4)
    ids = torch.randint(0, 32000, (4, 1024), device=device)

    def step():
        loss = model(ids, labels=ids).loss
        loss.backward()
        opt.step()
        opt.zero_grad(set_to_none=True)

    for _ in range(3):
        step()
    sched = schedule(wait=1, warmup=1, active=6, repeat=1)
    with profile(activities=activities, schedule=sched, record_shapes=True, with_stack=True,
                 profile_memory=True) as prof:
        for _ in range(8):
            with record_function("train_step"):
                step()
            prof.step()
    raw = out / "llama_train.json"
    prof.export_chrome_trace(str(raw))
    with open(raw, "rb") as src, gzip.open(str(raw) + ".gz", "wb", compresslevel=6) as dst:
        dst.write(src.read())
    with open(raw) as f:
        n = len(json.load(f)["traceEvents"])
    print(f"llama train: {raw.stat().st_size / 1e6:.1f} MB, {n} events", flush=True)
    os.remove(raw)


SETS = {"attention": attention_traces, "llama": llama_forward_traces, "train": train_traces,
        "decode": decode_traces, "gqa": gqa_traces, "window": window_traces}


def main():
    p = argparse.ArgumentParser()
    p.add_argument("--out", type=Path, required=True)
    p.add_argument("--device", default="cuda" if torch.cuda.is_available() else "cpu")
    p.add_argument("--sets", default="attention,llama", help=f"comma-separated, of: {', '.join(SETS)}")
    p.add_argument("--llama-train", action="store_true")
    a = p.parse_args()
    a.out.mkdir(parents=True, exist_ok=True)
    acts = [ProfilerActivity.CPU] + ([ProfilerActivity.CUDA] if a.device == "cuda" else [])
    print(torch.__version__, torch.cuda.get_device_name() if a.device == "cuda" else "cpu", flush=True)
    for name in a.sets.split(","):
        SETS[name](a.out, a.device, acts)
    if a.llama_train:
        llama_train_trace(a.out, a.device, acts)


if __name__ == "__main__":
    main()
