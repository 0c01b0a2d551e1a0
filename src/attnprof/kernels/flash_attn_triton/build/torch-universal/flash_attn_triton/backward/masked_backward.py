"""Autograd for the masked forward (masks.py), and the host side of its Triton backward.

The backward is _masked_backward_kernels.py's two passes: dQ per query block over the key blocks it sees
(masks.key_range, the forward's own), which also stores its rows' delta = rowsum(dO * O), then dK/dV per
key block over the query blocks that see it (masks.query_range), both from the forward's saved LSE,
skipping what the mask empties and masking only the edges. It is deterministic (no atomics) and launched
through a plan per shape on a GPU (_plans.run_planned).

On sm_90 a mask of one sequence (no cu_seqlens cut: a window, causal) on contiguous [B, H, S, D] inputs goes
instead to the dense path's warp-specialised Gluon single pass (_backward_hopper.py), which takes the window
as a band of query blocks per key block: at window 256 (B2, 32/8 heads, S2048, D128, H200) 205 µs against
these passes' 279, at window 1024 (S16384) the training step 1.31x faster (docs/kernel.md). Its float32 dQ
sums are added in a fixed order on a deterministic request (deterministic=True or
torch.use_deterministic_algorithms(True)); FLASH_ATTN_TRITON_ATOMIC_DQ=0 keeps the two passes, and =1 runs the
single pass (the dense backward's preprocess for delta, then the dK/dV pass adding each block's dQ share by float32
atomics: _masked_backward_kernels.py), unless a deterministic backward is asked for.
"""

from __future__ import annotations

from typing import NamedTuple

import torch

from .._head_tiles import head_dim_constexprs
from .._launch import _ensure_allocator, atomic_dq, cdiv, wants_grad
from .._plans import aligned, run_planned
from .._tma_views import empty_in_layout_of, matrix_view
from ..masks import masked_forward, score_scales
from . import _backward_hopper_launch, _backward_single
from ._backward import PREPROCESS_BLOCK, readable_inputs, view_args
from ._backward_kernels import flash_attn_triton_bwd_preprocess
from ._masked_backward_kernels import flash_attn_triton_bwd_dkdv_masked, flash_attn_triton_bwd_dq_masked


class MaskedBackwardConfig(NamedTuple):
    """Tiles, warps and stages of the dK/dV pass (programs own dkdv_n keys, walk dkdv_m rows at a time) and
    of the dQ pass (own dq_m rows, walk dq_n keys)."""
    dkdv_m: int
    dkdv_n: int
    dkdv_warps: int
    dkdv_stages: int
    dq_m: int
    dq_n: int
    dq_warps: int
    dq_stages: int


# sm_90, bf16/fp16, D128: the fastest of benchmarks/kernel/triton_masked_backward.py --part sweep on the H200 at
# all three of its mask cases (session 3, with the preprocess; at window 256 again in session 4: none of its
# candidates beat these, docs/kernel.md); D64 was not measured (the dense backward's tiles); D256 and 192 (v 128):
# the fastest of benchmarks/kernel/triton_wide_configs.py on the H100 at window 1024 (B2 H16 S4096, 5 alternating
# rounds): 0.57x the 32-key tiles' time at 256 (session 19); at 192/128, in two parts (session 21), 32 rows against
# 128 keys and 64 keys a dQ block at 0.80x the time of session 19's tiles (0.79-0.81; session 22); not measured on
# the H200
CONFIGS = {64: MaskedBackwardConfig(64, 64, 4, 2, 64, 64, 4, 3),
           128: MaskedBackwardConfig(64, 128, 8, 2, 128, 64, 8, 3),
           192: MaskedBackwardConfig(32, 128, 8, 2, 64, 64, 8, 2),
           256: MaskedBackwardConfig(64, 64, 8, 2, 64, 64, 8, 2)}
INTERPRETER_CONFIG = MaskedBackwardConfig(16, 32, 4, 1, 32, 16, 4, 1)  # several blocks each way, odd ends


