"""Host side of the forward: checks, the autotuned configurations and the launch.

Autotuning picks one configuration per (query length, key length, head dim, causal, GQA group, dtype),
remembers it for the process and keeps the timings in Triton's cache folder (cache_results), so a
later process with the same shapes skips the search.
Under TRITON_INTERPRET=1 (CPU, CI) one small fixed configuration runs instead, with no timing.
"""

from __future__ import annotations

import contextlib
import math
import operator
import os

import torch
import triton

from ._arguments import check_scale_value
from ._head_tiles import check_head_dims, head_dim_constexprs
from ._tma_views import as_launched, empty_in_layout_of, kernel_args, matrix_view
from .forward import _hopper_launch
from .forward._forward import LOG2_E, flash_attn_triton_fwd
from .forward._hopper_launch import sm_count

DTYPES = (torch.float16, torch.bfloat16)
INTERPRETER_PROGRAMS = 3  # the interpreter's stand-in for the SM count, so that persistent programs loop


def interpreting() -> bool:
    return os.environ.get("TRITON_INTERPRET", "0") not in ("", "0")


def wants_grad(q: torch.Tensor, k: torch.Tensor, v: torch.Tensor) -> bool:
    """Whether autograd will record this call; when not, the forward runs without an autograd.Function,
    whose bookkeeping is host time per call."""
    return torch.is_grad_enabled() and (q.requires_grad or k.requires_grad or v.requires_grad)


