"""One cuDNN forward, one attention() call of attnprof's kernel (the Gluon forward on an H200) and one of
its plain-Triton kernel in its fastest configuration from triton_attention.json, for Nsight Compute:

    ncu --clock-control none --target-processes all -k regex:'flash_attn_triton|cudnn' --section Occupancy ... \\
        python3 benchmarks/kernel/triton_ncu_probe.py DIR/triton_attention.json s4096-d128-causal
"""

from __future__ import annotations

import json
import sys
from pathlib import Path

import torch
import triton
from torch.nn.attention import SDPBackend, sdpa_kernel

sys.path.insert(0, str(Path(__file__).resolve().parent))
from triton_kernel_path import load_flash_attn_triton  # noqa: E402

results = {r["shape"]["name"]: r for r in json.loads(Path(sys.argv[1]).read_text())}
shape = results[sys.argv[2]]
best = shape["ours_plain_best"]["config"]
config = triton.Config({k: v for k, v in best.items() if k.isupper()}, num_warps=best["num_warps"],
                       num_stages=best["num_stages"])
kernel, _ = load_flash_attn_triton()
s = shape["shape"]
dtype = {"bf16": torch.bfloat16, "fp16": torch.float16}[s["dtype"]]
q = torch.randn(s["batch"], s["heads"], s["seq"], s["head_dim"], device="cuda", dtype=dtype)
k, v = (torch.randn(s["batch"], s["kv_heads"], s["seq"], s["head_dim"], device="cuda", dtype=dtype) for _ in range(2))
with sdpa_kernel(SDPBackend.CUDNN_ATTENTION):
    torch.nn.functional.scaled_dot_product_attention(q, k, v, is_causal=s["causal"])
kernel.attention(q, k, v, causal=s["causal"])
kernel._launch.forward(q, k, v, causal=s["causal"], sm_scale=None, config=config)
torch.cuda.synchronize()
print("profiled cuDNN, attention() and", shape["ours_plain_best"]["label"])