def launches(tensors: dict, scale: float, window: tuple[int, int], bottom_right: bool, sequences: int, max_q: int,
             max_k: int, config: MaskedBackwardConfig, softcap: float = 0.0, single: bool = False) -> list[tuple]:
    """(kernel, grid, its arguments other than tensors, options) of the two passes, dQ (which stores delta)
    then dK/dV: tensors by parameter name, [B, T, H, D] each (q [B, Tq, Hq, D], k [B, Tk, Hkv, D]), read
    through their matrix views. single: the single pass instead, the dense backward's preprocess (delta) then the
    dK/dV pass adding each block's share of dQ into tensors["dQacc"] (float32, [B, Hq, Tq, D], zeroed)."""
    batch, tokens, hq, _ = tensors["Q"].shape
    hkv = tensors["K"].shape[2]
    views = view_args({name: t.transpose(1, 2) for name, t in tensors.items() if name in _VIEWED})
    shared = {"sm_scale": scale, **score_scales(scale, softcap), "SOFTCAP": softcap > 0, "HQ": hq,
              "lse_tokens": tokens, "left": window[0], "right": window[1], "GROUP": hq // hkv,
              **head_dim_constexprs(tensors["Q"], tensors["V"]),
              "BOTTOM_RIGHT": bottom_right}
    dq = (flash_attn_triton_bwd_dq_masked, (sequences * hq, cdiv(max_q, config.dq_m), batch),
          {**shared, "BLOCK_M": config.dq_m, "BLOCK_N": config.dq_n,
           "KV_STRIDE_SHARED": views["k_stride"] == views["v_stride"]},
          {"num_warps": config.dq_warps, "num_stages": config.dq_stages})
    if single:  # delta of every token row, as the dense backward's preprocess computes it
        dq = (flash_attn_triton_bwd_preprocess, (cdiv(tokens, PREPROCESS_BLOCK), batch * hq),
              {"SQ": tokens, "HEADS": hq, "HEAD_DIM": shared["HEAD_DIM_V"], "BLOCK_M": PREPROCESS_BLOCK}, {})
    dkdv = (flash_attn_triton_bwd_dkdv_masked, (sequences * hkv, cdiv(max_k, config.dkdv_n), batch),
            {**shared, "BLOCK_M": config.dkdv_m, "BLOCK_N": config.dkdv_n,
             # every argument named, defaults too: a plan's launch lists them all (_plans.CompiledLaunch)
             **({"ATOMIC_DQ": True, "DQ_TMA": tensors["Q"].is_cuda} if single else
                {"dQacc": None, "ATOMIC_DQ": False, "DQ_TMA": False})},
            {"num_warps": config.dkdv_warps, "num_stages": config.dkdv_stages})
    return [(kernel, grid, {**params, **{n: views[n] for n in kernel.arg_names if n in views}}, opts)
            for kernel, grid, params, opts in (dq, dkdv)]


_PLANS: dict = {}  # per shape, layout and mask on a GPU: the two passes' CompiledLaunch (_plans.py)
_VIEWED = ("Q", "K", "V", "Out", "dO", "dQ", "dK", "dV")  # the tensors read or written through matrix views


_LAYOUTS: dict = {}  # per plan key: the gradients' strides, and whether every input is read where it lies


def _heads_first(t: torch.Tensor) -> torch.Tensor:
    """[B, T, H, D] <-> [B, H, T, D] (a view): _tma_views reads tensors with the heads before the tokens."""
    return t.transpose(1, 2)


def _layout(inputs: tuple[torch.Tensor, ...]) -> tuple[tuple, bool]:
    """For q, k, v, out, dO of one plan key (its strides and alignments fix both): the strides of
    empty_in_layout_of's gradients for q, k, v, and whether matrix_view reads every input in place (then
    readable_inputs has nothing to copy). Worked out once per key: a step's host time spent ~16 transposes
    and three layout checks on them otherwise."""
    grads = tuple(_heads_first(empty_in_layout_of(_heads_first(t))).stride() for t in inputs[:3])
    return grads, all(matrix_view(_heads_first(t)) is not None for t in inputs)


_GLUON: dict = {}  # per plan key: whether the inputs are the Gluon backward's (gluon_takes, the switches aside)


def gluon_takes(inputs: tuple[torch.Tensor, ...], sequences: int, max_q: int, max_k: int, key) -> bool:
    """Whether q, k, v, out, dO ([B, S, H, D] views) go to the Gluon backward: FLASH_ATTN_TRITON_ATOMIC_DQ
    unset or "gluon" (_backward_hopper_launch.switched_on; a deterministic request too, in its fixed order); one
    sequence as long as the tensors (max_q, max_k are its length, as flash-attn's max_seqlen), queries as many as
    keys, head dim 64 or 128, every input contiguous heads first, and what _backward_hopper_launch.unsupported
    asks (sm_90, lengths a multiple of 128)."""
    if not _backward_hopper_launch.switched_on():
        return False
    takes = _GLUON.get(key)
    if takes is None:
        q, k = (_heads_first(t) for t in inputs[:2])
        takes = _GLUON[key] = (sequences == 1 and max_q == max_k == q.shape[2] == k.shape[2]
                               and q.shape[-1] in (64, 128)
                               and all(_heads_first(t).is_contiguous() for t in inputs)
                               and _backward_hopper_launch.unsupported(q, k, False, 0) is None)
    return takes


