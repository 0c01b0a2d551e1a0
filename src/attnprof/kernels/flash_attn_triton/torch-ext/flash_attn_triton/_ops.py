"""The forward and the backward as torch custom ops, with fake implementations and the autograd formula,
so that torch.compile(fullgraph=True) traces through a call (the op is one opaque node) and CUDA graphs
capture it. The namespace is this copy's module name (the source, or one of the builds), as
kernel-builder does, so two loaded copies register two sets of ops instead of colliding.

Outside torch.compile the same two functions run through an autograd.Function (`attend`): a custom
op's Python dispatch costs tens of microseconds per call, more than the GPU's work at small shapes; and
a call that needs no gradient skips the autograd.Function too (~10 us of host time)."""

from __future__ import annotations

import re

import torch

from ._launch import atomic_dq, interpreting, wants_grad
from ._plans import aligned
from ._tma_views import empty_in_layout_of, in_layout_of
from .backward import _backward as two_pass
from .backward import _backward_hopper_launch as hopper
from .backward import _backward_single as single_pass
from .forward._forward_plans import forward, planned_forward

NAMESPACE = re.sub(r"\W", "_", __name__.rsplit(".", 1)[0])


@torch.library.custom_op(f"{NAMESPACE}::fwd", mutates_args=())
def attention_fwd(q: torch.Tensor, k: torch.Tensor, v: torch.Tensor, causal: bool, sm_scale: float,
                  causal_off: int, deterministic: bool) -> tuple[torch.Tensor, torch.Tensor]:
    """(output [B, H, Sq, D], natural-log LSE [B, H, Sq] in float32); sm_scale already resolved;
    deterministic only chooses the backward."""
    return forward(q, k, v, causal=causal, sm_scale=sm_scale, causal_off=causal_off)


@attention_fwd.register_fake
def _(q, k, v, causal, sm_scale, causal_off, deterministic):
    return empty_in_layout_of(q, v.shape[-1]), q.new_empty(q.shape[:3], dtype=torch.float32)


def _run_bwd(dout, q, k, v, out, lse, causal, sm_scale, causal_off, deterministic, forward_plan=None):
    """The warp-specialised Gluon kernel on sm_90 for the inputs _backward_hopper_launch.chosen takes (by
    default large problems), bit-identical from run to run when a deterministic backward is asked for (the
    keyword or torch.use_deterministic_algorithms: dQ's adds in a fixed order); elsewhere the plain single
    pass (atomic dQ) under FLASH_ATTN_TRITON_ATOMIC_DQ unless deterministic, else the two-pass one. With the
    forward's plan (_forward_plans.planned_forward), the two Triton backwards' plans are keyed on it and on dO's
    layout: q, k, v are the forward's inputs, the output and the LSE its fresh allocations, so the plan fixes
    everything else the backward's own key would read."""
    deterministic = deterministic or torch.are_deterministic_algorithms_enabled()
    grads = None
    if hopper.chosen(q, k, v, out, dout, causal, causal_off):
        grads = hopper.backward(q, k, v, out, lse, dout, sm_scale=sm_scale, causal=causal,
                                deterministic=deterministic)  # None: this Triton cannot compile it
    if grads is None:
        single = atomic_dq() and not deterministic and q.shape[-1] in single_pass.CONFIGS
        strategy = single_pass if single else two_pass
        config = strategy.INTERPRETER_CONFIG if interpreting() else strategy.CONFIGS[q.shape[-1]]
        key = None if forward_plan is None else (forward_plan, dout.stride(), dout.dtype, aligned(dout), config)
        grads = strategy.backward(q, k, v, out, lse, dout, sm_scale=sm_scale, causal=causal, causal_off=causal_off,
                                  config=config, key=key)
        if not single:
            return grads
    # the single passes' kernels write contiguous gradients; the op's fake promises the inputs' layouts
    return tuple(in_layout_of(g, t) for g, t in zip(grads, (q, k, v), strict=True))


