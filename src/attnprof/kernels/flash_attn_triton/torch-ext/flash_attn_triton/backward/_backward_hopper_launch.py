"""Host side of the Hopper (Gluon) backward (_backward_hopper.py): whether it runs, its descriptors and its
three launches (the single pass's delta + zeroing, the warp-specialised dK/dV/dQ pass, dQ's conversion).

It takes inputs like the Gluon forward's (sm_90, Sq = Sk a multiple of 128, causal top-left or none, head
dims 64 and 128, GQA), and the masked backward's sliding windows on such inputs (masked_backward.py). dQ is
summed by float32 TMA reduce-adds, in no fixed order unless a deterministic backward is asked for: then in a
fixed one (the kernel's DETERMINISTIC), FlashAttention-3's way. FLASH_ATTN_TRITON_ATOMIC_DQ chooses
(switched_on):
unset, the default: this kernel where it applies to contiguous inputs of at least DEFAULT_FROM_FLOPS, else
the two-pass backward; gluon: this kernel wherever it applies (the plain single pass elsewhere); 0: the
two-pass backward; 1: the plain Triton single pass.
"""

from __future__ import annotations

import functools
import os
import warnings

import torch

from .._launch import cdiv
from .._plans import CompiledLaunch, aligned
from ..forward._forward import LOG2_E
from ..forward._hopper_launch import _shared_layout, gluon_unavailable, problem_flops
from ._backward_atomic_kernels import flash_attn_triton_bwd_delta_zero, flash_attn_triton_bwd_dq_convert

BLOCK_M, BLOCK_N = 64, 128  # _backward_hopper's query rows per step and keys per program
# setmaxnreg budgets: the kernel's 12 warps start at 168 registers a thread (64K / 384); the warpgroup of
# the two single warps gives its registers to the two consumer warpgroups (2 x 240 + 24 per thread x 128 <= 64K)
REGS = {"CONSUMER_REGS": 240, "WORKER_REGS": 24}
ROW_BLOCK = 64  # rows per program of the preprocess and the postprocess
# The problem's forward FLOPs (problem_flops) from which it is the default. H200 (docs/kernel.md): at 2^36
# (B4 H16 S2048 D128 causal, B8 H16 S2048 D64 causal) 0.98x and 0.94x cuDNN against the two-pass backward's
# 0.76x and 0.92x, 0.96-1.05x above; at 2^34 (B8 H16 S1024 D64 causal) 0.51x against 1.02x (2^35 not measured)
DEFAULT_FROM_FLOPS = 1 << 36
HEAD_DIMS = (64, 128)  # the kernel's tiles: 256 and 192/128 go to the plain passes
_broken: list[str] = []  # why this Triton cannot compile the kernel, once seen
_DEFAULT: dict = {}  # per shape, device, mask and contiguity: whether the default takes this kernel


def unsupported(q: torch.Tensor, k: torch.Tensor, causal: bool, causal_off: int) -> str | None:
    """Why these inputs go to another backward, or None when the Hopper backward takes them."""
    if q.shape[3] not in HEAD_DIMS:  # 256, 192/128: the plain passes' only (q's head dim 64 or 128 means v's too)
        return f"it has tiles for head dims {' and '.join(map(str, HEAD_DIMS))} only"
    if q.shape[2] != k.shape[2] or q.shape[2] % BLOCK_N:
        return f"it needs as many queries as keys, a multiple of {BLOCK_N}"
    if causal and causal_off:
        return "its causal mask is top-left aligned only"
    if not q.is_cuda or torch.cuda.get_device_capability(q.device) != (9, 0):
        return "the Gluon backward is written for sm_90 (wgmma, TMA reduce-add)"
    return _broken[0] if _broken else gluon_unavailable("backward._backward_hopper")