def masked_backward(q, k, v, out, lse, dout, cu_q: torch.Tensor, cu_k: torch.Tensor, max_q: int, max_k: int,
                    scale: float, window: tuple[int, int], bottom_right: bool,
                    config: MaskedBackwardConfig | None = None, softcap: float = 0.0, sink: torch.Tensor | None = None,
                    deterministic: bool = False) -> tuple[torch.Tensor, ...]:
    """dq, dk, dv for masked_forward's layout ([B, T, H, D]; lse [B, Hq, Tq]), laid out as q, k, v are (with a
    sink also its gradient); every input read where it lies unless matrix_view refuses it (the
    dense backward's rule, _backward.readable_inputs); config: the Triton passes at this configuration instead
    of CONFIGS' (benchmarks), never the Gluon kernel (nor with softcap or a sink, which it lacks);
    deterministic (or torch.use_deterministic_algorithms): bit-identical from run to run, as the Triton passes
    always are."""
    deterministic = deterministic or torch.are_deterministic_algorithms_enabled()
    inputs = (q, k, v, out, dout)
    sequences = cu_q.numel() - 1
    key = ("masked", q.shape, k.shape, tuple(t.stride() for t in inputs), tuple(aligned(t) for t in inputs), q.dtype,
           q.device, scale, window, bottom_right, sequences, max_q, max_k, config, aligned(lse), softcap)
    plain = softcap == 0 and sink is None
    if (plain and config is None and q.is_cuda and lse.is_contiguous()
            and gluon_takes(inputs, sequences, max_q, max_k, key)):
        grads = _backward_hopper_launch.backward(*(_heads_first(t) for t in (q, k, v, out)), lse, _heads_first(dout),
                                                 sm_scale=scale, causal=False, window=window,
                                                 deterministic=deterministic)
        if grads is not None:
            return tuple(_heads_first(g) for g in grads)
        _GLUON[key] = False  # this Triton cannot compile it (warned once): the Triton passes from now on
    single = atomic_dq() and not deterministic
    if config is None and q.is_cuda and single:  # the dense single pass's tiles: its dQ share needs registers too
        tiles = _backward_single.CONFIGS[q.shape[-1]]
        config = CONFIGS[q.shape[-1]]._replace(dkdv_m=tiles.block_m, dkdv_n=tiles.block_n, dkdv_warps=tiles.warps,
                                               dkdv_stages=tiles.stages)
    config = config or (CONFIGS[q.shape[-1]] if q.is_cuda else INTERPRETER_CONFIG)  # CPU: the interpreter
    layout = _LAYOUTS.get(key)
    if layout is None:
        layout = _LAYOUTS[key] = _layout(inputs)
    grad_strides, in_place = layout
    dq, dk, dv = (torch.empty_strided(t.shape, strides, dtype=t.dtype, device=t.device)
                  for t, strides in zip((q, k, v), grad_strides, strict=True))
    if not in_place:
        q, k, v, out, dout = (_heads_first(t) for t in readable_inputs(tuple(_heads_first(t) for t in inputs), key))
    delta = torch.empty_like(lse)
    tensors = {"Q": q, "K": k, "V": v, "Out": out, "dO": dout, "dOut": dout, "LSE": lse,
               "Delta": delta, "dQ": dq, "dK": dk, "dV": dv, "CuQ": cu_q, "CuK": cu_k}
    if single:  # dQ's float32 sums, rows as LSE's ([B, Hq, Tq]), then dQ from them
        tensors["dQacc"] = torch.zeros((*lse.shape, q.shape[-1]), dtype=torch.float32, device=q.device)
        if q.is_cuda and (key, single) not in _PLANS:
            _ensure_allocator()  # global memory for the TMA descriptors each program makes
    run_planned(_PLANS, (key, single), lambda: launches(tensors, scale, window, bottom_right, sequences, max_q, max_k,
                                                        config, softcap, single), tensors)
    if single:
        dq.copy_(tensors["dQacc"].transpose(1, 2) * scale)
    return (dq, dk, dv) if sink is None else (dq, dk, dv, sink_grad(sink, lse, delta))


