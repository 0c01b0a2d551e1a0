"""A rewrite is checked against the original before anything is written: same weights, on the calls
seen and on variations of them, outputs and gradients.

Both sources are imported as separate modules (a copy: the user's file is never executed rewritten
before it passes). The variations are what the calls seen cannot show: the same shapes with
other values (a tensor kept from one call to the next shows there), other sequence lengths (shorter,
one, longer where the module accepts it), a query shorter than the keys (t != s, as with a KV cache
or an offset) where the inputs hold several tensors of one length, and autograd on (the gradients of
the inputs and of every parameter). Besides the outputs, what each call left in its inputs and in the
module's buffers and parameters is compared: an in-place op on a tensor the caller or the module
keeps changes them, not always the outputs. Each run gets its own copy of the inputs. A variation
the original itself rejects is not a call the module takes, and is skipped. Dropout is compared in
eval mode: two implementations draw different random masks by construction.
"""

from __future__ import annotations

import copy
from collections.abc import Iterator
from typing import Any

from attnprof.errors import UserError
from attnprof.fix.target import as_fp32, before_and_after, source_file, tensors_in


class RewriteDiffers(UserError):
    """The rewritten module computes something else, or does not run: nothing is written."""


def check(spec: str, sources: dict[str, tuple[str, str]], device: str = "cpu") -> list[str]:
    """The cases the rewrite (`sources`, {file: (old, new)}) agreed with the original on, outputs and
    gradients; raises RewriteDiffers on the first that disagrees or raises."""
    if not sources:
        return []
    file = str(source_file(spec))
    if set(sources) != {file}:
        others = ", ".join(sorted(set(sources) - {file}))
        raise RewriteDiffers(f"the rewrite is in {others}, not the target's own file: it cannot be checked in "
                             "a copy, so nothing is written (make a target in that file)")
    old, new = sources[file]
    before, after = before_and_after(spec, old, new, device)
    return check_modules(before.fn, after.fn, before.inputs)


def check_modules(original: Any, rewritten: Any, inputs) -> list[str]:
    """The cases two modules of the same weights agree on (outputs and gradients), as `check`."""
    _deterministic(original, rewritten)
    reference = _fp32_copy(original, inputs)
    passed = []
    for name, case in cases(inputs):
        if all([_compare(original, rewritten, name, case, grad, reference) for grad in (False, True)]):
            passed.append(name)
    if not passed:
        raise RewriteDiffers("the original forward did not run on its own inputs: nothing to check against")
    return passed


def _deterministic(*modules: Any) -> None:
    """Eval mode where a dropout would draw random masks (its p > 0)."""
    for module in modules:
        if hasattr(module, "modules") and any(getattr(m, "p", 0) for m in module.modules()
                                              if "Dropout" in type(m).__name__):
            module.eval()


def _fp32_copy(module: Any, inputs) -> Any | None:
    """An fp32 copy of a module run in 16-bit (the yardstick for both), else None."""
    import torch

    if not any(t.dtype in (torch.float16, torch.bfloat16) for t in tensors_in(inputs)) and not any(
            p.dtype in (torch.float16, torch.bfloat16) for p in getattr(module, "parameters", lambda: [])()):
        return None
    return copy.deepcopy(module).float() if hasattr(module, "float") else None


