"""`attnprof lint`: profile the user's forward and name the source line behind each hidden cost.

Why not the profiler's Python stacks alone: with `with_stack=True` the trace's `python_function`
events name a frame by the line of its `def` (`model.py(12): forward` for an op on line 19), so
they cannot tell two lines of one forward apart. Instead a TorchFunctionMode wraps every torch call
made from the user's code in `record_function("attnprof.src:<file>:<line>")`, with the line of the
innermost frame outside torch and the standard library; host ops and GPU launches then belong to the
mark that contains them in time on their thread. Each line's ops go through the findings rules as a
small analysis of their own, so a rule's result lands on the line that caused it.
"""

from __future__ import annotations

import linecache
import re
import sys
import sysconfig
import tempfile
from collections import defaultdict
from functools import lru_cache
from pathlib import Path
from typing import TYPE_CHECKING

from attnprof.analysis.attribution import Analysis, Forward, OpIndex, analyze_trace, per_forward
from attnprof.contracts import LintResult
from attnprof.fix.target import Target
from attnprof.options import REGION
from attnprof.trace.reader import Event

if TYPE_CHECKING:
    from torch.overrides import TorchFunctionMode

MARK = "attnprof.src:"
FRAME = re.compile(r"^(.+)\((\d+)\): ")  # a python_function event: `path/model.py(12): forward`


@lru_cache(maxsize=4096)
def is_user_file(filename: str) -> bool:
    """Code the user can read as theirs: not torch, not attnprof, not the standard library.
    Installed packages (transformers) count: their attention is what the user runs."""
    import torch

    if filename.startswith("<"):
        return False
    paths = sysconfig.get_paths()
    path = Path(filename).resolve()
    if any(path.is_relative_to(Path(p).parent) for p in (torch.__file__, __file__)):
        return False
    if any(path.is_relative_to(paths[k]) for k in ("purelib", "platlib")):
        return True  # checked before the standard library: site-packages may sit inside it
    return not any(path.is_relative_to(paths[k]) for k in ("stdlib", "platstdlib"))


def user_line(depth: int = 2) -> tuple[str, int] | None:
    """(file, line) of the innermost frame in user code, starting `depth` frames up."""
    frame = sys._getframe(depth)
    while frame is not None:
        if is_user_file(frame.f_code.co_filename):
            return frame.f_code.co_filename, frame.f_lineno
        frame = frame.f_back
    return None


def source_marks() -> TorchFunctionMode:
    """A TorchFunctionMode that puts each torch call from user code in a record_function mark."""
    from torch.overrides import TorchFunctionMode
    from torch.profiler import record_function

    class SourceMarks(TorchFunctionMode):
        def __torch_function__(self, func, types, args=(), kwargs=None):
            where = user_line()
            if where is None:
                return func(*args, **(kwargs or {}))
            with record_function(f"{MARK}{where[0]}:{where[1]}"):
                return func(*args, **(kwargs or {}))

    return SourceMarks()


def profile_target(target: Target, device: str, grad: bool = False, marks: bool = True) -> Analysis:
    """Profile the target's forward (the article's harness), with source marks unless told not to
    (they cost host time: a before/after comparison of latency leaves them out)."""
    import contextlib

    import torch

    from attnprof.harness.profiling import profile_call
    from attnprof.trace.reader import load

    def call():
        with source_marks() if marks else contextlib.nullcontext():
            return target()

    with torch.set_grad_enabled(grad), tempfile.TemporaryDirectory() as tmp:
        for _ in range(2):  # warm-up: lazy inits and first-call allocations are not the forward's cost
            call()
        path = Path(tmp) / "lint.json.gz"
        profile_call(call, path, device, REGION, record_shapes=True)  # sizes for the findings' messages
        return analyze_trace(load(path), REGION)


def mark_spans(a: Analysis) -> list[tuple[Event, tuple[str, int]]]:
    """Source marks: (mark, (file, line of the torch call))."""
    return [(e, _mark_key(e.name)) for e in a.trace.events if e.cat == "user_annotation" and e.name.startswith(MARK)]


def frame_spans(a: Analysis) -> list[tuple[Event, tuple[str, int]]]:
    """Python frames of user code from a `with_stack` trace: (frame, (file, line of its def)). Coarser
    than marks, but recorded by the profiler alone: nothing changes what the code runs."""
    spans = []
    for e in a.trace.events:
        match = FRAME.match(e.name) if e.cat == "python_function" else None
        file = _resolve(match[1]) if match else None
        if file and is_user_file(file):
            spans.append((e, (file, int(match[2]))))
    return spans


def _mark_key(name: str) -> tuple[str, int]:
    file, _, line = name.removeprefix(MARK).rpartition(":")
    return file, int(line)


