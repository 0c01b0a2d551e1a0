"""Source-level checks of the functions a forward ran: patterns a trace shows only as their cost.

Only functions that ran (a source mark fell inside them) are read, so an installed library is
judged by the code path the user's model took, not by every branch in the file.
"""

from __future__ import annotations

import ast
import linecache
from functools import lru_cache

from attnprof.findings._common import Rule

FUNCTIONS = (ast.FunctionDef, ast.AsyncFunctionDef)
MATMULS = {"matmul", "bmm", "einsum", "baddbmm"}
MASK_MAKERS = {"ones", "tril", "triu", "full", "ones_like", "full_like"}
FP32 = {"float32", "float"}

# registered with the trace rules (findings.RULES) so that budgets and filters know their ids; the trace
# rule findings.hand_written_attention declares the id the source check below shares with it
RULES = (
    Rule("mask-in-forward", scope="source", waste=True),
    Rule("fp32-upcast", scope="source", waste=True),
)


@lru_cache(maxsize=64)
def parse(file: str) -> ast.Module | None:
    text = "".join(linecache.getlines(file))
    try:
        return ast.parse(text) if text else None
    except SyntaxError:
        return None


def check_files(ran: dict[str, set[int]]) -> list[dict]:
    """Findings for the functions holding the executed `lines` of each file."""
    out = []
    for file, lines in sorted(ran.items()):
        tree = parse(file)
        if tree is None:
            continue
        for fn in executed_functions(tree, lines):
            out += [_record(file, line, *what) for line, what in sorted(check_function(fn).items())]
    return out


def executed_functions(tree: ast.Module, lines: set[int]) -> list[ast.AST]:
    """The innermost function around each executed line, in source order."""
    fns = [n for n in ast.walk(tree) if isinstance(n, FUNCTIONS)]
    hit = {}
    for line in lines:
        around = [f for f in fns if f.lineno <= line <= f.end_lineno]
        if around:
            inner = min(around, key=lambda f: f.end_lineno - f.lineno)
            hit[id(inner)] = inner
    return sorted(hit.values(), key=lambda f: f.lineno)


def check_function(fn: ast.AST) -> dict[int, tuple[str, str, str, str]]:
    """{line: (id, severity, message, fix)}; one finding per line, the first that applies."""
    nodes = list(_own_nodes(fn))
    found: dict[int, tuple[str, str, str, str]] = {}
    attention = _hand_written_attention(nodes)
    if attention:
        found[attention[0]] = (
            "hand-written-attention", "warn",
            f"hand-written attention: matmul (line {attention[0]}) → softmax (line {attention[1]}) → "
            f"matmul (line {attention[2]}) materializes the [B, H, S, S] scores",
            "one torch.nn.functional.scaled_dot_product_attention call with this chain's own mask and scale "
            "computes it in one fused kernel (flash or cuDNN on a GPU) without the scores in memory; "
            "is_causal=True only where the mask is provably top-left causal")
    for node in nodes:
        if not isinstance(node, ast.Call) or node.lineno in found:
            continue
        name = func_name(node.func)
        if name in MASK_MAKERS and _is_torch_call(node):
            found[node.lineno] = (
                "mask-in-forward", "info", f"a mask is built on every forward (`{name}` in the forward path)",
                "build it once in __init__ with register_buffer, or let SDPA apply it (is_causal=True for a "
                "top-left causal mask)")
        elif _upcasts(node):
            found[node.lineno] = (
                "fp32-upcast", "info", "fp32 upcast on every forward: a new fp32 copy of the tensor",
                "keep 16-bit inputs: fused SDPA kernels accumulate in fp32 internally; upcast only where "
                "precision needs it")
    return found


def _own_nodes(fn: ast.AST):
    """Nodes of `fn` without the bodies of functions defined inside it (checked on their own)."""
    todo = list(ast.iter_child_nodes(fn))
    while todo:
        node = todo.pop()
        if isinstance(node, (*FUNCTIONS, ast.Lambda)):
            continue
        yield node
        todo.extend(ast.iter_child_nodes(node))


def _hand_written_attention(nodes: list[ast.AST]) -> tuple[int, int, int] | None:
    """(first matmul, softmax, second matmul) lines when a softmax sits between two matmuls."""
    # by end position: `softmax(s) @ v` starts where the softmax starts but ends after it
    matmuls = sorted(_end(n) for n in nodes if _is_matmul(n))
    for soft in sorted(_end(n) for n in nodes if isinstance(n, ast.Call) and func_name(n.func) == "softmax"):
        before = [m for m in matmuls if m < soft]
        after = [m for m in matmuls if m > soft]
        if before and after:
            return before[-1][0], soft[0], after[0][0]
    return None


def _end(node: ast.AST) -> tuple[int, int]:
    return node.end_lineno, node.end_col_offset


def _is_matmul(node: ast.AST) -> bool:
    if isinstance(node, ast.BinOp):
        return isinstance(node.op, ast.MatMult)
    return isinstance(node, ast.Call) and func_name(node.func) in MATMULS


def func_name(func: ast.AST) -> str | None:
    """The name a call's function goes by: `x.softmax` -> "softmax", `softmax` -> "softmax" (the AST
    helper fix/ uses too)."""
    if isinstance(func, ast.Attribute):
        return func.attr
    return func.id if isinstance(func, ast.Name) else None


def _is_torch_call(node: ast.Call) -> bool:
    """`torch.ones(...)`, `x.tril()`: a tensor factory or method, not a user function of that name."""
    func = node.func
    if isinstance(func, ast.Attribute):
        return not (isinstance(func.value, ast.Name) and func.value.id == "self")
    return False


def _upcasts(node: ast.Call) -> bool:
    """`.float()`, `.to(torch.float32)`, `.to(dtype=torch.float32)`, `softmax(..., dtype=torch.float32)`."""
    name = func_name(node.func)
    if name == "float" and isinstance(node.func, ast.Attribute) and not node.args:
        return True
    dtypes = [kw.value for kw in node.keywords if kw.arg == "dtype"]
    if name in ("to", "type"):
        dtypes += node.args[:1]
    return any(isinstance(d, ast.Attribute) and d.attr in FP32 and func_name(d.value) == "torch" for d in dtypes)


def _record(file: str, line: int, fid: str, severity: str, message: str, fix: str) -> dict:
    return {"id": fid, "severity": severity, "message": message, "file": file, "line": line,
            "code": linecache.getline(file, line).strip(), "fix": fix, "cost_us": None}
