"""Keep it fixed: `with attnprof.expect(max_gpu_ops=6, forbid=["hidden-copy"]): fn()`.

The block runs once under the profiler (warm it up first: a first call's lazy setup is not the
forward's cost) and is judged as one forward. On a GPU the budget is GPU activities; on the CPU it
is aten ops and copies, and GPU-only limits are skipped with a warning, so one test runs in both
places. `forbid` takes finding ids (`hidden-copy`) and GPU activity kinds (`memcpy`, `memset`).
"""

from __future__ import annotations

import tempfile
import warnings
from collections import Counter
from collections.abc import Iterable, Iterator
from contextlib import contextmanager
from pathlib import Path

from attnprof.analysis.attribution import Analysis, analyze_trace, kernel_table, per_forward

REGION = "attnprof.expect"
KINDS = ("memcpy", "memset")  # GPU activity kinds a budget may forbid (kernels are counted, not banned)
GPU_LIMITS = ("max_gpu_ops", "max_kernels")
LISTED = 15  # activities or ops shown in a failure


@contextmanager
def expect(*, max_gpu_ops: int | None = None, max_kernels: int | None = None,
           max_aten_ops: int | None = None, max_copies: int | None = None, forbid: Iterable[str] = (),
           device: str | None = None) -> Iterator[None]:
    """Profile the block; raise AssertionError listing what it ran when it breaks the budget."""
    from attnprof.findings import RULES

    forbid = tuple(forbid)
    unknown = [f for f in forbid if f not in RULES and f not in KINDS]
    if unknown:
        raise ValueError(f"forbid: unknown {', '.join(map(repr, unknown))}; finding ids: {', '.join(RULES)}; "
                         f"activity kinds: {', '.join(KINDS)}")
    limits = {"max_gpu_ops": max_gpu_ops, "max_kernels": max_kernels, "max_aten_ops": max_aten_ops,
              "max_copies": max_copies}
    with _profiled(device) as result:
        yield
    broken = _judge(result["analysis"], {k: v for k, v in limits.items() if v is not None}, forbid)
    if broken:
        raise AssertionError(_message(result["analysis"], broken, forbid))


@contextmanager
def _profiled(device: str | None) -> Iterator[dict]:
    import torch
    from torch.profiler import record_function

    from attnprof.harness.profiling import export_trace, profiler
    from attnprof.trace.reader import load

    cuda = torch.cuda.is_available() if device is None else device == "cuda"
    result: dict = {}
    with tempfile.TemporaryDirectory() as tmp:
        # with_stack: frames name the code in a failure
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
    found = [f for f in found if f["line"] and (f["id"] in forbid or not forbid)]
    lines += ["findings (in the function that ran the ops):"] * bool(found)
    lines += [f"  {f['id']} in {f['file']}:{f['line']}  {f['code']}" for f in found]
    return "\n".join(lines)
