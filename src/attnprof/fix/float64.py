"""The float64 world a rewrite is proved in: the module deep-copied and cast to double, its inputs too,
and every narrowing the forward asks for (`.float()`, `.to(torch.bfloat16)`, `dtype=torch.float32`, a
tensor made at the default dtype) kept at double. So a softmax the source runs in fp32 on purpose and
an SDPA call that does the same in one kernel are held against each other at float64's precision:
mathematical equivalence does not depend on the model's dtype, and 16-bit rounding never decides it.

Two results of the same math in float64 differ by summation order only (~1e-16 of the summands, times
a few for the terms a softmax sums), far under RTOL; a dropped scale or a mask out of place differs
by 1e-3 and more."""

from __future__ import annotations

import contextlib
import copy
from collections.abc import Iterator
from typing import Any

RTOL = 1e-10  # of the tensor's largest magnitude: only a different summation order stays inside
ATOL = 1e-12  # the floor under a tensor that is (nearly) zero in both
# A finite fill absorbs part of the scores: softmax(s - 1e9) keeps only what float64 holds of s at 1e9
# (~1e-7), differently in two summation orders. Where the forward makes such a value (between 1e6 and
# 1e20: -1e4 leaves nothing measurable, finfo.min absorbs s whole in both), the bar is the rounding at
# its magnitude, capped far under what a wrong rewrite moves there (V averaged against 0: 1e-1).
ABSORBING = (1e6, 1e20)
ABSORBED_RTOL = 1e-3


def widened_module(module: Any) -> Any:
    """A deep copy of `module` in float64 (parameters and floating buffers); a plain callable as is."""
    copied = copy.deepcopy(module)
    return copied.double() if hasattr(copied, "double") and hasattr(copied, "parameters") else copied


def widened(value: Any) -> Any:
    """The inputs with their floating-point tensors in float64 (bool masks and token ids as they are)."""
    if hasattr(value, "is_floating_point"):
        return value.double() if value.is_floating_point() else value
    if isinstance(value, (tuple, list)):
        return type(value)(widened(v) for v in value)
    return {k: widened(v) for k, v in value.items()} if isinstance(value, dict) else value


@contextlib.contextmanager
def in_float64(absorbing: list[float] | None = None) -> Iterator[None]:
    """Tensors made in the forward at the default dtype are double, and its narrowing casts keep double;
    with `absorbing`, the largest |value| in ABSORBING of each op's result is appended to it."""
    import torch
    from torch.overrides import TorchFunctionMode

    narrowing = {torch.Tensor.float, torch.Tensor.half, torch.Tensor.bfloat16}

    def wide(x: Any) -> Any:
        narrow = isinstance(x, torch.dtype) and x.is_floating_point and x != torch.float64
        return torch.float64 if narrow else x

    class KeepDouble(TorchFunctionMode):
        def __torch_function__(self, func, types, args=(), kwargs=None):
            if func in narrowing and args:  # `mask.float()` too: a float mask must match a double query
                return args[0].double()
            out = func(*(wide(a) for a in args), **{k: wide(v) for k, v in (kwargs or {}).items()})
            if absorbing is not None and isinstance(out, torch.Tensor) and out.is_floating_point():
                size = out.detach().abs()
                size = size[(size >= ABSORBING[0]) & (size < ABSORBING[1])]
                absorbing.append(float(size.max()) if size.numel() else 0.0)
            return out

    default = torch.get_default_dtype()
    torch.set_default_dtype(torch.float64)
    try:
        with KeepDouble():
            yield
    finally:
        torch.set_default_dtype(default)


def tolerance(absorbing: list[float]) -> float:
    """RTOL, or the rounding of float64 at the largest absorbing value the forward made (ABSORBING)."""
    import torch

    largest = max(absorbing, default=0.0)
    return max(RTOL, min(ABSORBED_RTOL, 64 * torch.finfo(torch.float64).eps * largest))


def magnitude(t: Any) -> float:
    """The largest finite |value| of a tensor (0 for an empty or all-NaN one)."""
    import torch

    finite = t.detach().double()
    finite = finite[torch.isfinite(finite)]
    return float(finite.abs().max()) if finite.numel() else 0.0


def relative_difference(want: Any, got: Any) -> float:
    """max |got - want| over the tensor's largest magnitude; inf where one is NaN or inf and the other
    not (the caller decides first what a NaN of the original means)."""
    import torch

    if not want.numel():
        return 0.0
    a, b = want.detach().double(), got.detach().double()
    same_special = (torch.isnan(a) & torch.isnan(b)) | ((a == b) & ~torch.isfinite(a))
    difference = torch.where(same_special, torch.zeros_like(a), (a - b).abs())
    worst = float(torch.nan_to_num(difference, nan=float("inf")).max())
    return worst / max(magnitude(a), ATOL / RTOL)