def chosen(q: torch.Tensor, k: torch.Tensor, v: torch.Tensor, out: torch.Tensor, dout: torch.Tensor, causal: bool,
           causal_off: int) -> bool:
    """Whether FLASH_ATTN_TRITON_ATOMIC_DQ (module docstring) picks the Hopper backward for these inputs
    (switched_on); a deterministic backward runs it too, in its fixed order."""
    if not switched_on():
        return False
    if os.environ.get("FLASH_ATTN_TRITON_ATOMIC_DQ") == "gluon":
        return unsupported(q, k, causal, causal_off) is None
    inputs = (q, k, v, out, dout)
    key = (q.shape, k.shape, q.device, causal, causal_off, tuple(t.is_contiguous() for t in inputs))
    takes = _DEFAULT.get(key)
    if takes is None:  # contiguous only: this kernel copies other layouts, which the two-pass one reads in place
        batch, heads, seq, head_dim = q.shape
        takes = _DEFAULT[key] = (all(key[-1]) and unsupported(q, k, causal, causal_off) is None
                                 and problem_flops(batch * heads, seq, head_dim, causal) >= DEFAULT_FROM_FLOPS)
    if takes and _broken:  # it failed to compile since
        takes = _DEFAULT[key] = False
    return takes


def switched_on() -> bool:
    """Whether FLASH_ATTN_TRITON_ATOMIC_DQ lets this kernel run: unset (or empty) or "gluon", for a deterministic
    request too, in its fixed order (1.02-1.07x the default's time on the H100 at D128 S4k-16k, where the two-pass
    backward took 1.25-1.37x: docs/kernel.md, session 19)."""
    return os.environ.get("FLASH_ATTN_TRITON_ATOMIC_DQ", "") in ("", "gluon")


@functools.cache
def _dq_layout(cols: int):
    from triton.experimental.gluon import language as gl

    return gl.NVMMASharedLayout.get_default_for([BLOCK_M, cols], gl.float32)


@functools.cache
def _row_layout():
    from triton.experimental.gluon import language as gl

    return gl.NVMMASharedLayout(swizzle_byte_width=0, element_bitwidth=32, rank=1)


class Address:
    """What a TMA descriptor reads of its base once the kernel is compiled: the address (and the dtype, for
    TensorDescriptor's checks). A descriptor over one, kept from call to call, holds no tensor: no step's
    memory or autograd graph."""
    __slots__ = ("_address", "dtype")

    def __init__(self, t: torch.Tensor):
        self._address, self.dtype = t.data_ptr(), t.dtype

    def data_ptr(self) -> int:
        return self._address


def _rows(t: torch.Tensor, block_rows: int, layout=None, block_cols: int | None = None, base=None):
    """A TMA descriptor over contiguous t seen as [rows, head_dim], copying [block_rows, block_cols] boxes
    (block_cols: head_dim unless given); its base base(t), else the [rows, head_dim] view."""
    from triton.experimental.gluon.nvidia.hopper import TensorDescriptor

    rows, head_dim = t.numel() // t.shape[-1], t.shape[-1]
    layout = layout if layout is not None else _shared_layout(block_rows, head_dim, t.dtype)
    return TensorDescriptor(base(t) if base else t.view(rows, head_dim), [rows, head_dim], [head_dim, 1],
                            [block_rows, block_cols or head_dim], layout)


DESCRIPTORS = ("desc_q", "desc_k", "desc_v", "desc_do", "desc_dq", "desc_lse", "desc_delta")  # the kernel's


def descriptors(q: torch.Tensor, k: torch.Tensor, v: torch.Tensor, dout: torch.Tensor, dq_acc: torch.Tensor,
                lse: torch.Tensor, delta: torch.Tensor, base=None) -> dict:
    """The kernel's seven TMA descriptors by parameter name, over the tensors' views, or over base(tensor)
    (Address, for later calls: reused_descriptors). A dQ reduce is one consumer warpgroup's half of the
    columns."""
    from triton.experimental.gluon.nvidia.hopper import TensorDescriptor

    rows, cols = lse.numel(), q.shape[-1] // 2
    lse_base, delta_base = (base(t) if base else t.view(-1) for t in (lse, delta))
    return {"desc_q": _rows(q, BLOCK_M, base=base), "desc_k": _rows(k, BLOCK_N, base=base),
            "desc_v": _rows(v, BLOCK_N, base=base), "desc_do": _rows(dout, BLOCK_M, base=base),
            "desc_dq": _rows(dq_acc, BLOCK_M, _dq_layout(cols), cols, base),
            "desc_lse": TensorDescriptor(lse_base, [rows], [1], [BLOCK_M], _row_layout()),
            "desc_delta": TensorDescriptor(delta_base, [rows], [1], [BLOCK_M], _row_layout())}


