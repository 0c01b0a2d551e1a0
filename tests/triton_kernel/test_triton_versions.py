"""The Gluon kernels import on the Triton versions torch ships: Triton 3.6 (torch 2.11) has no
`gluon.aggregate`, only `triton.language.core._aggregate`, the same decorator later versions export."""

from __future__ import annotations

import importlib
import sys

import pytest

pytest.importorskip("torch")
gluon = pytest.importorskip("triton.experimental.gluon")

from attnprof.kernels import import_from_folder  # noqa: E402


def test_the_gluon_kernels_import_where_gluon_has_no_aggregate(monkeypatch):
    monkeypatch.delattr(gluon, "aggregate", raising=False)
    name = "_attnprof_flash_attn_triton_no_gluon_aggregate"
    monkeypatch.delitem(sys.modules, name, raising=False)
    try:
        kernel = import_from_folder(name=name)
        forward = importlib.import_module(f"{name}.forward._hopper")
        backward = importlib.import_module(f"{name}.backward._backward_hopper")
        assert forward.aggregate is importlib.import_module("triton.language.core")._aggregate
        assert kernel and forward.HeadPlace and backward.Steps  # the aggregates were made
    finally:
        for module in [m for m in sys.modules if m.startswith(name)]:
            del sys.modules[module]


def test_every_aggregate_has_what_triton_3_6_needs():
    """Triton 3.6 walks an aggregate's __init__ as a dependency (object.__init__ is refused: it must be a
    constexpr function) and checks each field with isinstance against its annotation (a string under
    `from __future__ import annotations` fails). Triton 3.9, which CI runs, needs neither, so the rule is read
    from the source: `python benchmarks/kernel/hopper_same_ptx.py` under Triton 3.6 is the real check."""
    import ast

    from attnprof.kernels import source_package

    checked = []
    for path in sorted(source_package().rglob("*.py")):
        tree = ast.parse(path.read_text())
        classes = [node for node in ast.walk(tree) if isinstance(node, ast.ClassDef)
                   and any(ast.unparse(d) == "aggregate" for d in node.decorator_list)]
        if not classes:
            continue
        assert not any(isinstance(n, ast.ImportFrom) and n.module == "__future__" for n in tree.body), path.name
        for cls in classes:
            inits = [n for n in cls.body if isinstance(n, ast.FunctionDef) and n.name == "__init__"]
            assert inits and "constexpr_function" in ast.unparse(inits[0].decorator_list[0]), (path.name, cls.name)
            checked.append(cls.name)
    assert {"HeadPlace", "KVRing", "Steps", "StepRing", "DQStages"} <= set(checked)
