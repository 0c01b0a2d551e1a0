"""One run of a module for the check against the original: its outputs, gradients, and what the call
left behind, as (label, tensor) pairs that two runs line up by."""

from __future__ import annotations

from typing import Any

from attnprof.fix.target import tensors_in


def run(fn: Any, inputs, grad: bool, seed: int = 0) -> list[tuple[str, Any]]:
    """(label, tensor) of the outputs, with `grad` of each float input's and parameter's gradient, then of
    what the call left in its inputs and the module's buffers and parameters. The loss weighs the outputs
    by float64 random numbers of one seed, so runs in different dtypes take the same gradient."""
    import torch

    torch.manual_seed(seed)
    args = copied(inputs, grad)
    with torch.set_grad_enabled(grad):
        out = fn(**args) if isinstance(args, dict) else fn(*args)
    outputs = [(f"output {i}", t) for i, t in enumerate(tensors_in(out))]
    kept = [(f"input {i} after the call", t.detach()) for i, t in enumerate(tensors_in(args))]
    kept += [(f"{n} after the call", t.detach()) for held in ("named_buffers", "named_parameters")
             for n, t in getattr(fn, held, lambda: [])()]
    if not grad:
        return outputs + kept
    torch.manual_seed(1)
    loss = sum((t.double() * torch.randn(t.shape, dtype=torch.float64, device=t.device)).sum()
               for _, t in outputs if t.requires_grad)
    if not torch.is_tensor(loss):
        return outputs + kept
    leaves = [(f"gradient of input {i}", t) for i, t in enumerate(tensors_in(args)) if t.requires_grad]
    leaves += [(f"gradient of {n}", p) for n, p in getattr(fn, "named_parameters", lambda: [])() if p.requires_grad]
    for _, t in leaves:
        t.grad = None
    loss.backward()
    grads = [(label, t.grad.detach().clone() if t.grad is not None else torch.zeros_like(t)) for label, t in leaves]
    return [(label, t.detach()) for label, t in outputs] + grads + kept


def copied(inputs, grad: bool):
    """The inputs for one run, each tensor a copy (what one module writes into cannot reach the other's
    run), float ones requiring grad with `grad`."""
    def one(t):
        if not hasattr(t, "detach"):
            return t
        t = t.detach().clone()
        return t.requires_grad_(True) if grad and t.is_floating_point() else t

    return map_leaves(inputs, one)


def map_leaves(value, fn):
    """`fn` applied to each leaf of nested tuples, lists and dicts, the nesting kept."""
    if isinstance(value, (tuple, list)):
        return type(value)(map_leaves(v, fn) for v in value)
    if isinstance(value, dict):
        return {k: map_leaves(v, fn) for k, v in value.items()}
    return fn(value)


def shortened(message: str, limit: int = 200) -> str:
    """One line of at most about `limit` characters, cut at a word (torch's own hints run on)."""
    text = " ".join(message.split())
    return text if len(text) <= limit else text[:limit].rsplit(" ", 1)[0].rstrip(",;:") + " ..."
