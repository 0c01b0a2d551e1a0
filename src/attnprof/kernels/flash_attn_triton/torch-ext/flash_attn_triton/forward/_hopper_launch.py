"""Host side of the Hopper (Gluon) forward: when it applies, its configurations, descriptors and launch.

It applies on sm_90 (wgmma and setmaxnreg are Hopper-only) to self-attention whose length is a multiple
of the 128-row tile, causal top-left or not, head dims 64 and 128, GQA included; anything else (decode,
ragged lengths, other GPUs, the interpreter) runs the plain Triton kernel. Gluon is Triton's
experimental dialect: if this Triton cannot compile the kernel, the first call warns once with the
reason and every call falls back to the plain kernel.
"""

from __future__ import annotations

import functools
import importlib
import warnings
from typing import NamedTuple

import torch

from .._tma_views import MatrixView, kernel_args, matrix_view


class HopperConfig(NamedTuple):
    """One configuration of the Gluon forward. setmaxnreg budgets: the producer warpgroup gives its registers
    to the two consumers (24 + 2 x 232 per thread x 128 threads = the SM's 64K registers: one program per SM).
    max_regs caps the registers at launch (ptxas' maxnreg): 80 lets two programs share an SM (registers are
    handed out 8 a thread at a time: 80 x 384 threads x 2 programs fits the SM's 64K, 85, rounded to 88, does
    not), each consumer then raised to 104 (2 x 104 + 24 per thread x 128 threads <= 80 x 384).
    persistent: one program per SM walks the tiles (_hopper_persistent.py), for short sequences.
    skip_above: a consumer releases the key blocks wholly above its 64 rows unread (causal, BLOCK_N 64: consumer
    0's last block of every tile, 8 of the 144 blocks the consumers of a head's 8 tiles compute at S=1024);
    not with pingpong, whose turns need every block from both consumers."""
    block_n: int
    stages: int
    overlap: bool
    pingpong: bool
    consumer_regs: int = 232
    producer_regs: int = 24
    max_regs: int | None = None
    persistent: bool = False
    skip_above: bool = False


# BY_SIZE names those attention() runs; the others are the steps docs/kernel.md measures
# (benchmarks/kernel/triton_ablation.py) and the candidates for small problems (benchmarks/kernel/triton_small.py)
CONFIGS = {"simple": HopperConfig(128, 2, False, False), "overlap": HopperConfig(128, 2, True, False),
           "pingpong": HopperConfig(128, 2, True, True), "pingpong_s3": HopperConfig(128, 3, True, True),
           "overlap_s3": HopperConfig(128, 3, True, False), "overlap_n64_s3": HopperConfig(64, 3, True, False),
           "overlap_n64_s4": HopperConfig(64, 4, True, False),
           "two_per_sm_n64_s2": HopperConfig(64, 2, True, False, 104, 24, 80),
           "two_per_sm_n64_s3": HopperConfig(64, 3, True, False, 104, 24, 80),
           "two_per_sm_n64_s2_skip": HopperConfig(64, 2, True, False, 104, 24, 80, skip_above=True),
           "two_per_sm_n64_s3_skip": HopperConfig(64, 3, True, False, 104, 24, 80, skip_above=True),
           "persistent": HopperConfig(128, 2, True, False, persistent=True),
           "persistent_s3": HopperConfig(128, 3, True, False, persistent=True),
           "persistent_n64_s4": HopperConfig(64, 4, True, False, persistent=True)}