def cdiv(a: int, b: int) -> int:
    """ceil(a / b) for the host side: triton.cdiv is a jit-able function whose Python call costs ~10 us"""
    return -(-a // b)


def next_power_of_2(n: int) -> int:
    """The host side's triton.next_power_of_2 (same reason as cdiv)."""
    return 1 << max(n - 1, 0).bit_length()


_SCRATCH: dict = {}  # (device, stream): the largest scratch buffer handed out on that stream


def _scratch(size: int, alignment: int, stream) -> torch.Tensor:
    """Global memory in which each program writes its TMA descriptors (tl.make_tensor_descriptor).

    Kept per stream and reused (an allocation per launch cost ~3 us of host time): launches on one stream
    run one after another, so two never write the same buffer at once. Under CUDA graph capture every
    launch gets its own, from the graph's pool, since a replay may run beside other work on the stream."""
    if torch.cuda.is_current_stream_capturing():
        return torch.empty(size, dtype=torch.int8, device="cuda")
    key = (torch.cuda.current_device(), stream)
    buffer = _SCRATCH.get(key)
    if buffer is None or buffer.numel() < size:
        buffer = _SCRATCH[key] = torch.empty(size, dtype=torch.int8, device="cuda")
    return buffer


def _ensure_allocator() -> None:
    """Install the scratch allocator unless the caller has set one of their own."""
    from triton.runtime import _allocation

    if isinstance(_allocation._allocator.get(), _allocation.NullAllocator):
        triton.set_allocator(_scratch)


# (warp specialised, persistent, BLOCK_N, stages, head dims): the configurations that fit in 227 KiB of
# shared memory, read off sm_90 compiles with Triton 3.6 (benchmarks/kernel/triton_compile_check.py prints them;
# the warp-specialised persistent ones keep 24-48 bytes of per-tile state on the stack). Left out: every
# warp-specialised configuration with 3 stages, which compiles and fits but returned NaN rows on the H200
# (head dims 64 and 128, BLOCK_N 64 and 128, persistent or not; benchmarks/kernel/triton_attention.py, 2026-11-30)
TUNED = [
    (True, False, 64, 2, (64, 128, 256)), (True, False, 128, 2, (64, 128, 192)),
    (True, True, 64, 2, (64, 128)), (True, True, 128, 2, (64, 128)),
    (False, False, 64, 3, (64, 128)), (False, False, 64, 4, (64, 128)), (False, False, 128, 2, (64, 128)),
    (False, False, 128, 3, (64, 128)), (False, True, 64, 3, (64, 128)), (False, True, 128, 2, (64, 128)),
    (False, True, 128, 3, (64,)),
    (False, False, 64, 2, (192, 256)),  # Q/K 256 or 192 (128 + 64) wide: SM90_CONFIGS' before session 22
]


def make_config(block_n: int, stages: int, *, ws: bool, persistent: bool, warps: int = 8,
                block_m: int = 128) -> triton.Config:
    kwargs = {"BLOCK_M": block_m, "BLOCK_N": block_n, "FUSED_LOOP": ws, "WARP_SPECIALIZE": ws,
              "PERSISTENT": persistent}
    # warp specialisation adds a producer warpgroup to num_warps=4; two consumer warpgroups split BLOCK_M
    return triton.Config(kwargs, num_warps=4 if ws else warps, num_stages=stages)


def candidate_configs() -> list[triton.Config]:
    """Every configuration the autotuner may try."""
    configs = [make_config(block_n, stages, ws=ws, persistent=persistent)
               for ws, persistent, block_n, stages, _ in TUNED]
    # 64-row tiles, one warpgroup: more programs for short sequences
    return configs + [make_config(block_n, 3, ws=False, persistent=False, warps=4, block_m=64) for block_n in (64, 128)]


# TUNED's last column by each configuration's text, not kept on the Config: Triton's autotuner rebuilds
# Configs from their attributes when it reads its disk cache, and an extra attribute makes that fail
_HEAD_DIMS_BY_CONFIG = {str(make_config(block_n, stages, ws=ws, persistent=persistent)): dims
                        for ws, persistent, block_n, stages, dims in TUNED}


def head_dims_of(config: triton.Config) -> tuple[int, ...]:
    """The Q/K head dims a configuration fits (the 64-row ones, outside TUNED, fit 64 and 128)."""
    return _HEAD_DIMS_BY_CONFIG.get(str(config), (64, 128))


def prune_configs(configs: list[triton.Config], named_args: dict, **kwargs) -> list[triton.Config]:
    args = {**named_args, **kwargs}  # the autotuner passes positional arguments by name, the rest as keywords
    fits = [c for c in configs if args["HEAD_DIM_QK"] in head_dims_of(c)]
    # a key block wider than the keys only wastes work; keep at least one configuration
    short = [c for c in fits if c.kwargs["BLOCK_N"] <= max(64, triton.next_power_of_2(args["SK"]))]
    return short or fits


def grid(meta: dict) -> tuple[int]:
    # triton.cdiv, not cdiv(): under the interpreter the JIT hands grid() its own int32 tensors, whose // rounds
    # toward zero, so -(-a // b) would drop the last partial row block
    tiles = triton.cdiv(meta["SQ"], meta["BLOCK_M"]) * meta["n_bh"]
    if not meta["PERSISTENT"]:
        return (tiles,)
    # Triton launches on the current device; under the interpreter a few programs stand for the SMs
    programs = INTERPRETER_PROGRAMS if interpreting() else sm_count(torch.cuda.current_device())
    return (min(tiles, programs),)


L2_GROUP_BYTES = 16 << 20  # K and V of the heads a causal launch works on at once: a third of the H200's L2


def head_group(args: dict) -> int:
    """How many heads a causal launch interleaves, longest query blocks first across them.

    Longest-first inside a group of heads leaves the short tiles for the end of the launch (less tail),
    while the group's keys and values stay in L2. Measured on the H200 at S=4096, B=4 H=16 D=128:
    groups of 4-8 heads 0.585 ms against 0.621 ms head by head. Not for persistent programs: their fixed
    stride would hand each program the same rank in every group, always the longest or the shortest.
    """
    if not args["CAUSAL"] or args["PERSISTENT"]:
        return 1
    kv_bytes_per_head = 2 * args["SK"] * args["HEAD_DIM"] * args["Q"].element_size() // args["GROUP"]
    return max(1, min(args["n_bh"], L2_GROUP_BYTES // kv_bytes_per_head))


def launch_head_group(args: dict, meta: dict) -> int:
    """head_group() for one program per tile on launch_args()'s (args, meta): the Gluon forward's order."""
    return head_group({**args, **meta, "PERSISTENT": False})


even_n = triton.heuristics({"EVEN_N": lambda a: a["SK"] % a["BLOCK_N"] == 0, "HEAD_GROUP": head_group})
tuned_fwd = triton.autotune(candidate_configs(), key=["SQ", "SK", "HEAD_DIM", "HEAD_DIM_QK", "HEAD_DIM_V", "CAUSAL",
                                                    "GROUP", "causal_off"],
                            prune_configs_by={"early_config_prune": prune_configs}, cache_results=True)(
                                even_n(flash_attn_triton_fwd))
fixed_fwd = even_n(flash_attn_triton_fwd)  # one configuration, given by the caller: the interpreter and the benchmarks
# small tiles, several key blocks per row block, no Hopper-only paths: what TRITON_INTERPRET=1 runs
INTERPRETER_CONFIG = make_config(16, 1, ws=False, persistent=False, warps=4, block_m=32)


# The plain kernel's configuration per head dim on sm_90, shipped so that no call autotunes: chosen on the H200
# by benchmarks/kernel/triton_backward.py --sweep (every candidate at the small problems) and
# benchmarks/kernel/triton_small.py (docs/kernel.md). Head dim 64, at the article's B8 H16 S1024 causal: 77.8 us
# with 4 warps (two programs an SM), 79.1 with 8, cuDNN 61.3 (2026-12-02; 99 us for the warp-specialised one in
# the sweep before). Head dim 128: 0.70 ms at B16 S2048 causal, where the Gluon forward runs (0.58 ms).
# Head dims 256 and 192 (v 128), by q/k's head dim: Triton's warp specialisation (a producer warpgroup, two
# consumer ones), 64 keys a block at 256 and 128 at 192 (Q and K as 128 + 64 columns fit it: 168 registers, 229776
# bytes of shared memory, no spill; benchmarks/kernel/plain_kernels_sm90.py new). The fastest of
# benchmarks/kernel/triton_wide_configs.py on an H100 (session 22, B2 H16 S4096 causal, 5 alternating rounds):
# 0.89x the time of the 8-warp 64-key form shipped before at 256 (0.87-0.91), 0.77x at 192 (0.76-0.78); not
# measured on the H200.
SM90_CONFIGS = {64: make_config(64, 3, ws=False, persistent=False, warps=4),
                128: make_config(128, 2, ws=True, persistent=False),
                192: make_config(128, 2, ws=True, persistent=False),
                256: make_config(64, 2, ws=True, persistent=False)}


def autotuning() -> bool:
    """FLASH_ATTN_TRITON_AUTOTUNE=1: search TUNED per shape (tens of seconds of compiling a shape) instead."""
    return os.environ.get("FLASH_ATTN_TRITON_AUTOTUNE", "0") not in ("", "0")


def atomic_dq() -> bool:
    """FLASH_ATTN_TRITON_ATOMIC_DQ=1: the single-pass backward (float32 atomic dQ) unless a deterministic one
    is asked for; slower than the two-pass one on the H200 with Triton 3.6 (docs/kernel.md), so not the default."""
    return os.environ.get("FLASH_ATTN_TRITON_ATOMIC_DQ", "0") not in ("", "0")


def check_inputs(q: torch.Tensor, k: torch.Tensor, v: torch.Tensor) -> None:
    if q.dim() != 4 or k.dim() != 4 or v.dim() != 4:
        raise ValueError(f"q, k, v must be [batch, heads, seq, head_dim]; got {tuple(q.shape)}, "
                         f"{tuple(k.shape)}, {tuple(v.shape)}")
    if k.shape[:3] != v.shape[:3] or q.shape[0] != k.shape[0] or q.shape[3] != k.shape[3]:
        raise ValueError(f"k and v must match each other (but v's head_dim) and q's batch and head_dim; got q "
                         f"{tuple(q.shape)}, k {tuple(k.shape)}, v {tuple(v.shape)}")
    if q.shape[1] == 0 or k.shape[1] == 0:
        raise ValueError(f"q and k/v need at least one head each; got {q.shape[1]} query and {k.shape[1]} key/value")
    if q.shape[1] % k.shape[1]:
        raise ValueError(f"query heads ({q.shape[1]}) must be a multiple of key/value heads ({k.shape[1]})")
    check_head_dims(q.shape[3], v.shape[3])
    if q.dtype not in DTYPES or k.dtype != q.dtype or v.dtype != q.dtype:
        raise ValueError(f"q, k, v must all be float16 or bfloat16; got {q.dtype}, {k.dtype}, {v.dtype}")
    if q.dtype == torch.bfloat16 and interpreting():
        raise ValueError("bfloat16 is refused under Triton's interpreter, which multiplies bfloat16 dot operands as "
                         "raw bits and returns wrong results (triton-lang/triton#11584); use float16 there")


def check_causal_offset(causal_off) -> int:
    """The diagonal's shift as an int (NumPy and 0-d integer tensors too): a float or a bool would move the
    mask by a rounded or unintended amount, so it is refused."""
    if not isinstance(causal_off, bool):
        with contextlib.suppress(TypeError):
            return operator.index(causal_off)
    raise TypeError(f"causal_offset must be an int; got {type(causal_off).__name__} {causal_off!r}")


def softmax_scale(head_dim: int, sm_scale: float | None, name: str = "sm_scale") -> float:
    """The scale of the scores: 1/sqrt(head_dim) unless given; positive and finite (`name`: the caller's
    argument, for the error): a bool or anything not a real number is refused."""
    if sm_scale is None:
        return head_dim ** -0.5
    check_scale_value(sm_scale, name)
    scale = float(sm_scale)
    if not scale > 0 or math.isinf(scale):
        raise ValueError(f"{name} must be positive and finite; got {sm_scale}")
    return scale


def launch_args(q: torch.Tensor, k: torch.Tensor, v: torch.Tensor, causal: bool, sm_scale: float | None,
                causal_off: int = 0) -> tuple[dict, dict]:
    """The plain kernel's runtime arguments by name (q, k, v where they lie, or copied where a TMA
    descriptor cannot read them; the output, in q's layout, and the LSE allocated here) and its constexprs."""
    check_inputs(q, k, v)
    causal_off = check_causal_offset(causal_off)
    if causal and causal_off < 0:
        raise ValueError("causal attention with more queries than keys (bottom-right aligned) is not supported")
    batch, heads, sq, head_dim = q.shape
    scale = softmax_scale(head_dim, sm_scale)
    out = empty_in_layout_of(q, v.shape[3])  # the caller's layout, whether q is copied or not (the fake op's too)
    (q, q_view), (k, k_view), (v, v_view) = (as_launched(t) for t in (q, k, v))
    lse = torch.empty((batch, heads, sq), device=q.device, dtype=torch.float32)
    o_view = matrix_view(out)
    args = {"Q": q, "K": k, "V": v, "Out": out, "LSE": lse, "qk_scale": scale * LOG2_E, "n_bh": batch * heads,
            "SQ": sq, "SK": k.shape[2], "causal_off": causal_off, "HEADS": heads, **kernel_args("q", q_view),
            **kernel_args("k", k_view), **kernel_args("v", v_view),
            **kernel_args("o", o_view, ("stride", "row_b", "row_h", "col_h"))}
    return args, {"GROUP": heads // k.shape[1], **head_dim_constexprs(q, v), "CAUSAL": bool(causal)}


def forward(q: torch.Tensor, k: torch.Tensor, v: torch.Tensor, *, causal: bool, sm_scale: float | None,
            causal_off: int = 0, config: triton.Config | None = None) -> tuple[torch.Tensor, torch.Tensor]:
    """Attention over [B, H, S, D] tensors of any layout _tma_views takes without a copy: (output in q's
    layout, natural-log LSE [B, H, S] in float32).

    causal_off shifts the diagonal: key j is visible to query i when j <= i + causal_off (0: SDPA's
    top-left alignment; Sk - Sq: flash-attn's bottom-right). On sm_90 the Gluon forward runs where it
    applies (_hopper_launch.unsupported), else the plain kernel in its shipped configuration (SM90_CONFIGS;
    FLASH_ATTN_TRITON_AUTOTUNE=1 searches TUNED instead); `config` forces one plain configuration.
    """
    args, meta = launch_args(q, k, v, causal, sm_scale, causal_off)
    if config is None and interpreting():
        config = INTERPRETER_CONFIG
    hopper = config is None and _hopper_launch.unsupported(q, k, causal, causal_off) is None
    if hopper and _hopper_launch.first_launch(args, meta, launch_head_group(args, meta)):  # None: it fell back
        return args["Out"], args["LSE"]
    if q.is_cuda:
        _ensure_allocator()
    if config is None and autotuning():
        tuned_fwd[grid](**args, **meta)
    else:
        config = config or SM90_CONFIGS[meta["HEAD_DIM_QK"]]
        fixed_fwd[grid](**args, **meta, **config.kwargs, num_warps=config.num_warps, num_stages=config.num_stages)
    return args["Out"], args["LSE"]


def plain_params(args: dict, meta: dict, config: triton.Config) -> tuple[tuple, dict, dict]:
    """(grid, every argument of the plain kernel by name, launch options): what fixed_fwd's heuristics and
    grid() would compute, for a launch that bypasses them (_plans)."""
    params = {**args, **meta, **config.kwargs}
    params["EVEN_N"] = params["SK"] % params["BLOCK_N"] == 0
    params["HEAD_GROUP"] = head_group(params)
    return grid(params), params, {"num_warps": config.num_warps, "num_stages": config.num_stages}


def compile_config(q: torch.Tensor, k: torch.Tensor, v: torch.Tensor, causal: bool, config: triton.Config) -> None:
    """Compile one configuration for these inputs' dtype and shapes without running it (benchmarks
    compile every configuration in parallel processes first; Triton's cache then serves the launch)."""
    args, meta = launch_args(q, k, v, causal, None)
    fixed_fwd.warmup(**args, grid=(1,), **meta, **config.kwargs, num_warps=config.num_warps,
                     num_stages=config.num_stages)
