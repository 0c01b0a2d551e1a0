"""`attnprof patch` (source rewrites, proven safe or refused with the reason) and `attnprof.patch`
(the same rewrite at run time through torch.fx)."""

from __future__ import annotations

import ast
import shutil
import subprocess
import sys
import textwrap

import pytest
import torch

import attnprof
from attnprof.errors import PatchError
from attnprof.fix import edits as source_edits
from attnprof.fix import source_io
from attnprof.fix.inplace import plan as inplace
from attnprof.fix.inplace.safety import judge, out_of_place_fill
from attnprof.fix.target import load_target
from support import FIXTURES

MODELS = FIXTURES / "user_models"
FILL = 'att = att.masked_fill(self.bias[:, :, :T, :T] == 0, float("-inf"))'


def verdict(body: str):
    fn = ast.parse(textwrap.dedent(body)).body[0]
    stmt = next(s for s in ast.walk(fn) if isinstance(s, ast.stmt) and out_of_place_fill(s))
    return judge(fn, stmt)


def fn(*lines: str) -> str:
    """A function's source from its lines; `>` at the start of a line indents it one more level."""
    body = ["    " + ("    " + ln[1:] if ln.startswith(">") else ln) for ln in lines[1:]]
    return "\n".join([lines[0], *body]) + "\n"


@pytest.mark.parametrize("body", [
    fn("def f(q, k, m):", "att = q @ k", "att = att.masked_fill(m, 0)", "return att.softmax(-1)"),
    fn("def f(q, k, m):", "s = torch.matmul(q, k) * 2", "n = s.shape[-1]", "p = s.masked_fill(m, 0)",
       "return p"),
    fn("def f(q, k, m, c):", "att = q @ k", "if c:", ">att = att.masked_fill(m, 0)", "return att"),
])
def test_safe_rewrites(body):
    assert verdict(body).safe, verdict(body).reason


@pytest.mark.parametrize("body,why", [
    (fn("def f(q, k, m):", "s = q @ k", "a = s.masked_fill(m, 0)", "return a + s.logsumexp(-1)"),
     "used again"),
    (fn("def f(att, m):", "att = att.masked_fill(m, 0)", "return att"), "argument"),
    (fn("def f(s, m):", "att = s.view(4, 4)", "att = att.masked_fill(m, 0)", "return att"), "view or alias"),
    (fn("def f(q, k, m):", "att = q @ k", "raw = att", "att = att.masked_fill(m, 0)", "return att, raw"),
     "aliased"),
    (fn("def f(q, k, m):", "att = q @ k", "keep(att)", "att = att.masked_fill(m, 0)", "return att"),
     "aliased"),
    (fn("def f(self, m):", "self.att = self.att.masked_fill(m, 0)"), "self.att"),
    (fn("def f(q, k, ms):", "att = q @ k", "for m in ms:", ">att = att.masked_fill(m, 0)", "return att"),
     "loop"),
    (fn("def f(q, k, m):", "att = q @ k", "att = att[:, :4]", "att = att.masked_fill(m, 0)", "return att"),
     "view or alias"),
])
def test_unsafe_rewrites_are_refused_with_the_reason(body, why):
    v = verdict(body)
    assert not v.safe and why in v.reason, v.reason


@pytest.fixture
def gpt_copy(tmp_path):
    shutil.copy(MODELS / "gpt_attention.py", tmp_path)
    return tmp_path / "gpt_attention.py"


def test_patch_diff_proposes_the_in_place_fill(gpt_copy):
    command = [sys.executable, "-m", "attnprof", "patch", f"{gpt_copy}:make", "--diff", "--device", "cpu"]
    proc = subprocess.run(command, capture_output=True, text=True, timeout=300, cwd=gpt_copy.parent)
    assert proc.returncode == 0, proc.stderr
    assert f"-        {FILL}\n" in proc.stdout
    assert '+        att.masked_fill_(self.bias[:, :, :T, :T] == 0, float("-inf"))\n' in proc.stdout
    assert "rewrite:" in proc.stdout and not (gpt_copy.parent / "gpt_attention.py.orig").exists()


def test_patch_write_changes_only_that_line_and_keeps_outputs(gpt_copy):
    old = gpt_copy.read_text()
    original = load_target(f"{gpt_copy}:make")
    edits = inplace.plan(original)
    [path] = source_io.write(source_edits.patched_sources(edits))
    new = gpt_copy.read_text()
    changed = [(a, b) for a, b in zip(old.splitlines(True), new.splitlines(True), strict=True) if a != b]
    in_place = FILL.replace("att = att.masked_fill(", "att.masked_fill_(")
    assert changed == [(f"        {FILL}\n", f"        {in_place}\n")]
    assert (gpt_copy.parent / "gpt_attention.py.orig").read_text() == old
    patched = load_target(f"{gpt_copy}:make")
    patched.fn.load_state_dict(original.fn.state_dict())
    with torch.no_grad():
        torch.testing.assert_close(patched.fn(*original.inputs), original())
    assert not any(e.safe for e in inplace.plan(patched)), "patching twice changes nothing"
    with pytest.raises(ValueError, match="already exists"):
        source_io.write({str(path): (new, new + "\n")})


def test_raw_scores_used_after_masking_are_left_alone():
    [edit] = inplace.plan(load_target(f"{MODELS / 'raw_scores_reused.py'}:make"))
    assert not edit.safe and "used again" in edit.reason
    assert source_edits.patched_sources([edit]) == {}