BLOCK_M = 128
# Which configuration attention() runs, by head dim and the problem's FLOPs: the first whose least FLOPs the
# problem reaches; below them all, the plain kernel (_launch.SM90_CONFIGS). From the H200 (docs/kernel.md,
# 2026-12-02): the Gluon launch costs 43.9 us of host time against the plain kernel's 37.9 (cuDNN through SDPA
# 62.0), so the GPU work decides. At 2^34 FLOPs, causal, against cuDNN in the same process: head dim 128 (B4
# H16 S1024) overlap 0.964-0.974x, the plain kernel 0.793x; head dim 64 (B8 H16 S1024, the article's) two
# programs an SM 1.168x, overlap 0.930x, the plain kernel 0.958x (benchmarks/kernel/triton_small_quick.py). At head
# dim 64 overlap was measured from 2^37 (B4 H16 S4096 causal: 0.353 against 0.373 ms for the plain kernel);
# between 2^34 and 2^37 two programs an SM runs, measured at 2^34 only. There (2^34 up to 2^35) it skips consumer
# 0's key block above its rows: 62.8 against 65.2 / 65.0 us (the same configuration twice), cuDNN 61.3, 9
# alternating rounds (docs/kernel.md, 2026-12-02, benchmarks/device_runs/triton_article_h200.sh); unmeasured above 2^35.
# The same table on the H100: at D128 S4k-8k no other configuration was faster beyond the noise there
# (docs/kernel.md, "Second H100 run"; triton_vs_cudnn.py --part forward_configs, 5 alternating rounds).
BY_SIZE = {64: ((1 << 37, "overlap"), (1 << 35, "two_per_sm_n64_s2"), (1 << 34, "two_per_sm_n64_s2_skip")),
           128: ((1 << 34, "overlap"),)}
# A call that records a backward (a training step) takes these configurations only from more FLOPs than BY_SIZE
# says. On the H200 (docs/kernel.md, 2026-12-02, benchmarks/kernel/triton_step_forward_ab.py, 5 alternating rounds) the
# article's step (2^34) took 293.8 us with two programs an SM against 272.4 with the plain forward (cuDNN 258.6;
# host per step 331.1 against 282.3): there the step is host-bound, and the Gluon forward's host-made TMA
# descriptors cost more host time than its 13 us of GPU time save. Measured at 2^34 only; from 2^35 the step's
# GPU work (about twice the article's) is taken to hide it.
TRAINING_LEAST = {"two_per_sm_n64_s2": 1 << 35, "two_per_sm_n64_s2_skip": 1 << 35}
_broken: list[str] = []  # why this Triton cannot compile the kernel, once seen


def problem_flops(n_bh: int, seq: int, head_dim: int, causal: bool) -> int:
    """The two products' FLOPs of self-attention over n_bh heads, halved when causal."""
    return 4 * n_bh * seq * seq * head_dim // (2 if causal else 1)


def configuration(head_dim: int, flops: int, training: bool = False) -> str | None:
    """BY_SIZE's choice for this much work (in a training step, none below TRAINING_LEAST), or None (the plain
    kernel)."""
    return next((name for least, name in BY_SIZE[head_dim]
                 if flops >= (max(least, TRAINING_LEAST.get(name, 0)) if training else least)), None)


@functools.cache
def gluon_unavailable(kernel_module: str = "forward._hopper") -> str | None:
    """Why this Triton cannot import a Gluon kernel module of this package (and the host descriptors it
    launches with), or None: the forward's `forward._hopper` and the backward's `backward._backward_hopper` alike,
    named from the package's root (a name relative to forward/ made every backward on a GPU look unavailable)."""
    try:
        from triton.experimental.gluon.nvidia.hopper import TensorDescriptor  # noqa: F401

        importlib.import_module(f"..{kernel_module}", __package__)
    except Exception as e:  # an older Triton, or a Gluon whose API moved
        return f"Triton's Gluon Hopper API is unavailable ({type(e).__name__}: {e})"
    return None


