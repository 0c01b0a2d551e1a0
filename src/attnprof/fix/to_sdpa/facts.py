"""What the attention steps did at run time: the facts a source rewrite to SDPA cannot read in the source.

The forward runs once under a TorchFunctionMode; each torch call made from one of the chain's lines
is summarised on the spot (shapes, the softmax's dim, whether a mask equals the causal mask for the
shapes seen, how far below the scores a fill value lies), so no tensor is kept.
"""

from __future__ import annotations

from collections import defaultdict
from dataclasses import dataclass, field
from typing import Any

MATMUL_OPS = {"matmul", "__matmul__", "bmm", "einsum"}
ADD_OPS = {"add", "__add__", "__radd__", "__iadd__", "add_"}
SCALE_OPS = {"mul", "__mul__", "__rmul__", "div", "__truediv__", "true_divide"}
# exp(-30) ~ 1e-13: a fill this far below every score weighs nothing next to the unmasked ones
MARGIN = 30.0


@dataclass
class Seen:
    op: str
    info: dict[str, Any] = field(default_factory=dict)


Facts = dict[tuple[str, int], list[Seen]]


def observe(call, lines: set[tuple[str, int]], grad: bool = False) -> Facts:
    """Run `call()` once and summarise each torch call made from one of `lines` ((file, line))."""
    import torch
    from torch.overrides import TorchFunctionMode

    from attnprof.fix.lint import user_line

    seen: Facts = defaultdict(list)

    class Watch(TorchFunctionMode):
        def __torch_function__(self, func, types, args=(), kwargs=None):
            kwargs = kwargs or {}
            out = func(*args, **kwargs)
            name = getattr(func, "__name__", "")
            where = user_line() if name in SUMMARIES else None
            if where in lines:  # the mode is off inside its own handler: the summaries run plainly
                seen[where].append(Seen(name, _summary(name, args, kwargs)))
            return out

    with torch.set_grad_enabled(grad), Watch():
        call()
    return dict(seen)


def _summary(name: str, args: tuple, kwargs: dict) -> dict:
    """The op's summary, or what kept it from being read (a valid call attnprof cannot summarise, such as
    scores + a bool mask): the proof then refuses that line instead of failing with an internal error."""
    try:
        return SUMMARIES[name](*args, **kwargs)
    except Exception as e:  # noqa: BLE001 - any failure to read a call is a refusal, not a crash
        return {"unreadable": f"{type(e).__name__}: {' '.join(str(e).split())[:80]}"}


def lines_run(call, grad: bool = False) -> dict[str, set[int]]:
    """{file: lines} of user code that made a torch call when `call()` ran once."""
    import torch
    from torch.overrides import TorchFunctionMode

    from attnprof.fix.lint import user_line

    ran: dict[str, set[int]] = defaultdict(set)

    class Lines(TorchFunctionMode):
        def __torch_function__(self, func, types, args=(), kwargs=None):
            where = user_line()
            if where is not None:
                ran[where[0]].add(where[1])
            return func(*args, **(kwargs or {}))

    with torch.set_grad_enabled(grad), Lines():
        call()
    return dict(ran)


def _shape(t) -> tuple[int, ...] | None:
    return tuple(t.shape) if hasattr(t, "shape") else None


def _number(v) -> float | None:
    if isinstance(v, (int, float)):
        return float(v)
    return float(v) if hasattr(v, "numel") and v.numel() == 1 else None


def _tril(like, shape):
    import torch

    return torch.ones(shape[-2], shape[-1], dtype=torch.bool, device=like.device).tril()


def _equals(mask, ref, shape) -> bool:
    """`mask`, broadcast to `shape`, equals `ref` ([L, S]) in every leading slice."""
    import torch

    try:
        if torch.broadcast_shapes(tuple(mask.shape), tuple(shape)) != tuple(shape):
            return False
    except RuntimeError:
        return False
    return bool((mask == ref).all())


def _matmul(a, b, *rest, **kw) -> dict:
    if isinstance(a, str):  # einsum(equation, x, y)
        a, b = b, rest[0] if rest else None
    return {"shapes": (_shape(a), _shape(b)), "dtypes": (_dtype(a), _dtype(b))}


def _dtype(t) -> str | None:
    return str(t.dtype) if hasattr(t, "dtype") else None


def _scale_op(a, b, *rest, **kw) -> dict:
    """A multiply or divide on a scale line: which operands are tensors, and their shapes."""
    return {"tensors": [hasattr(t, "shape") for t in (a, b)], "shapes": [_shape(t) for t in (a, b)],
            "numbers": [_number(t) if not hasattr(t, "shape") else None for t in (a, b)]}


