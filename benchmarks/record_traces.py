"""Record reference traces with the article's harness, independently of attnprof.

These traces are the ground truth the analysis is checked against: they are made by
plain torch.profiler code (3 warm-up calls, schedule(wait=1, warmup=1, active=3), each
forward in record_function("attn_fwd")), exactly as the article's four scripts do.

    python benchmarks/record_traces.py --out DIR [--device cuda] [--llama-train]
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


def profile_fn(fn, path: Path, region: str, activities, shapes=False):
    with torch.no_grad():
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
    for name, fn in runs.items():
        t0 = time.time()
        try:
            profile_fn(fn, out / f"{tag}_{name}.json.gz", "attn_fwd", activities)
            print(f"{name}: ok {time.time() - t0:.1f}s", flush=True)
        except Exception as e:  # record and go on: one failing variant must not stop the rest
            print(f"{name}: FAILED {type(e).__name__}: {e}", flush=True)
    profile_fn(runs["naive"], out / f"{tag}_naive_shapes.json.gz", "attn_fwd", activities, shapes=True)


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


def main():
    p = argparse.ArgumentParser()
    p.add_argument("--out", type=Path, required=True)
    p.add_argument("--device", default="cuda" if torch.cuda.is_available() else "cpu")
    p.add_argument("--llama-train", action="store_true")
    a = p.parse_args()
    a.out.mkdir(parents=True, exist_ok=True)
    acts = [ProfilerActivity.CPU] + ([ProfilerActivity.CUDA] if a.device == "cuda" else [])
    print(torch.__version__, torch.cuda.get_device_name() if a.device == "cuda" else "cpu", flush=True)
    attention_traces(a.out, a.device, acts)
    llama_forward_traces(a.out, a.device, acts)
    if a.llama_train:
        llama_train_trace(a.out, a.device, acts)


if __name__ == "__main__":
    main()
