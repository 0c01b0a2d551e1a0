"""Keep it fixed: `with attnprof.expect(max_gpu_ops=6, forbid=["hidden-copy"]): fn()`.

The block runs once under the profiler (warm it up first: a first call's lazy setup is not the
forward's cost) and is judged as one forward. On a GPU the budget is GPU activities; on the CPU it
is aten ops and copies, and GPU-only limits are skipped with a warning, so one test runs in both
places. `forbid` takes finding ids (`hidden-copy`) and GPU activity kinds (`memcpy`, `memset`).

Blocks do not nest: the profiler is one per process, and a second one started inside the first
crashes the process, so an `expect` (or `kernel_budget`) inside another, or inside torch.profiler,
fails at once with a clear error instead. Arguments are checked before the block runs.
"""

from __future__ import annotations

import ast
import linecache
import math
import re
import tempfile
import warnings
from collections import Counter
from collections.abc import Iterable, Iterator
from contextlib import contextmanager
from pathlib import Path

from attnprof.analysis.attribution import Analysis, analyze_trace, per_forward
from attnprof.analysis.kernel_summary import kernel_table
from attnprof.errors import UserError

REGION = "attnprof.expect"
KINDS = ("memcpy", "memset")  # GPU activity kinds a budget may forbid (kernels are counted, not banned)
GPU_LIMITS = ("max_gpu_ops", "max_kernels")
LISTED = 15  # activities or ops shown in a failure


@contextmanager
def expect(*, max_gpu_ops: int | None = None, max_kernels: int | None = None,
           max_aten_ops: int | None = None, max_copies: int | None = None, forbid: Iterable[str] = (),
           device: str | None = None) -> Iterator[None]:
    """Profile the block; raise AssertionError listing what it ran when it breaks the budget."""
    forbid = _forbidden(forbid)
    limits = _limits({"max_gpu_ops": max_gpu_ops, "max_kernels": max_kernels, "max_aten_ops": max_aten_ops,
                      "max_copies": max_copies})
    with _profiled(_device(device)) as result:
        yield
    broken = _judge(result["analysis"], limits, forbid)
    if broken:
        raise AssertionError(_message(result["analysis"], broken, forbid))


def _forbidden(forbid: str | Iterable[str]) -> tuple[str, ...]:
    """The ids to forbid; one string is one id (`forbid="hidden-copy"`), not its letters."""
    from attnprof.findings import RULES

    forbid = (forbid,) if isinstance(forbid, str) else tuple(forbid)
    unknown = [f for f in forbid if f not in RULES and f not in KINDS]
    if unknown:
        raise UserError(f"forbid: unknown {', '.join(map(repr, unknown))}; finding ids: {', '.join(RULES)}; "
                        f"activity kinds: {', '.join(KINDS)}")
    return forbid


def _limits(limits: dict) -> dict:
    """The limits given, each a whole number >= 0 (not NaN, which no count would ever break)."""
    given = {k: v for k, v in limits.items() if v is not None}
    for key, value in given.items():
        number = isinstance(value, (int, float)) and not isinstance(value, bool)
        if not number or not math.isfinite(value) or value < 0 or value != int(value):
            raise UserError(f"{key} must be a whole number >= 0, got {value!r}")
    return {k: int(v) for k, v in given.items()}


def _device(device: str | None) -> bool:
    """Whether the block is profiled with CUDA; device None or "auto": whether torch sees a GPU."""
    import torch

    if device not in (None, "auto", "cpu", "cuda"):
        raise UserError(f"device must be 'cpu', 'cuda' or None, got {device!r}")
    if device == "cuda" and not torch.cuda.is_available():
        raise UserError("attnprof.expect(device='cuda'): no CUDA GPU is visible to torch here")
    return torch.cuda.is_available() if device in (None, "auto") else device == "cuda"