def test_autograd_on_is_refused_at_run_time():
    [edit] = inplace.plan(load_target(f"{MODELS / 'gpt_attention.py'}:make"), grad=True)
    assert not edit.safe and "requires grad" in edit.reason


def test_verify_on_cpu_shows_the_copy_gone(gpt_copy):
    from attnprof.fix.verify import verify

    sources = source_edits.patched_sources(inplace.plan(load_target(f"{gpt_copy}:make")))
    source_io.write(sources)  # as `patch --write --verify` does: before is the old text, not the file
    result = verify(f"{gpt_copy}:make", sources, "cpu")
    assert result["outputs"]["match"], result["outputs"]
    d = result["diff"]
    assert d["delta"]["copies"] == -1 and "hidden-copy" in d["findings_removed"]
    assert {"aten::masked_fill", "aten::clone"} <= set(result["aten_removed"])
    assert result["latency_us"]["before"] > 0
    assert result["latency_us"]["change"]["verdict"] in ("no change", "faster", "slower")


def test_the_verify_view_leads_with_device_time_and_says_no_change_inside_both_spreads():
    from attnprof.report.fix_views import render_verify

    spread = {"median": 100.0, "p25": 98.0, "p75": 102.0, "unstable": None}
    counts = {"aten_ops": 10, "copies": 2}
    result = {"outputs": {"match": True, "detail": "1 output tensor(s)"},
              "diff": {"a": counts, "b": {"aten_ops": 8, "copies": 1}, "delta": {"aten_ops": -2, "copies": -1},
                       "summary": []},
              "latency_us": {"before": 100.0, "after": 101.0, "change_pct": 1.0, "method": "cpu-wall",
                             "spread": [spread, {**spread, "median": 101.0}],
                             "change": {"verdict": "no change", "change_pct": 1.0, "unstable": None}}}
    lines = []
    render_verify(result, lines.append)
    assert lines[0].startswith("device time per forward (cpu-wall")
    assert lines[0].endswith("no change (inside both spreads)")
    assert lines[1] == "per forward (exact counts): aten ops 10 → 8 (-2), copies 2 → 1 (-1)"
    assert lines[2] == "outputs: 1 output tensor(s)"


def test_the_verify_view_says_each_count_once_and_labels_profiled_host_time():
    from attnprof.report.fix_views import render_verify

    counts = {"aten_ops": 10, "copies": 2}
    summary = ["aten ops per forward 10 -> 8 (-2)", "copies per forward 2 -> 1 (-1)",
               "host time in the traces (profiler overhead included), per forward 1.2 ms -> 23.8 ms (+22.6 ms)"]
    result = {"outputs": {"match": True, "detail": "the same"},
              "diff": {"a": counts, "b": {"aten_ops": 8, "copies": 1}, "delta": {"aten_ops": -2, "copies": -1},
                       "summary": summary},
              "latency_us": {"before": 100.0, "after": 90.0, "change_pct": -10.0}}
    lines = []
    render_verify(result, lines.append)
    text = "\n".join(lines)
    assert text.count("aten ops") == 1 and text.count("copies") == 1
    assert lines[-1].startswith("host time in the traces (profiler overhead included)") and "ms" in lines[-1]


@pytest.mark.cuda
def test_verify_on_gpu_removes_the_memcpy(gpt_copy):
    from attnprof.fix.verify import verify

    sources = source_edits.patched_sources(inplace.plan(load_target(f"{gpt_copy}:make").to("cuda")))
    result = verify(f"{gpt_copy}:make", sources, "cuda")
    d = result["diff"]
    assert result["outputs"]["match"], result["outputs"]
    assert d["a"]["memcpy"] == 1 and d["b"]["memcpy"] == 0, d["summary"]
    assert d["delta"]["gpu_ops"] == -1, d["summary"]
    assert any(r["kind"] == "memcpy" for r in d["removed"]), d["removed"]


def test_runtime_patch_rewrites_a_traceable_module():
    target = load_target(f"{MODELS / 'heads_attention.py'}:make")
    patched = attnprof.patch(target.fn)
    assert len(patched.attnprof_rewrites) == 1
    with torch.no_grad():
        torch.testing.assert_close(patched(*target.inputs), target())
    q, k, v = (t.clone().requires_grad_() for t in target.inputs)  # autograd on: it falls back, grads flow
    patched(q, k, v).sum().backward()
    assert q.grad is not None and torch.isfinite(q.grad).all()


def test_runtime_patch_keeps_a_fill_whose_input_is_read_again():
    target = load_target(f"{MODELS / 'raw_scores_reused.py'}:make")
    patched = attnprof.patch(target.fn)
    assert patched.attnprof_rewrites == []
    with torch.no_grad():
        for a, b in zip(patched(*target.inputs), target(), strict=True):
            torch.testing.assert_close(a, b)


@pytest.mark.parametrize("factory", ["branchy.py:make", "gpt_attention.py:make"])
def test_runtime_patch_says_when_fx_cannot_trace(factory):
    target = load_target(f"{MODELS / factory}")
    with pytest.raises(PatchError, match="torch.fx cannot trace .*data-dependent control flow.*compile=True"):
        attnprof.patch(target.fn)


def test_runtime_patch_through_compile_follows_what_fx_cannot():
    target = load_target(f"{MODELS / 'gpt_attention.py'}:make")
    patched = attnprof.patch(target.fn, compile=True)
    with torch.no_grad():
        torch.testing.assert_close(patched(*target.inputs), target())
        assert len(patched.attnprof_rewrites) == 1
        patched(*target.inputs)
        with attnprof.expect(forbid=["hidden-copy"]):
            patched(*target.inputs)
