"""Cheap launches: what depends only on the shape is worked out once per shape and dtype, not per call.

A JIT launch (`kernel[grid](...)`) binds every argument, specialises each integer and pointer, hashes
that into a cache key and looks the compiled kernel up: tens of microseconds of Python per launch,
which at the article's problem (B8 H16 S1024 D64) is more than the GPU's work. Here the first call of a
shape goes through the JIT (which compiles or finds the kernel on disk and runs it), and keeps the
compiled kernel's own runner, its grid and every argument that is not a tensor; later calls of that
shape pass only the new tensors to the runner. The choice of kernel and configuration, the checks and
the grid are in the plan too, so a call does one dict lookup and its allocations.

Triton specialises pointers on 16-byte alignment: a plan is made, and looked up, separately for aligned
and unaligned tensors. Integers (lengths, heads, the causal offset) are part of the shape key.
"""

from __future__ import annotations

import torch


class CompiledLaunch:
    """One Triton (or Gluon) kernel compiled for one shape, launched through its compiled runner.

    Made by its first launch, through the JIT: `params` are every argument of the kernel by name
    (tensors included: those are replaced on later calls), `options` the launch options (num_warps...).
    """

    def __init__(self, kernel, grid: tuple[int, ...], params: dict, options: dict):
        compiled = kernel[grid](**params, **options)
        self._runner = compiled[tuple(grid) + (1,) * (3 - len(grid))]  # the runner reads all three dimensions
        self._names = kernel.arg_names
        self._fixed = params
        self._device = torch.cuda.current_device()

    def __call__(self, **tensors) -> None:
        """Launch with these tensors in place of the first call's (names the kernel lacks are ignored)."""
        params = {**self._fixed, **tensors}
        self._runner(*[params[name] for name in self._names],
                     stream=torch._C._cuda_getCurrentRawStream(self._device))


def aligned(*tensors: torch.Tensor) -> bool:
    return all(t.data_ptr() % 16 == 0 for t in tensors)


def _forward_plan(args: tuple, meta: dict, q: torch.Tensor, k: torch.Tensor, causal: bool, causal_off: int):
    """Run the first call of a shape and return what runs the later ones: (q, k, v, out, lse) -> None."""
    from . import _hopper_launch, _launch

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
    """_launch.forward's result; on a GPU (without FLASH_ATTN_TRITON_AUTOTUNE) through a plan per shape."""
    from . import _launch

    if not q.is_cuda or _launch.autotuning():
        return _launch.forward(q, k, v, causal=causal, sm_scale=sm_scale, causal_off=causal_off)
    q, k, v = (t if t.is_contiguous() else t.contiguous() for t in (q, k, v))
    key = (q.shape, k.shape, q.dtype, q.device, causal, sm_scale, causal_off, aligned(q, k, v))
    plan = _FORWARD_PLANS.get(key)
    if plan is None:  # checks, choice of kernel, grid and compile, once per shape
        args, meta = _launch.launch_args(q, k, v, causal, sm_scale, causal_off)
        _FORWARD_PLANS[key] = _forward_plan(args, meta, q, k, causal, causal_off)
        return args[3], args[4]
    out = torch.empty_like(q)
    lse = torch.empty(q.shape[:3], device=q.device, dtype=torch.float32)
    plan(q, k, v, out, lse)
    return out, lse
