"""The autograd a module supports beyond first-order gradients: double backward (a gradient penalty,
MAML, Hessian-vector products) and forward-mode AD (torch.func.jvp). SDPA's CPU flash kernel has
neither, so a rewrite can compute the same function and still take them away: what the original
supports and the rewrite does not is listed as lost (refused under --strict); where both support
one, their results are compared like outputs."""

from __future__ import annotations

from typing import Any

DOUBLE_BACKWARD = "double backward"
FORWARD_MODE = "forward-mode AD (torch.func.jvp)"


def _call(fn: Any, inputs) -> Any:
    return fn(**inputs) if isinstance(inputs, dict) else fn(*inputs)


def _floats(inputs) -> list[tuple[Any, Any]]:
    """(key, tensor) of the floating-point inputs of a tuple or dict of arguments."""
    items = inputs.items() if isinstance(inputs, dict) else enumerate(inputs)
    return [(k, t) for k, t in items if hasattr(t, "is_floating_point") and t.is_floating_point()]


def _with(inputs, new: dict) -> Any:
    if isinstance(inputs, dict):
        return {**inputs, **new}
    return tuple(new.get(i, t) for i, t in enumerate(inputs))


def double_backward(fn: Any, inputs, tensors_of) -> list[tuple[str, Any]]:
    """The gradient of a weighted sum of the first-order gradients (every float input and parameter);
    raises where the forward does not support it, LookupError where nothing has a second derivative."""
    import torch

    args = _with(inputs, {k: t.detach().clone().requires_grad_(True) for k, t in _floats(inputs)})
    leaves = [(f"input {k}", t) for k, t in _floats(args)]
    leaves += [(n, p) for n, p in getattr(fn, "named_parameters", lambda: [])() if p.requires_grad]
    torch.manual_seed(1)
    outputs = [t for t in tensors_of(_call(fn, args)) if t.requires_grad]
    if not outputs:
        raise LookupError("no output depends on an input or a parameter")
    loss = sum((t * torch.randn(t.shape, dtype=t.dtype, device=t.device)).sum() for t in outputs)
    grads = torch.autograd.grad(loss, [t for _, t in leaves], create_graph=True, allow_unused=True)
    second = sum((g * torch.randn_like(g)).sum() for g in grads if g is not None and g.requires_grad)
    if not torch.is_tensor(second):
        raise LookupError("the gradients do not depend on the inputs (a linear forward)")
    again = torch.autograd.grad(second, [t for _, t in leaves], allow_unused=True)
    return [(f"second-order gradient of {name}", g.detach() if g is not None else torch.zeros_like(t))
            for (name, t), g in zip(leaves, again, strict=True)]


def forward_mode(fn: Any, inputs, tensors_of) -> list[tuple[str, Any]]:
    """The jvp of the outputs along one random direction of every parameter and float input."""
    import torch
    from torch.func import functional_call, jvp

    params = {n: p.detach() for n, p in getattr(fn, "named_parameters", lambda: [])()}
    floats = {k: t.detach() for k, t in _floats(inputs)}
    if not params and not floats:
        raise LookupError("nothing to differentiate")
    torch.manual_seed(2)
    directions = ({n: torch.randn_like(p) for n, p in params.items()},
                  {k: torch.randn_like(t) for k, t in floats.items()})

    def outputs(p: dict, x: dict) -> tuple:
        args = _with(inputs, x)
        called = functional_call(fn, p, args if isinstance(args, tuple) else (), args if isinstance(args, dict)
                                 else None) if params else _call(fn, args)
        return tuple(t for t in tensors_of(called) if t.is_floating_point())

    _, tangents = jvp(outputs, (params, floats), directions)
    return [(f"jvp of output {i}", t.detach()) for i, t in enumerate(tangents)]


CAPABILITIES = {DOUBLE_BACKWARD: double_backward, FORWARD_MODE: forward_mode}