def sink_grad(sink: torch.Tensor, lse: torch.Tensor, delta: torch.Tensor) -> torch.Tensor:
    """The sink's gradient, from what the backward keeps anyway: the sink is one more logit of each row's
    softmax whose value is zero, so dL/dsink_h = sum over the rows of head h of P_sink * (0 - delta), with
    P_sink = exp(sink_h - LSE) (the forward's LSE holds the sink) and delta = rowsum(dO * O) (the dQ pass's).
    In PyTorch over [B, Hq, Tq] floats: deterministic, and small beside the passes."""
    return -(torch.exp(sink[None, :, None] - lse) * delta).sum((0, 2))


def to_kernel_layout(t: torch.Tensor, layout: str) -> torch.Tensor:
    """The kernels' [B, S, H, D] view of a caller's tensor: "bshd" as it is, "bhsd" transposed, "thd" (a packed
    batch, flash_attn_varlen_func's) as a batch of one."""
    return t.transpose(1, 2) if layout == "bhsd" else t.unsqueeze(0) if layout == "thd" else t


def from_kernel_layout(t: torch.Tensor, layout: str) -> torch.Tensor:
    """The inverse of to_kernel_layout (for outputs and gradients)."""
    return t.transpose(1, 2) if layout == "bhsd" else t[0] if layout == "thd" else t


def _lse_for(lse: torch.Tensor, layout: str) -> torch.Tensor:
    """The kernel's LSE [B, Hq, Tq] as the caller's layout has it ([Hq, total] for a packed batch)."""
    return lse[0] if layout == "thd" else lse


class MaskedAttentionFunction(torch.autograd.Function):
    """The masked forward and backward on the caller's layout: the views into and out of the kernels' layout
    are taken inside, so autograd records one node for the call, not one per view (host time per step)."""

    @staticmethod
    def forward(ctx, q, k, v, cu_seqlens_q, cu_seqlens_k, max_seqlen_q, max_seqlen_k, scale, window, bottom_right,
                layout, softcap=0.0, sink=None, deterministic=False):
        q, k, v = (to_kernel_layout(t, layout) for t in (q, k, v))
        out, lse = masked_forward(q, k, v, cu_seqlens_q, cu_seqlens_k, max_seqlen_q, scale, window, bottom_right,
                                  softcap=softcap, sink=sink)
        ctx.save_for_backward(q, k, v, out, lse, cu_seqlens_q, cu_seqlens_k, sink)
        ctx.lengths, ctx.scale, ctx.window, ctx.bottom_right = (max_seqlen_q, max_seqlen_k), scale, window, bottom_right
        ctx.layout, ctx.softcap, ctx.deterministic = layout, softcap, deterministic
        lse = _lse_for(lse, layout)
        ctx.mark_non_differentiable(lse)
        ctx.set_materialize_grads(False)  # else autograd fills a zero gradient for the LSE: a launch per step
        return from_kernel_layout(out, layout), lse

    @staticmethod
    def backward(ctx, dout, _dlse):
        inputs = len(ctx.needs_input_grad)  # softcap and sink are optional
        if dout is None:  # the loss does not depend on the output
            return (None,) * inputs
        q, k, v, out, lse, cu_q, cu_k, sink = ctx.saved_tensors
        grads = masked_backward(q, k, v, out, lse, to_kernel_layout(dout, ctx.layout), cu_q, cu_k,
                                        *ctx.lengths, ctx.scale, ctx.window, ctx.bottom_right, softcap=ctx.softcap,
                                        sink=sink, deterministic=ctx.deterministic)
        dsink = grads[3] if sink is not None else None
        return (*(from_kernel_layout(g, ctx.layout) for g in grads[:3]), *(None,) * 9, dsink, None)[:inputs]


def masked_attention_call(q, k, v, cu_q: torch.Tensor, cu_k: torch.Tensor, max_q: int, max_k: int, scale: float,
                          window: tuple[int, int], bottom_right: bool, layout: str = "bshd", softcap: float = 0.0,
                          sink: torch.Tensor | None = None, deterministic: bool = False
                          ) -> tuple[torch.Tensor, torch.Tensor]:
    """(out, lse) on the caller's layout (to_kernel_layout's names): through MaskedAttentionFunction where a
    gradient is wanted, else the forward alone. softcap, sink: masks.masked_forward's (sink float32 [Hq])."""
    if wants_grad(q, k, v) or (sink is not None and sink.requires_grad and torch.is_grad_enabled()):
        return MaskedAttentionFunction.apply(q, k, v, cu_q, cu_k, max_q, max_k, scale, window, bottom_right, layout,
                                             softcap, sink, deterministic)
    out, lse = masked_forward(*(to_kernel_layout(t, layout) for t in (q, k, v)), cu_q, cu_k, max_q, scale, window,
                              bottom_right, softcap=softcap, sink=sink)
    return from_kernel_layout(out, layout), _lse_for(lse, layout)
