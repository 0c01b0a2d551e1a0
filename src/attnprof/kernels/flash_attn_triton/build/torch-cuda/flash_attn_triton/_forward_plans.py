"""The forward's launch on a GPU: a plan per shape (_plans.py says why), made by the shape's first call."""

from __future__ import annotations

import torch

from . import _hopper_launch, _launch
from ._plans import CompiledLaunch, aligned


def _forward_plan(args: tuple, meta: dict, q: torch.Tensor, k: torch.Tensor, causal: bool, causal_off: int):
    """Run the first call of a shape and return what runs the later ones: (q, k, v, out, lse) -> None."""
    if _hopper_launch.unsupported(q, k, causal, causal_off) is None:
        launch = _hopper_launch.first_launch(args, meta, _launch.launch_head_group(args, meta))
        if launch is not None:
            block_n = _hopper_launch.CONFIGS[_hopper_launch.DEFAULT][0]
            return lambda q, k, v, out, lse: launch(**_hopper_launch.descriptors(q, k, v, out, block_n), LSE=lse)
    _launch._ensure_allocator()
    grid, params, options = _launch.plain_params(args, meta, _launch.SM90_CONFIGS[meta["HEAD_DIM"]])
    launch = CompiledLaunch(_launch.flash_attn_triton_fwd, grid, params, options)
    return lambda q, k, v, out, lse: launch(Q=q, K=k, V=v, Out=out, LSE=lse)


_FORWARD_PLANS: dict = {}


def forward(q: torch.Tensor, k: torch.Tensor, v: torch.Tensor, *, causal: bool, sm_scale: float,
            causal_off: int) -> tuple[torch.Tensor, torch.Tensor]:
    """_launch.forward's result; on a GPU (without FLASH_ATTN_TRITON_AUTOTUNE) through a plan per shape.
    The key holds everything _launch.check_inputs reads, so the checks run once, when a plan is made."""
    if not (q.is_contiguous() and k.is_contiguous() and v.is_contiguous()):
        q, k, v = q.contiguous(), k.contiguous(), v.contiguous()
    key = (q.shape, k.shape, v.shape, q.dtype, k.dtype, v.dtype, q.get_device(), causal, sm_scale, causal_off,
           aligned(q, k, v))
    plan = _FORWARD_PLANS.get(key)
    if plan is None:
        if not q.is_cuda or _launch.autotuning():  # the interpreter, or a search per shape: never planned
            return _launch.forward(q, k, v, causal=causal, sm_scale=sm_scale, causal_off=causal_off)
        args, meta = _launch.launch_args(q, k, v, causal, sm_scale, causal_off)  # checks, once per shape
        _FORWARD_PLANS[key] = _forward_plan(args, meta, q, k, causal, causal_off)
        return args[3], args[4]
    out = torch.empty_like(q)
    lse = torch.empty(q.shape[:3], device=q.device, dtype=torch.float32)
    plan(q, k, v, out, lse)
    return out, lse