@contextmanager
def _profiled(cuda: bool) -> Iterator[dict]:
    import torch
    from torch.profiler import record_function

    from attnprof.harness.profiling import export_trace, profiler
    from attnprof.trace.reader import load

    if torch._C._autograd._profiler_enabled():  # a second profiler would crash the process
        raise RuntimeError("attnprof.expect: a profiler is already running (an enclosing attnprof.expect or "
                           "kernel_budget, or torch.profiler): budgets cannot nest; check the blocks one after "
                           "the other")
    result: dict = {}
    with tempfile.TemporaryDirectory() as tmp:
        # with_stack: frames name the function in a failure (nothing is added to what the block runs:
        # a TorchFunctionMode of source marks would make torch.compile trace the block again)
        with profiler(cuda, with_stack=True) as prof, record_function(REGION):
            yield result
        path = Path(tmp) / "expect.json.gz"
        export_trace(prof, path)
        result["analysis"] = analyze_trace(load(path), REGION)


def _judge(a: Analysis, limits: dict, forbid: tuple[str, ...]) -> list[str]:
    from attnprof.findings import run_findings

    facts, broken = per_forward(a), []
    gpu_only = any(k in limits for k in GPU_LIMITS) or set(forbid) & set(KINDS)
    if gpu_only and not a.has_gpu:
        warnings.warn("attnprof.expect: no GPU work in this block; GPU limits are not checked", stacklevel=4)
    for key, limit in limits.items():
        value = facts.get(key.removeprefix("max_"))
        if value is not None and value > limit:
            broken.append(f"{key.removeprefix('max_').replace('_', ' ')}: {value} > {limit}")
    for kind in (f for f in forbid if f in KINDS and a.has_gpu):
        if facts[kind]:
            broken.append(f"forbidden {kind}: {facts[kind]} per forward")
    found = {f["id"]: f for f in run_findings(a)}
    broken += [f"forbidden finding {fid}: {found[fid]['message']}" for fid in forbid if fid in found]
    return broken


def _at_the_call(found: dict) -> dict:
    """A finding placed on a `def` line (a profiler frame names only its function) moved to the one
    line of that function that calls the op the finding names (`aten::masked_fill`: the masked_fill)."""
    ops = {m.rstrip("_") for m in re.findall(r"aten::(\w+)", found["message"])}
    try:
        tree = ast.parse("".join(linecache.getlines(found["file"])))
    except SyntaxError:
        return found
    fn = next((n for n in ast.walk(tree) if isinstance(n, (ast.FunctionDef, ast.AsyncFunctionDef))
               and n.lineno == found["line"]), None)
    calls = {n.lineno for n in ast.walk(fn) if isinstance(n, ast.Call) and _called(n.func) in ops} if fn else set()
    if len(calls) != 1:
        return found
    (line,) = calls
    return found | {"line": line, "code": linecache.getline(found["file"], line).strip()}


def _called(func: ast.expr) -> str | None:
    name = func.attr if isinstance(func, ast.Attribute) else func.id if isinstance(func, ast.Name) else None
    return name.rstrip("_") if name else None


def _message(a: Analysis, broken: list[str], forbid: tuple[str, ...]) -> str:
    from attnprof.fix.lint import by_line, frame_spans, located_findings

    lines = ["attnprof.expect: the block broke its budget", *(f"  {b}" for b in broken)]
    if a.has_gpu:
        lines.append("GPU activities (per forward):")
        lines += [f"  {r['per_forward']:g} × {r['kind']} {r['name']}" for r in kernel_table(a)[:LISTED]]
    else:
        ops = Counter(op.name for f in a.forwards for op in f.cpu_ops if op.name.startswith("aten::"))
        lines.append("aten ops (per forward):")
        lines += [f"  {n} × {name}" for name, n in ops.most_common(LISTED)]
    found = located_findings(a, "<block>", by_line(a, frame_spans(a)))
    found = [_at_the_call(f) for f in found if f["line"] and (f["id"] in forbid or not forbid)]
    lines += ["findings (at the line of the op, or the function that ran it):"] * bool(found)
    lines += [f"  {f['id']} in {f['file']}:{f['line']}  {f['code']}" for f in found]
    return "\n".join(lines)
