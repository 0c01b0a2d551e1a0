"""From a trace file to the facts other tools read: trace -> Analysis -> findings -> the
`attnprof.analysis/1` dict, built in one place (`analysis_dict`) for analyze, run, lint and diff."""

from __future__ import annotations

from collections.abc import Callable
from functools import partial
from pathlib import Path

from attnprof.analysis.attribution import Analysis, analyze_trace, per_forward, require_region
from attnprof.analysis.coverage import coverage
from attnprof.analysis.kernel_summary import kernel_table, kernels_not_listed
from attnprof.analysis.phases import phase_facts, unit
from attnprof.analysis.timeline import breakdown
from attnprof.contracts import RESULTS, AnalysisResult, read_json
from attnprof.errors import UserError
from attnprof.findings.run_facts import BARE, RunFacts, measured
from attnprof.pipeline.memory import handed_back, lean, trim
from attnprof.trace.reader import load

Progress = Callable[[str, int, int | None], None]  # (stage, bytes done, of how many: None if not known)


def analysis_dict(a: Analysis, facts: RunFacts = BARE) -> dict:
    """The analysis dict; `facts` are what a run knows beyond the trace (a bare trace: BARE)."""
    from attnprof.analysis.attention_calls import summary as attention_summary
    from attnprof.analysis.model_step import summary as model_step
    from attnprof.findings import run_findings

    with lean():  # the sections after the rules make short-lived objects too (a step's attention calls)
        findings = run_findings(a, facts=facts, after_rule=trim)  # (the sections below walk no op trees)
        rest = handed_back(kernels_not_listed(a))
        return AnalysisResult(
            source=a.source,
            region=a.region,
            forwards=len(a.forwards),
            unit=unit(a),  # "step" when the regions hold backward work: then per_forward is per step
            per_forward=handed_back(per_forward(a)),
            phases=handed_back(phase_facts(a)),
            kernels=handed_back(kernel_table(a)),
            kernels_not_listed=rest,
            forward_spread=forward_spread(a),  # the profiled forwards' times: median, quartiles, noise verdict
            # every attention call by implementation, with its time share
            attention_calls=handed_back(attention_summary(a)),
            findings=findings,
            model_step=handed_back(model_step(a, findings)),  # attention per layer and phase, its step share
            unattributed=coverage(a),  # what the regions hold, what they leave out (added up: every activity)
            timeline=handed_back(breakdown(a)),  # per GPU stream: busy by kind, idle by cause; launch delays
            device=(a.trace.device_properties or [None])[0],
            warnings=list(a.warnings),
        ).to_payload()


def forward_spread(a: Analysis) -> dict:
    """{"cpu_time_us": ..., "gpu_time_us": ...}: each a Spread (median, p25, p75, n, unstable) of the profiled
    forwards' times, which per_forward gives the median of; a GPU time only where the trace has a GPU."""
    from attnprof.analysis.noise import Spread

    if not a.forwards:
        return {}
    spreads = {"cpu_time_us": Spread.of([f.region.dur for f in a.forwards]).as_dict()}
    if a.has_gpu:
        spreads["gpu_time_us"] = Spread.of([f.gpu_time_us for f in a.forwards]).as_dict()
    return spreads



def diff(a: Analysis | dict, b: Analysis | dict) -> dict:
    """What changed from `a` to `b` per forward (`attnprof.diff/1`); Analysis objects become their dicts."""
    from attnprof.analysis.diff import diff as diff_dicts

    return diff_dicts(*(analysis_dict(x) if isinstance(x, Analysis) else x for x in (a, b)))


def analyze_path(path: str | Path, region: str | None = None, max_bytes: int | None = None,
                 readers: int | None = None, progress: Progress | None = None) -> dict:
    """Load and analyze one trace file (a big one read by up to `readers` processes: None, one per core);
    raises TraceError for an unusable file, UserError for a region the trace does not have. `progress(stage,
    done, total)`: told how far it is: ("reading", bytes read, of how many: None for a gzip or a pipe) after
    each piece, then ("analysing", 0, None) once."""
    trace = load(path, max_bytes=max_bytes, readers=readers, on_read=progress and partial(progress, "reading"))
    if progress is not None:
        progress("analysing", 0, None)
    with lean():
        a = analyze_trace(trace, region)
    return analysis_dict(require_region(a, region))


def summarize_trace(path: Path, region: str, facts: RunFacts = BARE) -> dict:
    """The per-variant fields a run records from its own trace, its findings given the run's `facts`; with
    the run's timing, also the profiler's inflation, the GPU's busy time and idle share, and the host-bound
    verdict (findings.run_facts.measured)."""
    from attnprof.findings import sdpa_backend

    trace = load(path)
    with lean():
        a = analyze_trace(trace, region)
    d = analysis_dict(a, facts)
    seen = measured(d["per_forward"], facts.timing) if facts.timing is not None else {}
    seen.pop("forward_us", None)
    return {"per_forward": d["per_forward"], "forward_spread": d["forward_spread"], "unit": d["unit"],
            "phases": d["phases"], "kernels": d["kernels"],
            "findings": d["findings"], "backend": sdpa_backend(a), **seen}


def load_side(spec: str, region: str | None = None) -> dict:
    """A trace file, or `results.json:VARIANT` / `RUN_DIR:VARIANT` for one variant of a run."""
    path, _, variant = spec.rpartition(":") if ":" in spec and not Path(spec).exists() else (spec, "", "")
    path = Path(path)
    if path.is_dir():
        path = path / RESULTS
    if not (path.name.endswith(RESULTS) or variant):
        return analyze_path(path, region)
    try:
        results = read_json(path)
    except (OSError, ValueError) as e:
        raise UserError(f"{path}: cannot read run results ({e})") from None
    found = {v.get("name"): v for v in results.get("variants", []) if isinstance(v, dict)}
    if variant not in found:
        raise UserError(f"{path}: no variant {variant!r}; it has {', '.join(found) or 'none'}")
    if found[variant].get("status") != "ok":
        raise UserError(f"{path}: variant {variant!r} did not run ({found[variant].get('reason')})")
    return {"source": f"{path}:{variant}", **found[variant]}
