"""From a trace file to the facts other tools read: the `attnprof.analysis/1` contract."""

from __future__ import annotations

from pathlib import Path

from attnprof.analysis.attribution import Analysis, analyze_trace, kernel_table, per_forward
from attnprof.trace.reader import DEFAULT_MAX_BYTES, load

SCHEMA = "attnprof.analysis/1"


def analysis_dict(a: Analysis) -> dict:
    from attnprof.findings import run_findings

    return {
        "schema": SCHEMA,
        "source": a.source,
        "region": a.region,
        "forwards": len(a.forwards),
        "per_forward": per_forward(a),
        "kernels": kernel_table(a),
        "findings": run_findings(a),
        "unattributed": {"orphans": a.orphans, "outside_regions": a.outside},
        "device": (a.trace.device_properties or [None])[0],
        "warnings": list(a.warnings),
    }


def analyze_path(path: str | Path, region: str | None = None, max_bytes: int = DEFAULT_MAX_BYTES) -> dict:
    """Load and analyze one trace file; raises TraceError for an unusable file."""
    return analysis_dict(analyze_trace(load(path, max_bytes=max_bytes), region))


def summarize_trace(path: Path, region: str) -> dict:
    """The per-variant fields a run records from its own trace."""
    from attnprof.findings import sdpa_backend

    a = analyze_trace(load(path), region)
    d = analysis_dict(a)
    return {"per_forward": d["per_forward"], "kernels": d["kernels"], "findings": d["findings"],
            "backend": sdpa_backend(a)}
