"""The attention problem: shapes, dtype, inputs, reference output and its cost in FLOPs and bytes."""

from __future__ import annotations

from dataclasses import asdict, dataclass
from typing import TYPE_CHECKING

if TYPE_CHECKING:  # torch is imported lazily so `attnprof analyze` starts fast
    import torch

DTYPES = {"bf16": "bfloat16", "fp16": "float16", "fp32": "float32"}
DTYPE_BYTES = {"bf16": 2, "fp16": 2, "fp32": 4}
ARTICLE = dict(batch=8, heads=16, seq=1024, head_dim=64)  # the article's problem, for GPUs
CPU_DEFAULT = dict(batch=2, heads=8, seq=256, head_dim=64)  # finishes in about a minute on 2 cores
REFERENCE_CHUNK = 1 << 27  # float64 score elements per reference step (1 GiB)


@dataclass(frozen=True)
class Problem:
    batch: int = 8
    heads: int = 16
    seq: int = 1024
    head_dim: int = 64
    dtype: str = "bf16"
    causal: bool = True

    def __post_init__(self) -> None:
        for name in ("batch", "heads", "seq", "head_dim"):
            value = getattr(self, name)
            if not isinstance(value, int) or isinstance(value, bool) or value <= 0:
                raise ValueError(f"{name.replace('_', '-')} must be a positive integer, got {value!r}")
        if self.dtype not in DTYPES:
            raise ValueError(f"unknown dtype {self.dtype!r}; choose from {', '.join(DTYPES)}")

    @property
    def tag(self) -> str:
        """File-name stem that encodes the parameters, so runs accumulate side by side."""
        return f"{self.batch}_{self.heads}_{self.seq}_{self.head_dim}_{self.dtype}"

    def torch_dtype(self) -> torch.dtype:
        import torch

        return getattr(torch, DTYPES[self.dtype])

    def flops(self) -> float:
        """Forward FLOPs: two matmuls of 2*B*H*S*S*D each, halved when causal."""
        full = 4.0 * self.batch * self.heads * self.seq**2 * self.head_dim
        return full / 2 if self.causal else full

    def min_bytes(self) -> int:
        """Read Q, K, V and write O once each: the least any kernel must move."""
        return 4 * self.batch * self.heads * self.seq * self.head_dim * DTYPE_BYTES[self.dtype]

    def as_dict(self) -> dict:
        return {**asdict(self), "flops": self.flops(), "min_bytes": self.min_bytes()}


def make_inputs(problem: Problem, device: str, seed: int = 0) -> tuple[torch.Tensor, ...]:
    """Random q, k, v in [B, H, S, D] (random, never zeros: zeros hide wrong indexing)."""
    import torch

    gen = torch.Generator(device=device).manual_seed(seed)
    shape = (problem.batch, problem.heads, problem.seq, problem.head_dim)
    return tuple(
        torch.randn(shape, device=device, dtype=problem.torch_dtype(), generator=gen) for _ in range(3)
    )


def reference_output(q: torch.Tensor, k: torch.Tensor, v: torch.Tensor, causal: bool = True) -> torch.Tensor:
    """Attention in float64, a block of query rows at a time so long sequences fit in memory."""
    import torch

    heads, seq, dim = q.shape[1:]
    out = torch.empty(q.shape, dtype=torch.float64, device=q.device)
    rows = max(1, REFERENCE_CHUNK // (heads * seq))
    cols = torch.arange(seq, device=q.device)
    for b in range(q.shape[0]):
        k64, v64 = k[b].double(), v[b].double()  # [H, S, D]
        for r0 in range(0, seq, rows):
            q64 = q[b, :, r0 : r0 + rows].double()  # [H, R, D]
            scores = q64 @ k64.transpose(-2, -1) / dim**0.5  # [H, R, S]
            if causal:
                above = cols[None, :] > torch.arange(r0, r0 + q64.shape[1], device=q.device)[:, None]
                scores.masked_fill_(above, float("-inf"))
            out[b, :, r0 : r0 + rows] = torch.softmax(scores, dim=-1) @ v64
    return out
