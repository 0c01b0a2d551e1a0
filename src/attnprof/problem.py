"""The attention problem: what is run (a forward, a training step, a decode call), its shapes, mask and
dtype, its inputs and reference output, and its cost in FLOPs and bytes: the one accounting the roofline,
sweeps and reports use for every mode.

Shapes: q is [B, Hq, Sq, D], k and v are [B, Hkv, Sk, D]. A forward and a training step have
Sq = Sk = seq; a decode call has Sq = q_len new queries against a cache of Sk = seq tokens, and the
queries sit at the cache's last positions (the causal mask is aligned to the bottom right).
Masks: causal; none; window=W (causal, each query sees its last W keys); document=N (causal inside
documents of N tokens each, packed one after another).
"""

from __future__ import annotations

from dataclasses import asdict, dataclass, fields
from typing import TYPE_CHECKING

if TYPE_CHECKING:  # torch is imported lazily so `attnprof analyze` starts fast
    import torch

DTYPES = {"bf16": "bfloat16", "fp16": "float16", "fp32": "float32"}
DTYPE_BYTES = {"bf16": 2, "fp16": 2, "fp32": 4}
MODES = ("fwd", "train", "decode")
MASK_KINDS = ("causal", "none", "window", "document")
ARTICLE = dict(batch=8, heads=16, seq=1024, head_dim=64)  # the article's problem, for GPUs
CPU_DEFAULT = dict(batch=2, heads=8, seq=256, head_dim=64)  # finishes in about a minute on 2 cores
REFERENCE_CHUNK = 1 << 27  # float64 score elements per reference step (1 GiB)
BACKWARD_FLOPS = 2.5  # a backward does 2.5x the forward's matmul work (5 matmuls against 2)
TILE = 128  # the tile size fused kernels skip fully masked blocks at (flash, cuDNN, flex)


@dataclass(frozen=True)
class Mask:
    """Which keys each query may attend: `kind` one of MASK_KINDS, `size` the window's or the documents'
    length (None for causal and none). Written as the option is: causal, none, window=W, document=N."""

    kind: str = "causal"
    size: int | None = None

    @classmethod
    def parse(cls, text: str) -> Mask:
        """`causal` -> Mask('causal'); `window=256` -> Mask('window', 256); raises ValueError when malformed."""
        kind, _, size = str(text).partition("=")
        if kind not in MASK_KINDS or (kind in ("window", "document")) != bool(size):
            raise ValueError(f"unknown mask {text!r}; choose causal, none, window=W or document=N")
        if not size:
            return cls(kind)
        if not size.isdigit() or int(size) <= 0:
            raise ValueError(f"--mask {text}: {kind} size must be a positive integer")
        return cls(kind, int(size))

    def __str__(self) -> str:
        return self.kind if self.size is None else f"{self.kind}={self.size}"