@torch.library.custom_op(f"{NAMESPACE}::bwd", mutates_args=())
def attention_bwd(dout: torch.Tensor, q: torch.Tensor, k: torch.Tensor, v: torch.Tensor, out: torch.Tensor,
                  lse: torch.Tensor, causal: bool, sm_scale: float, causal_off: int,
                  deterministic: bool) -> tuple[torch.Tensor, torch.Tensor, torch.Tensor]:
    """(dQ, dK, dV) through the Triton backward."""
    return _run_bwd(dout, q, k, v, out, lse, causal, sm_scale, causal_off, deterministic)


@attention_bwd.register_fake
def _(dout, q, k, v, out, lse, causal, sm_scale, causal_off, deterministic):
    return empty_in_layout_of(q), empty_in_layout_of(k), empty_in_layout_of(v)


def _setup_context(ctx, inputs, output) -> None:
    q, k, v, ctx.causal, ctx.sm_scale, ctx.causal_off, ctx.deterministic = inputs
    out, lse = output
    ctx.save_for_backward(q, k, v, out, lse)
    ctx.mark_non_differentiable(lse)
    ctx.set_materialize_grads(False)  # else autograd fills a zero gradient for the LSE: a launch per step


def _backward(ctx, dout, _dlse):
    q, k, v, out, lse = ctx.saved_tensors
    dq, dk, dv = attention_bwd(dout, q, k, v, out, lse, ctx.causal, ctx.sm_scale, ctx.causal_off,
                               ctx.deterministic)
    return dq, dk, dv, None, None, None, None


attention_fwd.register_autograd(_backward, setup_context=_setup_context)


class _Eager(torch.autograd.Function):
    """The custom ops' two halves without their dispatch, for eager calls."""

    @staticmethod
    def forward(ctx, q, k, v, causal, sm_scale, causal_off, deterministic):
        out, lse, ctx.plan = planned_forward(q, k, v, causal=causal, sm_scale=sm_scale, causal_off=causal_off,
                                             training=True)
        _setup_context(ctx, (q, k, v, causal, sm_scale, causal_off, deterministic), (out, lse))
        return out, lse

    @staticmethod
    def backward(ctx, dout, _dlse):
        q, k, v, out, lse = ctx.saved_tensors
        dq, dk, dv = _run_bwd(dout, q, k, v, out, lse, ctx.causal, ctx.sm_scale, ctx.causal_off,
                              ctx.deterministic, ctx.plan)
        return dq, dk, dv, None, None, None, None


# autograd.Function.apply's C++ half: Function.apply's Python (which binds nothing for _Eager, having no
# setup_context, and maps functorch's dead wrappers, unwrap_if_dead below) costs 1-3 us per step on CPU
# (benchmarks/kernel/triton_step_host_cost.py: "_ops.attend" against "via Function.apply")
_apply_eager = super(torch.autograd.Function, _Eager).apply
_unwrap_if_dead = torch._C._functorch.unwrap_if_dead


def attend(q: torch.Tensor, k: torch.Tensor, v: torch.Tensor, causal: bool, sm_scale: float,
           causal_off: int, deterministic: bool = False) -> tuple[torch.Tensor, torch.Tensor]:
    """(output, LSE): the custom op under torch.compile, the autograd.Function otherwise."""
    if torch.compiler.is_compiling():
        return attention_fwd(q, k, v, causal, sm_scale, causal_off, deterministic)
    if wants_grad(q, k, v):
        if torch._C._are_functorch_transforms_active():  # vmap, grad...: Function.apply's own way
            return _Eager.apply(q, k, v, causal, sm_scale, causal_off, deterministic)
        return _apply_eager(_unwrap_if_dead(q), _unwrap_if_dead(k), _unwrap_if_dead(v), causal, sm_scale,
                            causal_off, deterministic)
    return forward(q, k, v, causal=causal, sm_scale=sm_scale, causal_off=causal_off)  # no graph to record
