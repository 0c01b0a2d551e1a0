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
