"""A CPU out of memory is that variant's `oom` with the size asked for, never an internal error; inputs
too big for memory make every variant `oom` and the run still exits 0."""

from __future__ import annotations

import json

import pytest

from attnprof.harness.failures import classify
from attnprof.harness.runner import RunConfig, run
from attnprof.options import RunOptions
from attnprof.problem import Problem
from support import attnprof

CPU_ALLOCATOR = ("[enforce fail at alloc_cpu.cpp:127] err == 0. DefaultCPUAllocator: can't allocate memory: you "
                 "tried to allocate 35184372088832 bytes. Error code 12 (Cannot allocate memory)")


@pytest.mark.parametrize("error,words", [
    (RuntimeError(CPU_ALLOCATOR), "tried to allocate 32768.00 GiB"),
    (MemoryError(), "out of memory"),
])
def test_the_cpu_allocators_words_are_an_oom_with_the_size(error, words):
    failed = classify(error, [])
    assert failed["status"] == "oom" and words in failed["reason"]


def test_a_variant_that_cannot_get_its_memory_is_oom_and_the_others_run(tmp_path):
    huge = Problem(batch=1, heads=1, seq=400_000, head_dim=16, dtype="bf16")  # S x S scores: 298 GiB
    results, _ = run(RunConfig(problem=huge, variants=("naive",), device="cpu", check=False, profile=False,
                               options=RunOptions(out=str(tmp_path), repeats=3, warmup=1)))
    (record,) = results["variants"]
    assert record["status"] == "oom" and "GiB" in record["reason"], record


def test_inputs_too_big_for_memory_make_every_variant_oom_and_exit_0(tmp_path):
    proc = attnprof("run", "--device", "cpu", "--variants", "naive,sdpa-math", "--batch", "64", "--heads", "64",
                    "--seq", "100000000", "--head-dim", "128", "--out", str(tmp_path), "--no-report", "--no-history",
                    "--json", timeout=300)
    assert proc.returncode == 0, proc.stderr
    assert "internal error" not in proc.stderr
    variants = json.loads(proc.stdout)["variants"]
    assert [v["status"] for v in variants] == ["oom", "oom"]
    assert all("tried to allocate" in v["reason"] for v in variants)