def _compare(before: Any, after: Any, name: str, inputs, grad: bool, reference: Any | None = None) -> bool:
    """True when both agree on this case; False when the original rejects it; raises when they differ.
    16-bit results agree when the rewrite is as close to an fp32 run of the original as the original is
    (the one verdict of fix.verify: the eager chain rounds its scores, SDPA keeps its softmax in fp32)."""
    import torch

    try:
        want = _run(before, inputs, grad)
    except Exception:  # noqa: BLE001 - the original rejects this variation: not a call it takes
        if name == CALLS_SEEN and not grad:
            raise
        return False
    try:
        got = _run(after, inputs, grad)
    except Exception as e:  # noqa: BLE001 - the rewritten forward raising is a failed check, in one line
        raise RewriteDiffers(f"the rewritten forward raises on {name}{' with grads' if grad else ''}: "
                             f"{type(e).__name__}: {_shortened(str(e))}") from None
    if len(want) != len(got):
        raise RewriteDiffers(f"the rewrite returns {len(got)} tensors on {name}, the original {len(want)}")
    exact = None
    for i, ((label, a), (_, b)) in enumerate(zip(want, got, strict=True)):
        if a.shape != b.shape or a.dtype != b.dtype:
            raise RewriteDiffers(f"the rewrite's {label} on {name} is {b.dtype} {list(b.shape)}, the original's "
                                 f"{a.dtype} {list(a.shape)}")
        try:
            torch.testing.assert_close(b, a, equal_nan=True, **_tolerance(a))
            continue
        except AssertionError:
            pass
        if reference is not None and a.dtype in (torch.float16, torch.bfloat16):
            exact = exact or _run(reference, as_fp32(inputs), grad)
            if within_rounding(_max_error(b, exact[i][1]), _max_error(a, exact[i][1])):
                continue
        raise RewriteDiffers(f"the rewrite's {label} differs from the original's on {name} (max abs "
                             f"difference {_max_error(b, a):.3g})")
    return True


def within_rounding(rewrite_error: float, original_error: float) -> bool:
    """Whether a 16-bit rewrite is as close to an fp32 run of the original as the original is (a quarter
    more, or a hair over zero): the one verdict of this check and of fix.verify."""
    return rewrite_error <= 1.25 * original_error + 1e-6


def _shortened(message: str, limit: int = 200) -> str:
    """One line of at most about `limit` characters, cut at a word (torch's own hints run on)."""
    text = " ".join(message.split())
    return text if len(text) <= limit else text[:limit].rsplit(" ", 1)[0].rstrip(",;:") + " ..."


def _max_error(t, reference) -> float:
    import torch

    if not t.numel():
        return 0.0
    difference = (t.double() - reference.double()).abs()
    return float(torch.nan_to_num(difference, nan=float("inf"), posinf=float("inf")).max())


CALLS_SEEN = "the calls seen"


def _tolerance(t) -> dict:
    """Tolerances a different summation order stays inside while a wrong rewrite does not (a dropped
    scale, a mask out of place: differences of 1e-2 and more): 1e-4 for fp32 (SDPA's GPU kernels sum
    in another order than two matmuls), a few units of precision for 16-bit formats before they are
    held against the fp32 run, torch.testing's defaults for fp64."""
    import torch

    if t.dtype in (torch.float16, torch.bfloat16):
        return {"rtol": 2e-2, "atol": 2e-2}
    return {"rtol": 1e-4, "atol": 1e-4} if t.dtype == torch.float32 else {}


def _run(fn, inputs, grad: bool) -> list[tuple[str, Any]]:
    """(label, tensor) of the outputs, with `grad` of each float input's and parameter's gradient, then of
    what the call left in its inputs and the module's buffers and parameters."""
    import torch

    torch.manual_seed(0)
    args = _copied(inputs, grad)
    with torch.set_grad_enabled(grad):
        out = fn(**args) if isinstance(args, dict) else fn(*args)
    outputs = [(f"output {i}", t) for i, t in enumerate(tensors_in(out))]
    kept = [(f"input {i} after the call", t.detach()) for i, t in enumerate(tensors_in(args))]
    kept += [(f"{n} after the call", t.detach()) for held in ("named_buffers", "named_parameters")
             for n, t in getattr(fn, held, lambda: [])()]
    if not grad:
        return outputs + kept
    torch.manual_seed(1)
    loss = sum((t.float() * torch.randn(t.shape, device=t.device)).sum() for _, t in outputs if t.requires_grad)
    if not torch.is_tensor(loss):
        return outputs + kept
    leaves = [(f"gradient of input {i}", t) for i, t in enumerate(tensors_in(args)) if t.requires_grad]
    leaves += [(f"gradient of {n}", p) for n, p in getattr(fn, "named_parameters", lambda: [])() if p.requires_grad]
    for _, t in leaves:
        t.grad = None
    loss.backward()
    grads = [(label, t.grad.detach().clone() if t.grad is not None else torch.zeros_like(t)) for label, t in leaves]
    return [(label, t.detach()) for label, t in outputs] + grads + kept


