"""`attnprof.patch(module)`: the safe in-place rewrite at run time, for code the user cannot edit.

A torch.fx pass: a `masked_fill` (method or function) whose input is a fresh tensor (made by an
op of the graph that never returns its input or a view of it) with no other user becomes a call to
`masked_fill_if_safe`, which fills in place only when autograd does not need the tensor and the
mask does not broadcast it to a larger shape, and falls back to the out-of-place call otherwise.
So the patched module gives the same outputs in every mode, and skips the copy where it can.
"""

from __future__ import annotations

import operator
from typing import Any

from attnprof.fix.inplace.safety import FRESH

# Graph ops whose output is always a new tensor: the input of a fill may be overwritten.
FRESH_FUNCTIONS = {operator.mul, operator.add, operator.sub, operator.truediv, operator.matmul, operator.neg}


class PatchError(RuntimeError):
    """The module cannot be patched at run time; the message says why and what to do instead."""


def masked_fill_if_safe(x: Any, mask: Any, value: Any) -> Any:
    """`x.masked_fill_(mask, value)` when nothing can notice, else `x.masked_fill(mask, value)`."""
    import torch

    grows = torch.broadcast_shapes(x.shape, mask.shape) != x.shape
    if grows or (torch.is_grad_enabled() and x.requires_grad) or x._base is not None:
        return x.masked_fill(mask, value)
    return x.masked_fill_(mask, value)


def patch(module: Any, compile: bool = False, to_sdpa: bool = False, inputs: tuple | dict | None = None,
          strict: bool = False) -> Any:
    """A GraphModule of `module` with safe masked_fills in place; `.attnprof_rewrites` names them.

    `compile=True` captures the graphs with torch.compile instead of torch.fx.symbolic_trace: it
    follows Python that needs real values (shapes as ints, slicing by them) and splits the graph at
    data-dependent branches. The rewrites then happen at the first call, per captured graph.

    `to_sdpa=True` rewrites hand-written attention to one scaled_dot_product_attention call instead
    (what `attnprof patch --to-sdpa` writes), on `module` itself: each method with a chain is
    recompiled from its rewritten source and bound to the instances. With `inputs` (the forward's
    arguments) the proof uses the calls they make (a mask equal to the causal mask at run time);
    without, only what the source proves is rewritten. With `inputs` each rewrite is also checked against
    the original (fix.differential, in float64, under torch.no_grad() too) and `.attnprof_verdict` says
    what was checked; `strict=True` refuses a rewrite that loses autograd the original supports (double
    backward, forward-mode AD). A transformers model is switched to attn_implementation="sdpa" instead of
    edited.
    """
    if to_sdpa:
        return _patch_to_sdpa(module, inputs, strict)
    if compile:
        return _patch_compiled(module)
    import torch.fx

    try:
        graph_module = torch.fx.symbolic_trace(module)
    except Exception as e:  # noqa: BLE001 - fx raises many types for code it cannot trace
        reason = " ".join(str(e).split())[:300]
        raise PatchError(
            f"attnprof.patch: torch.fx cannot trace {type(module).__name__} (data-dependent control flow, "
            f"e.g. `if tensor.sum() > 0:`, or Python that needs real values): {type(e).__name__}: {reason}. "
            "Try attnprof.patch(module, compile=True), or patch the source: "
            "`attnprof patch path/to/file.py:factory --write`") from None
    graph_module.attnprof_rewrites = _rewrite_all(graph_module)
    return graph_module


def _patch_to_sdpa(module: Any, inputs: tuple | dict | None, strict: bool) -> Any:
    from attnprof.fix.to_sdpa.runtime import rewrite_module

    config = getattr(module, "config", None)
    if hasattr(module, "set_attn_implementation") and getattr(config, "_attn_implementation", None) == "eager":
        module.set_attn_implementation("sdpa")  # the library's own switch: its code is configured, not edited
        module.attnprof_rewrites = ['attn_implementation="sdpa"']
        return module
    done, refused, verdict = rewrite_module(module, inputs, strict)
    if not done:
        reasons = "; ".join(refused) or "no softmax between two matmuls in its classes' methods"
        raise PatchError(f"attnprof.patch(to_sdpa=True): nothing rewritten in {type(module).__name__}: {reasons}")
    module.attnprof_rewrites = done
    module.attnprof_refused = refused
    module.attnprof_verdict = verdict
    return module


def _patch_compiled(module: Any) -> Any:
    import torch

    rewrites: list[str] = []

    def backend(graph_module, example_inputs):
        rewrites.extend(_rewrite_all(graph_module))
        return graph_module.forward

    compiled = torch.compile(module, backend=backend)
    compiled.attnprof_rewrites = rewrites
    return compiled


def _rewrite_all(graph_module) -> list[str]:
    rewrites = [node.name for node in list(graph_module.graph.nodes) if _rewrite(graph_module.graph, node)]
    graph_module.graph.lint()
    graph_module.recompile()
    return rewrites


def _rewrite(graph, node) -> bool:
    if not _is_fill(node) or len(node.args) < 3 or node.kwargs:
        return False
    source = node.args[0]
    if not (hasattr(source, "users") and len(source.users) == 1 and _is_fresh(source)):
        return False
    with graph.inserting_after(node):
        safe = graph.call_function(masked_fill_if_safe, tuple(node.args[:3]))
    node.replace_all_uses_with(safe)
    graph.erase_node(node)
    return True


def _is_fill(node) -> bool:
    import torch

    if node.op == "call_method":
        return node.target == "masked_fill"
    return node.op == "call_function" and node.target in (torch.masked_fill, torch.Tensor.masked_fill)


def _is_fresh(node) -> bool:
    if node.op == "call_function":
        return node.target in FRESH_FUNCTIONS or getattr(node.target, "__name__", None) in FRESH
    return node.op == "call_method" and node.target in FRESH