def unsupported(q: torch.Tensor, k: torch.Tensor, causal: bool, causal_off: int, training: bool = False) -> str | None:
    """Why these inputs go to the plain kernel, or None when the Hopper kernel takes them (`training`: for a call
    that records a backward)."""
    if q.shape[3] not in BY_SIZE:  # 256, 192/128: the plain kernel's only (q's head dim 64 or 128 means v's too)
        return f"it has tiles for head dims {' and '.join(map(str, BY_SIZE))} only"
    if q.shape[2] != k.shape[2] or q.shape[2] % BLOCK_M:
        return f"it needs as many queries as keys, a multiple of {BLOCK_M}"
    if causal and causal_off:
        return "its causal mask is top-left aligned only"
    batch, heads, seq, head_dim = q.shape
    if configuration(head_dim, problem_flops(batch * heads, seq, head_dim, causal), training) is None:
        table = "TRAINING_LEAST" if training else "BY_SIZE"
        return f"the problem is too small for it to beat the plain kernel ({table})"
    if not q.is_cuda or torch.cuda.get_device_capability(q.device) != (9, 0):
        return "the Gluon forward is written for sm_90 (wgmma, setmaxnreg)"
    return _broken[0] if _broken else gluon_unavailable()


@functools.cache
def _shared_layout(block_rows: int, head_dim: int, dtype: torch.dtype):
    """The swizzled shared-memory layout of a [block_rows, head_dim] box: a pure function of its
    arguments, kept because building it is a fair share of the launch's host time."""
    from triton.experimental.gluon import language as gl

    element = {torch.bfloat16: gl.bfloat16, torch.float16: gl.float16}[dtype]
    return gl.NVMMASharedLayout.get_default_for([block_rows, head_dim], element)


def _descriptor(t: torch.Tensor, view: MatrixView, block_rows: int):
    """A TMA descriptor over t's matrix view (_tma_views.py), copying [block_rows, head_dim] boxes."""
    from triton.experimental.gluon.nvidia.hopper import TensorDescriptor

    head_dim = t.shape[-1]
    return TensorDescriptor(t, [view.rows, view.cols], [view.stride, 1], [block_rows, head_dim],
                            _shared_layout(block_rows, head_dim, t.dtype))


class CallDescriptor:
    """What Triton's launcher reads of a TensorDescriptor (base, shape, strides, padding: the driver's
    make_tensordesc_arg), for a later call of a planned shape: made without the dataclass's checks,
    which ran on the same shape, strides and alignment when the plan was made (a few us per call)."""
    __slots__ = ("base", "shape", "strides", "padding")

    def __init__(self, base: torch.Tensor, like):
        self.base, self.shape, self.strides, self.padding = base, like.shape, like.strides, like.padding


DESCRIPTOR_OF = {"Q": "desc_q", "K": "desc_k", "V": "desc_v", "Out": "desc_o"}  # kernel parameter per tensor
CALL_PARAMETERS = ("LSE", *DESCRIPTOR_OF.values())  # what every later call of a plan passes


def _kernel_constants(head_dim: int, causal: bool, config: HopperConfig) -> dict:
    return {"HEAD_DIM": head_dim, "BLOCK_N": config.block_n, "STAGES": config.stages, "CAUSAL": causal,
            "OVERLAP": config.overlap, "PINGPONG": config.pingpong, "CONSUMER_REGS": config.consumer_regs,
            "PRODUCER_REGS": config.producer_regs, "PRODUCER_WARPS": 4, "SKIP_ABOVE": config.skip_above}


def _options(config: HopperConfig) -> dict:
    return {"num_warps": 4, **({"maxnreg": config.max_regs} if config.max_regs else {})}


@functools.cache
def sm_count(device_index: int) -> int:
    """The device's SM count (every launch that sizes its grid by the SMs: the persistent forwards, decode)."""
    return torch.cuda.get_device_properties(device_index).multi_processor_count


def _kernel(config: HopperConfig):
    if config.persistent:
        from ._hopper_persistent import flash_attn_triton_fwd_hopper_persistent

        return flash_attn_triton_fwd_hopper_persistent
    from ._hopper import flash_attn_triton_fwd_hopper

    return flash_attn_triton_fwd_hopper


def _chosen_name(args: dict, meta: dict) -> str:
    flops = problem_flops(args["n_bh"], args["SQ"], meta["HEAD_DIM"], meta["CAUSAL"])
    return configuration(meta["HEAD_DIM"], flops) or BY_SIZE[meta["HEAD_DIM"]][-1][1]  # forced on: the smallest's


