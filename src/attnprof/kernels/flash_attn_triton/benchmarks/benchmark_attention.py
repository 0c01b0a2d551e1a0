"""`kernels benchmark` for this kernel: the hub's own tool times it against SDPA's cuDNN backend.

    kernels benchmark ./src/attnprof/kernels/flash_attn_triton      # on a CUDA GPU (sm_90)

Each workload has a `setup_`, a `benchmark_` (ours, timed) and a `verify_`: SDPA's cuDNN backend on the
same inputs, which the tool both compares with `self.out` (atol 1e-2; float16, ~1e-3 apart here) and
times as the reference, so its table puts the two side by side. Shapes: the article's problem and a
long causal one at head dim 128, on flash-attn's [B, S, H, D] layout.
"""

from __future__ import annotations

import torch
from kernels.benchmark import Benchmark

SHAPES = {"article": (8, 1024, 16, 64), "long": (4, 4096, 16, 128)}  # batch, seq, heads, head_dim; causal


class FlashAttnTritonBenchmark(Benchmark):
    seed = 0

    def _inputs(self, name: str) -> None:
        batch, seq, heads, head_dim = SHAPES[name]
        self.q, self.k, self.v = (torch.randn(batch, seq, heads, head_dim, device="cuda", dtype=torch.float16)
                                  for _ in range(3))
        self.out = torch.empty_like(self.q)

    def _ours(self) -> None:
        self.out = self.kernel.flash_attn_func(self.q, self.k, self.v, causal=True)

    def _cudnn(self) -> torch.Tensor:
        with torch.nn.attention.sdpa_kernel([torch.nn.attention.SDPBackend.CUDNN_ATTENTION]):
            out = torch.nn.functional.scaled_dot_product_attention(
                *(t.transpose(1, 2) for t in (self.q, self.k, self.v)), is_causal=True)
        return out.transpose(1, 2)

    def setup_article(self):
        self._inputs("article")

    def benchmark_article(self):
        self._ours()

    def verify_article(self) -> torch.Tensor:
        return self._cudnn()

    def setup_long(self):
        self._inputs("long")

    def benchmark_long(self):
        self._ours()

    def verify_long(self) -> torch.Tensor:
        return self._cudnn()