@dataclass(frozen=True)
class Problem:
    batch: int = 8
    heads: int = 16
    seq: int = 1024
    head_dim: int = 64
    dtype: str = "bf16"
    mode: str = "fwd"
    kv_heads: int | None = None  # None: as many as the query heads
    mask: Mask = Mask()  # text (`window=256`) is parsed on construction
    dense_mask: bool = False  # pass the mask as a materialized boolean [Sq, Sk] tensor
    q_len: int | None = None  # decode only: new queries per call (default 1)

    def __post_init__(self) -> None:
        for name in ("batch", "heads", "seq", "head_dim"):
            _positive(name, getattr(self, name))
        if self.dtype not in DTYPES:
            raise ValueError(f"unknown dtype {self.dtype!r}; choose from {', '.join(DTYPES)}")
        if self.mode not in MODES:
            raise ValueError(f"unknown mode {self.mode!r}; choose from {', '.join(MODES)}")
        kv = self.heads if self.kv_heads is None else _positive("kv-heads", self.kv_heads)
        if self.heads % kv:
            raise ValueError(f"kv-heads must divide heads ({self.heads}), got {kv}")
        object.__setattr__(self, "kv_heads", kv)
        if self.q_len not in (None, self.seq) and self.mode != "decode":
            raise ValueError("--q-len is for --mode decode (a forward and a training step have q-len = seq)")
        q_len = _positive("q-len", self.q_len) if self.q_len is not None else 1 if self.mode == "decode" else self.seq
        if q_len > self.seq:
            raise ValueError(f"q-len ({q_len}) cannot exceed the cache length --seq ({self.seq})")
        object.__setattr__(self, "q_len", q_len)
        if isinstance(self.mask, str):
            object.__setattr__(self, "mask", Mask.parse(self.mask))
        if self.mask.size is not None and self.mask.size > self.seq:
            raise ValueError(f"--mask {self.mask}: {self.mask.size} is longer than --seq ({self.seq})")
        if self.dense_mask and self.mask.kind == "none":
            raise ValueError("--dense-mask needs a mask (--mask causal, window=W or document=N)")

    @classmethod
    def from_dict(cls, d: dict) -> Problem:
        """A problem from `as_dict` output (derived keys ignored); an older record's causal=False is mask none."""
        given = {f.name: d[f.name] for f in fields(cls) if f.name in d}
        if "mask" not in given and d.get("causal") is False:
            given["mask"] = "none"
        return cls(**given)

    @property
    def causal(self) -> bool:
        return self.mask.kind != "none"

    @property
    def groups(self) -> int:
        """Query heads per K/V head: 1 for multi-head, heads for multi-query attention."""
        return self.heads // self.kv_heads

    @property
    def offset(self) -> int:
        """Position of the first query in the key sequence (decode queries follow the cache)."""
        return self.seq - self.q_len

    @property
    def unit(self) -> str:
        return "step" if self.mode == "train" else "forward"

    @property
    def tag(self) -> str:
        """File-name stem that encodes the parameters, so runs accumulate side by side (the article's
        problem keeps its plain tag; each departure from it adds a suffix)."""
        tag = f"{self.batch}_{self.heads}_{self.seq}_{self.head_dim}_{self.dtype}"
        if self.mode == "decode":
            tag += f"_decode{self.q_len}"
        elif self.mode == "train":
            tag += "_train"
        if self.kv_heads != self.heads:
            tag += f"_kv{self.kv_heads}"
        if self.mask.kind != "causal":
            tag += "_" + str(self.mask).replace("=", "")
        return tag + ("_dense" if self.dense_mask else "")

    def torch_dtype(self) -> torch.dtype:
        import torch

        return getattr(torch, DTYPES[self.dtype])

    def attended_pairs(self) -> float:
        """(query, key) pairs the mask keeps, per batch and head: the work a kernel that skips masked
        tiles must do. A square causal mask counts half the square (the usual convention)."""
        kind, size = self.mask.kind, self.mask.size
        sq, sk, off = self.q_len, self.seq, self.offset
        if kind == "none":
            return float(sq * sk)
        if kind == "causal" and sq == sk:
            return sq * sk / 2
        if kind == "document":
            return float(sum(p % size + 1 for p in range(off, off + sq)))
        reach = size if kind == "window" else sk  # causal: each query sees every key up to itself
        return float(sum(min(p + 1, reach) for p in range(off, off + sq)))

    def forward_flops(self) -> float:
        """QK^T and PV, 2 FLOPs per multiply-add each, over the attended pairs of every query head."""
        return 4.0 * self.batch * self.heads * self.head_dim * self.attended_pairs()

    def flops(self) -> float:
        """Useful FLOPs per call: a forward, or a training step (forward + backward at 2.5x)."""
        return self.forward_flops() * (1 + BACKWARD_FLOPS if self.mode == "train" else 1)

    def min_bytes(self) -> int:
        """The least any kernel must move per call: q, k, v (K/V at their own head count) and the mask
        when dense are read and the output written once; a training step's backward also reads q, k,
        v, the output and its gradient and writes the three gradients (and reads the mask again)."""
        e = DTYPE_BYTES[self.dtype]
        q_side = self.batch * self.heads * self.q_len * self.head_dim * e  # q, out, d_out, dq
        kv_side = self.batch * self.kv_heads * self.seq * self.head_dim * e  # k, v, dk, dv
        mask = self.q_len * self.seq if self.dense_mask else 0  # one bool per (query, key)
        forward = 2 * q_side + 2 * kv_side + mask
        return forward + (4 * q_side + 4 * kv_side + mask if self.mode == "train" else 0)

    def kv_cache_bytes(self) -> int:
        """K and V as stored: what a decode call must read."""
        return 2 * self.batch * self.kv_heads * self.seq * self.head_dim * DTYPE_BYTES[self.dtype]

    def masked_tile_share(self, tile: int = TILE) -> float:
        """Share of the [Sq, Sk] score tiles (tile x tile) that the mask empties: what a kernel that
        skips them saves, and what one given a dense mask computes for nothing."""
        tiles = empty = 0
        for r0 in range(0, self.q_len, tile):
            rows = range(self.offset + r0, self.offset + min(r0 + tile, self.q_len))
            for c0 in range(0, self.seq, tile):
                tiles += 1
                empty += not self._tile_meets(rows, c0, min(c0 + tile, self.seq))
        return empty / tiles

    def _tile_meets(self, rows: range, lo: int, hi: int) -> bool:
        """Whether any query position in `rows` keeps a key in [lo, hi). Each position p keeps the keys
        [first(p), p], first never decreasing with p: the first row at or past lo decides."""
        kind, size = self.mask.kind, self.mask.size
        if kind == "none":
            return True
        p = max(lo, rows.start)
        first = 0 if kind == "causal" else max(0, p - size + 1) if kind == "window" else p - p % size
        return p < rows.stop and first < hi

    def as_dict(self) -> dict:
        return {**asdict(self), "mask": str(self.mask), "causal": self.causal, "unit": self.unit, "flops": self.flops(),
                "min_bytes": self.min_bytes()}