_LAST: dict = {}  # per plan key: the last later call's seven addresses and its descriptors over them


def reused_descriptors(key, tensors: tuple[torch.Tensor, ...]) -> dict:
    """descriptors() of these seven tensors (its order) for a planned call: the key's last ones where every
    address is the same, as a training loop's caching allocator hands each step the blocks of the step
    before. Made and checked in Python, seven descriptors cost ~100 function calls a backward (H200: the
    window-256 step's host time, docs/kernel.md)."""
    addresses = tuple(t.data_ptr() for t in tensors)
    last = _LAST.get(key)
    if last is None or last[0] != addresses:
        last = _LAST[key] = (addresses, descriptors(*tensors, base=Address))
    return last[1]


def _constants(head_dim: int, masked: bool, group: int, deterministic: bool) -> dict:
    return {"GROUP": group, "HEAD_DIM": head_dim, "MASKED": masked, "DETERMINISTIC": deterministic, **REGS}


def band(seq: int, causal: bool, window: tuple[int, int] | None) -> tuple[int, int] | None:
    """The kernel's (left, right): key j sees query i when i - left <= j <= i + right, each bound at most seq
    (int32 sums in the kernel); causal is (seq, 0); None: no mask."""
    if window is None:
        return (seq, 0) if causal else None
    return min(window[0], seq), min(window[1], seq)


OPTIONS = {"num_warps": 4}  # the default partition's; warp_specialize adds the other 8