def _softmax(x, dim=None, *rest, **kw) -> dict:
    dim = kw.get("dim", dim)
    nd = x.dim()
    dtype = kw.get("dtype")
    return {"last": dim is not None and dim % nd == nd - 1, "ndim": nd, "dtype": _dtype(x),
            "out_dtype": str(dtype) if dtype is not None else _dtype(x)}


def _masked_fill(x, mask, value, *rest, **kw) -> dict:
    shape = tuple(x.shape)
    fill = _number(value)
    import torch

    shape = torch.broadcast_shapes(shape, tuple(mask.shape))
    low = float(x.amin()) if x.numel() else 0.0
    return {"causal": _equals(mask, ~_tril(x, shape), shape), "fill": fill,
            "strong": fill is not None and fill <= low - MARGIN,
            "row_all_true": bool(mask.expand(shape).all(-1).any())}


def _where(cond, a, b, *rest, **kw) -> dict:
    import torch

    shape = torch.broadcast_shapes(*(tuple(t.shape) for t in (cond, a, b) if hasattr(t, "shape")))
    tril = _tril(cond, shape)
    values = [_number(t) for t in (a, b)]
    lows = [float(t.amin()) if hasattr(t, "amin") and t.numel() > 1 else None for t in (a, b)]
    whole = cond.expand(shape)
    return {"keep_causal": _equals(cond, tril, shape), "drop_causal": _equals(cond, ~tril, shape),
            # strong[i]: operand i is a fill far below the other operand (the scores)
            "strong": [v is not None and lows[1 - i] is not None and v <= lows[1 - i] - MARGIN
                       for i, v in enumerate(values)],
            "row_all_false": bool((~whole).all(-1).any()), "row_all_true": bool(whole.all(-1).any())}


def _add(a, b, *rest, **kw) -> dict:
    """For each operand: a float tensor? a causal mask for the other operand (the scores)?"""
    return {"operands": [_additive(mask, scores) for mask, scores in ((a, b), (b, a))]}


def _additive(mask, scores) -> dict:
    """0 on and below the diagonal, far below every score above it, broadcasting to the scores."""
    import torch

    is_float = hasattr(mask, "dtype") and mask.dtype.is_floating_point
    scores_float = hasattr(scores, "dtype") and scores.dtype.is_floating_point
    if not (is_float and scores_float and mask.dim() >= 2 and scores.dim() >= 2 and scores.numel()):
        return {"float": is_float, "causal": False}
    shape = tuple(scores.shape)
    try:
        fits = torch.broadcast_shapes(tuple(mask.shape), shape) == shape
    except RuntimeError:
        fits = False
    tril = _tril(mask, shape)
    below = float(scores.amin() - scores.amax()) - MARGIN
    causal = fits and bool(((mask == 0) | ~tril).all()) and bool(((mask <= below) | tril).all())
    return {"float": True, "causal": causal}


def _dropout(x, p=0.5, training=True, *rest, **kw) -> dict:
    return {"p": kw.get("p", p), "training": kw.get("training", training)}


def _repeat_interleave(x, repeats=None, dim=None, *rest, **kw) -> dict:
    dim = kw.get("dim", dim)
    repeats = kw.get("repeats", repeats)
    nd = x.dim()
    return {"shape": tuple(x.shape), "repeats": _number(repeats),
            "heads_dim": dim is not None and nd == 4 and dim % nd == 1}


SUMMARIES = {**dict.fromkeys(MATMUL_OPS, _matmul), **dict.fromkeys(ADD_OPS, _add),
             **dict.fromkeys(SCALE_OPS, _scale_op), "softmax": _softmax,
             "masked_fill": _masked_fill, "where": _where, "dropout": _dropout,
             "repeat_interleave": _repeat_interleave}


def at(facts: Facts | None, file: str, line: int, ops: set[str] | str) -> list[dict] | None:
    """The summaries of `ops` called from (file, line); None without facts (a source-only rewrite)."""
    if facts is None:
        return None
    from attnprof.fix.to_sdpa.chain import Refused

    ops = {ops} if isinstance(ops, str) else ops
    found = [s.info for s in facts.get((file, line), []) if s.op in ops]
    for info in found:
        if "unreadable" in info:
            raise Refused(line, f"the call on line {line} could not be read at run time ({info['unreadable']})")
    return found
