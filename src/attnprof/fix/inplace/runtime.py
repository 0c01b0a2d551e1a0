"""`attnprof.patch(module)` (fix.rewrite.patch): the safe in-place rewrite at run time, for code the user
cannot edit.

A torch.fx pass: a `masked_fill` (method or function) whose input is a fresh tensor (made by an
op of the graph that never returns its input or a view of it) with no other user becomes a call to
`masked_fill_if_safe`, which fills in place only when autograd does not need the tensor and the
mask does not broadcast it to a larger shape, and falls back to the out-of-place call otherwise.
So the patched module gives the same outputs in every mode, and skips the copy where it can.
"""

from __future__ import annotations

import operator
from typing import Any

from attnprof.errors import PatchError
from attnprof.fix.inplace.safety import FRESH

# Graph ops whose output is always a new tensor: the input of a fill may be overwritten.
FRESH_FUNCTIONS = {operator.mul, operator.add, operator.sub, operator.truediv, operator.matmul, operator.neg}


def masked_fill_if_safe(x: Any, mask: Any, value: Any) -> Any:
    """`x.masked_fill_(mask, value)` when nothing can notice, else `x.masked_fill(mask, value)`."""
    import torch

    grows = torch.broadcast_shapes(x.shape, mask.shape) != x.shape
    if grows or (torch.is_grad_enabled() and x.requires_grad) or x._base is not None:
        return x.masked_fill(mask, value)
    return x.masked_fill_(mask, value)


def patch_graph(module: Any, compile: bool = False) -> Any:
    """A GraphModule of `module` with safe masked_fills in place (`.attnprof_rewrites` names them), captured
    by torch.fx.symbolic_trace, or with `compile=True` by torch.compile at the first call (fix.rewrite.patch)."""
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