def launch_params(args: dict, meta: dict, head_group: int, config: str | None = None) -> tuple[tuple, dict, dict]:
    """(grid, every kernel argument by name, launch options) for _launch.launch_args()'s (args, meta); a
    persistent configuration takes one program per SM and one longest-first order over all heads."""
    from ._hopper import M_WG

    chosen = CONFIGS[config or _chosen_name(args, meta)]
    views = {name: matrix_view(args[name]) for name in DESCRIPTOR_OF}
    params = {desc: _descriptor(args[name], views[name], chosen.block_n if name in ("K", "V") else M_WG.value)
              for name, desc in DESCRIPTOR_OF.items()}
    for prefix, name in (("q", "Q"), ("k", "K"), ("v", "V"), ("o", "Out")):
        params |= kernel_args(prefix, views[name], ("row_b", "row_h", "col_h"))
    params |= {"LSE": args["LSE"], "qk_scale": args["qk_scale"], "n_bh": args["n_bh"], "SEQ": args["SQ"],
               "head_group": args["n_bh"] if chosen.persistent else head_group, "kv_group": meta["GROUP"],
               "HEADS": args["HEADS"], **_kernel_constants(meta["HEAD_DIM"], meta["CAUSAL"], chosen)}
    tiles = args["n_bh"] * args["SQ"] // BLOCK_M
    programs = min(tiles, sm_count(args["Q"].get_device())) if chosen.persistent else tiles
    return (programs,), params, _options(chosen)


def first_launch(args: dict, meta: dict, head_group: int, config: str | None = None):
    """Compile and launch on _launch.launch_args()'s (args, meta): (the CompiledLaunch for later calls of this
    shape, its descriptors by kernel parameter), or None, after one warning, when this Triton cannot compile
    the kernel."""
    from triton.compiler.errors import CompilationError

    from .._plans import CompiledLaunch

    grid, params, options = launch_params(args, meta, head_group, config)
    kernel = _kernel(CONFIGS[config or _chosen_name(args, meta)])
    try:
        return CompiledLaunch(kernel, grid, params, options, replaced=CALL_PARAMETERS), {
            desc: params[desc] for desc in DESCRIPTOR_OF.values()}
    except CompilationError as e:
        _broken.append(f"this Triton cannot compile the Gluon forward: {str(e).splitlines()[-1][:200]}")
        warnings.warn(f"flash_attn_triton: {_broken[0]}; using the plain Triton kernel", stacklevel=3)
        return None


def compile_for_sm90(head_dim: int, causal: bool, dtype: str = "bf16", config: str | None = None):
    """Compile the Hopper kernel for sm_90 without a GPU (Triton's own compiler and ptxas): what a user
    checks after changing a tile or a stage count, and what CPU tests check (shared memory, spills)."""
    import triton
    from triton.backends.compiler import GPUTarget
    from triton.experimental.gluon._runtime import GluonASTSource

    from ._hopper import M_WG

    chosen = CONFIGS[config or BY_SIZE[head_dim][0][1]]
    element = {"bf16": torch.bfloat16, "fp16": torch.float16}[dtype]

    def descriptor(rows: int) -> str:
        return f"tensordesc<{dtype}[{rows}, {head_dim}],{_shared_layout(rows, head_dim, element)!r}>"

    constants = _kernel_constants(head_dim, causal, chosen)
    signature = {"desc_q": descriptor(M_WG.value), "desc_k": descriptor(chosen.block_n),
                 "desc_v": descriptor(chosen.block_n),
                 "desc_o": descriptor(M_WG.value), "LSE": "*fp32", "qk_scale": "fp32", "n_bh": "i32", "SEQ": "i32",
                 "head_group": "i32", "kv_group": "i32", "HEADS": "i32",
                 **{f"{t}_{n}": "i32" for t in "qkvo" for n in ("row_b", "row_h", "col_h")},
                 **{name: "constexpr" for name in constants}}
    source = GluonASTSource(fn=_kernel(chosen), signature=signature, constexprs=constants)
    return triton.compile(source, target=GPUTarget("cuda", 90, 32), options=_options(chosen))
