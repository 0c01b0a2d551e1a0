"""The name the written SDPA call reaches torch.nn.functional by: one the file binds by importing torch,
and nothing else binds anywhere in the file (a local `F = 3`, a parameter named `torch`, a `def F`,
an `except ... as F`), so the call means what it says wherever it is written."""

from __future__ import annotations

import ast

from attnprof.fix.to_sdpa.chain import Refused


def functional_name(names: dict[str, str], tree: ast.Module, fn: ast.AST) -> str:
    """How the file spells torch.nn.functional (`F`, `nn.functional`, `torch.nn.functional`), by a name
    that nothing but its import binds: a local `F = 3` or a parameter named `torch` would take the call."""
    shadowed = []
    for module, suffix in (("torch.nn.functional", ""), ("torch.nn", ".functional"), ("torch", ".nn.functional")):
        for alias in sorted(n for n, m in names.items() if m == module):
            where = _rebound(tree, alias)
            if where is None:
                return alias + suffix
            shadowed.append(f"`{alias}` is rebound on line {where}")
    if shadowed:
        raise Refused(fn.lineno, f"no safe name for torch.nn.functional: {'; '.join(shadowed)}")
    raise Refused(1, "the file does not import torch: there is no name to call SDPA by")


def _rebound(tree: ast.Module, name: str) -> int | None:
    """The first line that binds `name` other than by a plain import of a torch module."""
    for node in ast.walk(tree):
        if isinstance(node, ast.Name) and node.id == name and not isinstance(node.ctx, ast.Load):
            return node.lineno
        if isinstance(node, ast.arg) and node.arg == name:
            return node.lineno
        if isinstance(node, (ast.FunctionDef, ast.AsyncFunctionDef, ast.ClassDef)) and node.name == name:
            return node.lineno
        if isinstance(node, (ast.Import, ast.ImportFrom)):
            for a in node.names:
                bound = a.asname or a.name.split(".")[0]
                module = node.module if isinstance(node, ast.ImportFrom) else a.name
                if bound == name and not (module or "").startswith("torch"):
                    return node.lineno
        if isinstance(node, (ast.Global, ast.Nonlocal)) and name in node.names:
            return node.lineno
        if isinstance(node, ast.ExceptHandler) and node.name == name:
            return node.lineno
    return None