@lru_cache(maxsize=4096)
def _resolve(name: str) -> str | None:
    """The file a frame name means: torch writes paths relative to the sys.path entry holding them."""
    for root in ("", *sys.path):
        path = Path(root or ".") / name
        if path.is_file():
            return str(path.resolve())
    return None


def by_line(a: Analysis, spans: list[tuple[Event, tuple[str, int]]] | None = None) -> dict[tuple, Analysis]:
    """Split each forward's host ops and GPU work by the innermost span (default: source marks) that
    contains them in time on their thread."""
    spans = mark_spans(a) if spans is None else spans
    key_of = {id(e): key for e, key in spans}
    index = OpIndex([e for e, _ in spans])

    def line_of(event) -> tuple[str, int] | None:
        chain = index.chain(event) if event is not None else []
        return key_of[id(chain[-1])] if chain else None

    parts: dict[tuple[str, int], list[Forward]] = defaultdict(list)
    for fwd in a.forwards:
        ops, acts = defaultdict(list), defaultdict(list)
        for op in fwd.cpu_ops:
            ops[line_of(op)].append(op)
        for act in fwd.activities:
            acts[line_of(act.launch)].append(act)
        for key in set(ops) | set(acts):
            if key is not None:
                parts[key].append(Forward(fwd.region, acts[key], ops[key]))
    return {key: _sub_analysis(a, fwds) for key, fwds in parts.items()}


def _sub_analysis(a: Analysis, forwards: list[Forward]) -> Analysis:
    ops = sorted((op for f in forwards for op in f.cpu_ops), key=lambda e: e.ts)
    return Analysis(a.trace, a.region, forwards, a.has_gpu, 0, 0, (), OpIndex(ops))


def lint_target(target: Target, device: str = "cpu", grad: bool = False) -> dict:
    """The `attnprof.lint/1` report: runtime findings on their source lines, then source checks."""
    from attnprof.findings.source import check_files

    a = profile_target(target, device, grad)
    lines = by_line(a)
    ran = defaultdict(set)
    for file, line in lines:
        ran[file].add(line)
    from_source = check_files(ran)
    named = {f["id"] for f in from_source}  # a rule both reads (hand-written attention): the source line wins
    found = [f for f in located_findings(a, str(target.file), lines) if f["line"] or f["id"] not in named]
    found += from_source
    facts = per_forward(a)
    return LintResult(target=target.spec, device=device, per_forward=facts, findings=found,
                      copies=explained_copies(lines, facts["copies"] if not a.has_gpu else None)).to_payload()


def explained_copies(lines: dict[tuple, Analysis], counted: float | None = None) -> list[dict]:
    """Every copy of the forward, by source line and chain, with who asked for it (analysis.copies.WHY):
    the count lint prints is explained in full, not only the copies a finding names. `counted` (the
    aten::copy_ per forward on the CPU) adds a row for copies made outside every marked line."""
    from attnprof.analysis import copies

    out = []
    for (file, line), part in sorted(lines.items()):
        found = [(cp, copies.explained_kind(part, cp)) for cp in copies.copies(part)]
        for row in copies.rows(part, found, lambda top, kind: {"why": copies.WHY[kind].format(top=top.name)}):
            out.append({"file": file, "line": line, "code": linecache.getline(file, line).strip(), **row})
    rest = round((counted or 0) - sum(r["per_forward"] for r in out), 3)
    if counted is not None and rest > 0:
        out.append({"file": None, "line": None, "code": None, "chain": [], "kind": "unplaced",
                    "per_forward": rest, "why": "made by torch outside any line of your code"})
    return out


def located_findings(a: Analysis, fallback_file: str, lines: dict) -> list[dict]:
    """The findings rules' results, each on the source line (of `by_line`) whose ops it was found in;
    a finding no single line explains (its ops spread over several) stays on `fallback_file`, line None.
    Ranked here, where the list is made, as findings.rank ranks every list (the views keep its order)."""
    from attnprof.findings import LOCAL_RULES, rank, run_findings

    found, placed = [], set()
    for (file, line), part in sorted(lines.items()):
        for f in run_findings(part, only=LOCAL_RULES):
            found.append(_located(f, file, line))
            placed.add(f["id"])
    found += [_located(f, fallback_file, None) for f in run_findings(a) if f["id"] not in placed]
    return rank(found)


def _located(f: dict, file: str, line: int | None) -> dict:
    code = linecache.getline(file, line).strip() if line else None
    return {"id": f["id"], "severity": f["severity"], "message": f["message"], "file": file, "line": line,
            "code": code, "fix": f.get("fix"), "cost_us": f.get("cost_us")}