def _copied(inputs, grad: bool):
    """The inputs for one run, each tensor a copy (what one module writes into cannot reach the other's
    run), float ones requiring grad with `grad`."""
    def one(t):
        if not hasattr(t, "detach"):
            return t
        t = t.detach().clone()
        return t.requires_grad_(True) if grad and t.is_floating_point() else t

    return _map(inputs, one)


def cases(inputs) -> Iterator[tuple[str, Any]]:
    """The calls seen, the same shapes with other values, the inputs at other sequence lengths, and with a
    shorter query."""
    yield CALLS_SEEN, inputs
    length = _sequence_length(inputs)
    if length is None:
        return
    yield "the same shapes with other values (the sequence reversed)", _map(inputs, lambda t: _reversed(t, length))
    for n in sorted({length - 1, max(1, length // 2), 1, length + 3} - {length, 0}, reverse=True):
        yield f"sequence length {n}", _resized(inputs, length, n, every=True)
    if _sharing(inputs, length) > 1:
        for n in sorted({max(1, length // 4), length - 1} - {length, 0}, reverse=True):
            yield f"a query of {n} against {length} keys", _resized(inputs, length, n, every=False)


def _sequence_dim(t) -> int | None:
    """Where a tensor's sequence runs: the second-last dim of a float tensor, the last of token ids."""
    if not hasattr(t, "shape") or t.dim() < 1:
        return None
    if t.is_floating_point():
        return t.dim() - 2 if t.dim() >= 2 else None
    return t.dim() - 1 if t.dim() == 2 and t.dtype.is_signed else None  # int64 token ids, not bool or uint8


def _sequence_length(inputs) -> int | None:
    """The most common sequence length among the inputs' tensors."""
    lengths = [t.shape[d] for t in tensors_in(inputs) if (d := _sequence_dim(t)) is not None]
    return max(set(lengths), key=lengths.count) if lengths else None


def _sharing(inputs, length: int) -> int:
    return sum(1 for t in tensors_in(inputs) if t.is_floating_point() and (d := _sequence_dim(t)) is not None
               and t.shape[d] == length)


def _resized(inputs, old: int, new: int, every: bool):
    """The inputs with their sequence dims of `old` cut (or grown by repeating) to `new`; with `every`
    False only the first float tensor of that length (the query), and the query dim of square masks (not of a
    key or value shaped as the query is: with a head dim equal to the length, k looks square too)."""
    state: dict[str, Any] = {"query": None}

    def one(t):
        if not hasattr(t, "shape"):
            return t
        if every:
            dims = [d for d in range(max(t.dim() - 2, 0), t.dim()) if t.shape[d] == old]
        elif t.is_floating_point() and _sequence_dim(t) is not None and t.shape[-2] == old and not state["query"]:
            state["query"] = tuple(t.shape)
            dims = [t.dim() - 2]
        elif t.dim() >= 2 and tuple(t.shape[-2:]) == (old, old) and tuple(t.shape) != state["query"]:
            dims = [t.dim() - 2]  # a passed [.., t, s] mask: its query dim (a key of the query's shape is no mask)
        else:
            dims = []
        for d in dims:
            t = _cut_or_grow(t, d, new)
        return t

    return _map(inputs, one)


def _reversed(t, length: int):
    """`t` reversed along its sequence dims (of its last two, those of `length`): same shapes, other values,
    and a mask keeps its count of kept keys per row."""
    if not hasattr(t, "flip"):
        return t
    dims = [d for d in range(max(t.dim() - 2, 0), t.dim()) if t.shape[d] == length]
    return t.flip(dims) if dims else t


def _cut_or_grow(t, dim: int, n: int):
    import torch

    if n <= t.shape[dim]:
        return t.narrow(dim, 0, n).contiguous()
    reps = -(-n // t.shape[dim])
    return torch.cat([t] * reps, dim=dim).narrow(dim, 0, n).contiguous()


def _map(value, fn):
    if isinstance(value, (tuple, list)):
        return type(value)(_map(v, fn) for v in value)
    if isinstance(value, dict):
        return {k: _map(v, fn) for k, v in value.items()}
    return fn(value)
