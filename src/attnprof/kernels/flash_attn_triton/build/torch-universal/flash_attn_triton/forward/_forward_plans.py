"""The forward's launch on a GPU: a plan per shape (_plans.py says why), made by the shape's first call."""

from __future__ import annotations

import torch

from .. import _launch
from .._plans import CompiledLaunch, aligned
from .._tma_views import contiguous_copy, empty_in_layout_of
from . import _hopper_launch

PLAIN_TENSORS = ("Q", "K", "V", "Out", "LSE")  # what every call hands the plain kernel's runner


def _launcher(args: dict, meta: dict, q: torch.Tensor, k: torch.Tensor, causal: bool, causal_off: int,
              training: bool = False):
    """Run the first call of a shape and return what runs the later ones: (q, k, v, out, lse) -> None."""
    if _hopper_launch.unsupported(q, k, causal, causal_off, training) is None:
        first = _hopper_launch.first_launch(args, meta, _launch.launch_head_group(args, meta))
        if first is not None:
            launch, descriptors = first
            # (parameter, place in (q, k, v, out), the first call's shape, strides and padding, not its tensor)
            slots = [(desc, position, _hopper_launch.CallDescriptor(None, descriptors[desc]))
                     for position, desc in enumerate(_hopper_launch.DESCRIPTOR_OF.values())]

            def hopper(q, k, v, out, lse):
                tensors = (q, k, v, out)
                launch.run({"LSE": lse, **{desc: _hopper_launch.CallDescriptor(tensors[position], template)
                                           for desc, position, template in slots}})
            return hopper
    _launch._ensure_allocator()
    grid, params, options = _launch.plain_params(args, meta, _launch.SM90_CONFIGS[meta["HEAD_DIM_QK"]])
    launch = CompiledLaunch(_launch.flash_attn_triton_fwd, grid, params, options, replaced=PLAIN_TENSORS)
    return lambda q, k, v, out, lse: launch.run({"Q": q, "K": k, "V": v, "Out": out, "LSE": lse})


class _Plan:
    """Later calls of one key: the inputs a TMA descriptor cannot read where they lie copied (which ones is
    fixed by the key, which holds the strides and the alignment), the output allocated in q's layout and
    the LSE, the kernel launched through its compiled runner with the first call's view numbers."""

    def __init__(self, args: dict, meta: dict, q: torch.Tensor, k: torch.Tensor, v: torch.Tensor, causal: bool,
                 causal_off: int, training: bool = False):
        self.copied = tuple(args[name] is not t for name, t in (("Q", q), ("K", k), ("V", v)))
        self.launch = _launcher(args, meta, q, k, causal, causal_off, training)
        # one float broadcast to the LSE's shape: empty_like of it is a contiguous [B, H, S] float32 tensor on
        # q's device, ~1.7 us cheaper than torch.empty's shape, device and dtype arguments
        self.lse_like = torch.empty(1, device=q.device, dtype=torch.float32).expand(q.shape[:3])

    def __call__(self, q: torch.Tensor, k: torch.Tensor, v: torch.Tensor) -> tuple[torch.Tensor, torch.Tensor]:
        out = empty_in_layout_of(q)  # the caller's q, as launch_args allocates it
        if any(self.copied):
            q, k, v = (contiguous_copy(t) if copy else t for t, copy in zip((q, k, v), self.copied, strict=True))
        lse = torch.empty_like(self.lse_like)
        self.launch(q, k, v, out, lse)
        return out, lse


_FORWARD_PLANS: dict = {}


def forward(q: torch.Tensor, k: torch.Tensor, v: torch.Tensor, *, causal: bool, sm_scale: float,
            causal_off: int) -> tuple[torch.Tensor, torch.Tensor]:
    """_launch.forward's result; on a GPU (without FLASH_ATTN_TRITON_AUTOTUNE) through a plan per shape and
    strides. The key holds everything _launch.check_inputs reads, so the checks run once, when a plan is made."""
    out, lse, _ = planned_forward(q, k, v, causal=causal, sm_scale=sm_scale, causal_off=causal_off)
    return out, lse


def planned_forward(q: torch.Tensor, k: torch.Tensor, v: torch.Tensor, *, causal: bool, sm_scale: float,
                    causal_off: int, training: bool = False) -> tuple[torch.Tensor, torch.Tensor, _Plan | None]:
    """forward()'s (output, LSE) and the plan that ran it (None where none did): the plan stands for
    every shape, stride, alignment, dtype and scalar of the call, so a backward keys on it and dO alone.
    `training`: the call records a backward, whose step may want another forward (_hopper_launch.TRAINING_LEAST)."""
    key = (q.shape, k.shape, v.shape, q.stride(), k.stride(), v.stride(), q.dtype, k.dtype, v.dtype, q.get_device(),
           causal, sm_scale, causal_off, aligned(q, k, v), training)
    plan = _FORWARD_PLANS.get(key)
    if plan is not None:
        return *plan(q, k, v), plan
    if not q.is_cuda or _launch.autotuning():  # the interpreter, or a search per shape: never planned
        return *_launch.forward(q, k, v, causal=causal, sm_scale=sm_scale, causal_off=causal_off), None
    args, meta = _launch.launch_args(q, k, v, causal, sm_scale, causal_off)  # checks, once per shape
    _FORWARD_PLANS[key] = _Plan(args, meta, q, k, v, causal, causal_off, training)
    return args["Out"], args["LSE"], _FORWARD_PLANS[key]