def _launches(tensors: dict, sm_scale: float, bounds: tuple[int, int] | None, deterministic: bool) -> list:
    """The three CompiledLaunch of this shape, made by running them once on these tensors. Each names the
    tensors and descriptors later calls replace, so that the plan keeps none of the first call's: through the
    forward's output (the autograd Function's result) they would hold that step's graph and its leaves'
    AccumulateGrad nodes, which refuses CUDA graph capture of later steps on those leaves."""
    batch, heads, seq, head_dim = tensors["Q"].shape
    kv_heads = tensors["K"].shape[1]
    rows = {"ROWS": batch * heads * seq, "HEAD_DIM": head_dim, "BLOCK": ROW_BLOCK, "HEAD_DIM_QK": head_dim}
    row_grid = (cdiv(batch * heads * seq, ROW_BLOCK),)

    def own(*names: str) -> dict:
        return {name: tensors[name] for name in names}

    first_names, third_names = ("Out", "dOut", "Delta", "dQacc"), ("dQacc", "dQ")
    main_names = (*DESCRIPTORS, "dK", "dV", *(("Locks",) if deterministic else ()))
    first = CompiledLaunch(flash_attn_triton_bwd_delta_zero, row_grid, {**own(*first_names), **rows,
                                                                        "HEAD_DIM_V": head_dim}, {},
                           replaced=first_names)
    left, right = bounds or (seq, seq)
    main = {"Locks": None, **own(*main_names), "sm_scale": sm_scale, "qk_scale": sm_scale * LOG2_E, "SEQ": seq,
            "left": left, "right": right, **_constants(head_dim, bounds is not None, heads // kv_heads, deterministic)}
    from ._backward_hopper import flash_attn_triton_bwd_hopper

    second = CompiledLaunch(flash_attn_triton_bwd_hopper, (seq // BLOCK_N * batch * kv_heads,), main, OPTIONS,
                            replaced=main_names)
    third = CompiledLaunch(flash_attn_triton_bwd_dq_convert, row_grid, {**own(*third_names), **rows,
                                                                        "sm_scale": sm_scale}, {},
                           replaced=third_names)
    return [first, second, third]


_PLANS: dict = {}  # per shape and dtype: the three launches


def backward(q: torch.Tensor, k: torch.Tensor, v: torch.Tensor, out: torch.Tensor, lse: torch.Tensor,
             dout: torch.Tensor, *, sm_scale: float, causal: bool, window: tuple[int, int] | None = None,
             deterministic: bool = False) -> tuple[torch.Tensor, torch.Tensor, torch.Tensor]:
    """dQ, dK, dV (dtypes and shapes of q, k, v) from the forward's output and natural-log LSE, or None when
    this Triton cannot compile the Gluon kernel (after one warning; later calls see unsupported()). window:
    (left, right) of a sliding window (band's), which replaces causal. deterministic: the same bits on every
    run (dQ's float32 adds in a fixed order, counted by zeroed int32 locks, one per 64 query rows)."""
    q, k, v, out, dout, lse = (t if t.is_contiguous() else t.contiguous() for t in (q, k, v, out, dout, lse))
    dq, dk, dv = torch.empty_like(q), torch.empty_like(k), torch.empty_like(v)
    dq_acc = torch.empty(q.shape, dtype=torch.float32, device=q.device)
    delta = torch.empty_like(lse)
    bounds = band(q.shape[2], causal, window)
    key = (q.shape, k.shape, q.dtype, q.device, sm_scale, bounds, deterministic, aligned(q, k, v, out, dout, lse))
    plan = _PLANS.get(key)
    described = (q, k, v, dout, dq_acc, lse, delta)
    tensors = {"Q": q, "K": k, "Out": out, "dOut": dout, "Delta": delta, "dQacc": dq_acc, "dQ": dq, "dK": dk,
               "dV": dv, **(descriptors(*described) if plan is None else reused_descriptors(key, described))}
    if deterministic:
        tensors["Locks"] = torch.zeros(lse.numel() // BLOCK_M, dtype=torch.int32, device=q.device)
    if plan is None:
        from triton.compiler.errors import CompilationError

        try:
            _PLANS[key] = _launches(tensors, sm_scale, bounds, deterministic)
        except CompilationError as e:
            _broken.append(f"this Triton cannot compile the Gluon backward: {str(e).splitlines()[-1][:200]}")
            warnings.warn(f"flash_attn_triton: {_broken[0]}; using the two-pass backward", stacklevel=3)
            return None
        return dq, dk, dv
    for launch in plan:
        launch.run(tensors)
    return dq, dk, dv


def compile_for_sm90(head_dim: int, causal: bool, dtype: str = "bf16", group: int = 1, deterministic: bool = False):
    """Compile the Hopper backward for sm_90 without a GPU (Triton's compiler
    and ptxas): registers, spills and shared memory, what CPU tests and benchmarks/kernel/triton_compile_check.py
    read."""
    import triton
    from triton.backends.compiler import GPUTarget
    from triton.experimental.gluon._runtime import GluonASTSource

    element = {"bf16": torch.bfloat16, "fp16": torch.float16}[dtype]

    def descriptor(rows: int, kind: str = dtype, layout=None, cols: int = head_dim) -> str:
        layout = layout if layout is not None else _shared_layout(rows, head_dim, element)
        return f"tensordesc<{kind}[{rows}, {cols}],{layout!r}>"

    from ._backward_hopper import flash_attn_triton_bwd_hopper

    # a window compiles as causal does: its bounds are arguments
    constants = _constants(head_dim, causal, group, deterministic) | ({} if deterministic else {"Locks": None})
    cols = head_dim // 2
    signature = {"desc_q": descriptor(BLOCK_M), "desc_k": descriptor(BLOCK_N), "desc_v": descriptor(BLOCK_N),
                 "desc_do": descriptor(BLOCK_M), "desc_dq": descriptor(BLOCK_M, "fp32", _dq_layout(cols), cols),
                 "desc_lse": f"tensordesc<fp32[{BLOCK_M}],{_row_layout()!r}>",
                 "desc_delta": f"tensordesc<fp32[{BLOCK_M}],{_row_layout()!r}>", "dK": f"*{dtype}", "dV": f"*{dtype}",
                 "Locks": "*i32", "sm_scale": "fp32", "qk_scale": "fp32", "SEQ": "i32", "left": "i32", "right": "i32",
                 **{name: "constexpr" for name in constants}}
    source = GluonASTSource(fn=flash_attn_triton_bwd_hopper, signature=signature, constexprs=constants)
    return triton.compile(source, target=GPUTarget("cuda", 90, 32), options=OPTIONS)