def default_problem(device: str, given: dict) -> tuple[Problem, bool]:
    """The article's problem on a GPU, a smaller one on CPU, with the `given` fields (None: not given);
    True when the CPU default was used."""
    given = {k: v for k, v in given.items() if v is not None}
    base = ARTICLE if device == "cuda" else CPU_DEFAULT
    shrunk = device != "cuda" and not any(k in given for k in ARTICLE)
    return Problem(**{**base, **given}), shrunk


def _positive(name: str, value) -> int:
    if not isinstance(value, int) or isinstance(value, bool) or value <= 0:
        raise ValueError(f"{name.replace('_', '-')} must be a positive integer, got {value!r}")
    return value


def allowed(problem: Problem, device: str, rows: range | None = None) -> torch.Tensor:
    """The mask as a boolean [rows, Sk] tensor, True where a query may attend (SDPA's convention);
    rows: query indices, default all of them."""
    import torch

    rows = rows if rows is not None else range(problem.q_len)
    q = torch.arange(rows.start, rows.stop, device=device)[:, None] + problem.offset
    k = torch.arange(problem.seq, device=device)[None, :]
    kind, size = problem.mask.kind, problem.mask.size
    if kind == "none":
        return torch.ones(len(rows), problem.seq, dtype=torch.bool, device=device)
    keep = k <= q
    if kind == "window":
        keep &= q - k < size
    elif kind == "document":
        keep &= q // size == k // size
    return keep


def make_inputs(problem: Problem, device: str, seed: int = 0) -> tuple[torch.Tensor, ...]:
    """Random q [B, Hq, Sq, D], k and v [B, Hkv, Sk, D] (random, never zeros: zeros hide wrong indexing)."""
    import torch

    gen = torch.Generator(device=device).manual_seed(seed)
    b, d = problem.batch, problem.head_dim
    shapes = ((b, problem.heads, problem.q_len, d), (b, problem.kv_heads, problem.seq, d),
              (b, problem.kv_heads, problem.seq, d))
    return tuple(torch.randn(s, device=device, dtype=problem.torch_dtype(), generator=gen) for s in shapes)


def reference_output(q: torch.Tensor, k: torch.Tensor, v: torch.Tensor, problem: Problem | None = None
                     ) -> torch.Tensor:
    """Attention in float64, a block of query rows at a time so long sequences fit in memory
    (problem: the mask and the grouping of heads; default a square causal multi-head problem)."""
    import torch

    batch, heads, sq, dim = q.shape
    problem = problem or Problem(batch=batch, heads=heads, seq=k.shape[2], head_dim=dim)
    out = torch.empty(q.shape, dtype=torch.float64, device=q.device)
    rows = max(1, REFERENCE_CHUNK // (heads * k.shape[2]))
    for b in range(batch):
        k64 = k[b].double().repeat_interleave(problem.groups, dim=0)  # [Hq, Sk, D]
        v64 = v[b].double().repeat_interleave(problem.groups, dim=0)
        for r0 in range(0, sq, rows):
            span = range(r0, min(r0 + rows, sq))
            scores = q[b, :, r0 : span.stop].double() @ k64.transpose(-2, -1) / dim**0.5  # [Hq, R, Sk]
            scores.masked_fill_(~allowed(problem, str(q.device), span), float("-inf"))
            out[b, :, r0 : span.stop] = torch.softmax(scores, dim=-1) @ v64
    return out
