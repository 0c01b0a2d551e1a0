"""What the Python API returns shows itself as a table in a notebook (Jupyter calls `_repr_html_`).

`Result` is the result dict itself (json.dumps, indexing and equality as before), plus the view: a
run's at-a-glance table, an analysis's facts, kernels and findings, lint's findings by source line.
"""

from __future__ import annotations

from html import escape

from attnprof.gpu.kernel_names import distinct_short_names
from attnprof.report.glance import in_shares, not_listed, revealed
from attnprof.units import spread, us


class Result(dict):
    """A result dict (`attnprof.run/1`, `attnprof.analysis/1`, `attnprof.lint/1`) that renders in a notebook."""

    def _repr_html_(self) -> str:
        schema = str(self.get("schema", ""))
        if schema.startswith("attnprof.run"):
            return _run(self)
        if schema.startswith("attnprof.lint"):
            return _lint(self)
        return _analysis(self)


def _table(headers: tuple, rows: list[list], caption: str = "") -> str:
    head = "".join(f"<th>{escape(str(h))}</th>" for h in headers)
    body = "".join("<tr>" + "".join(f"<td>{escape('-' if c is None else str(c))}</td>" for c in row) + "</tr>"
                   for row in rows)
    cap = f"<caption>{escape(caption)}</caption>" if caption else ""
    return f"<table>{cap}<thead><tr>{head}</tr></thead><tbody>{body}</tbody></table>"


def _run(r: dict) -> str:
    p, dev = r.get("problem") or {}, r.get("device") or {}
    cpu = dev.get("type") == "cpu"
    per = "step" if p.get("unit") == "step" else "fwd"
    headers = ("variant", "status", "time/call" if cpu else "device time", f"ops/{per}", "what the trace revealed")
    rows = [[v["name"], v["status"], spread(v.get("device_us")),
             (v.get("per_forward") or {}).get("aten_ops" if cpu else "gpu_ops"),
             revealed(v, in_shares(r.get("variants", [])))] for v in r.get("variants", [])]
    title = (f"B={p.get('batch')} H={p.get('heads')} S={p.get('seq')} D={p.get('head_dim')} {p.get('dtype')} "
             f"on {dev.get('name')} ({dev.get('type')})")
    return _table(headers, rows, title)


def _analysis(a: dict) -> str:
    facts = _table(("fact", "per forward"), [[k, v] for k, v in (a.get("per_forward") or {}).items()],
                   f"{a.get('source')}: region {a.get('region')!r}, {a.get('forwards')} forwards")
    shown = (a.get("kernels") or [])[:25]
    kernels = _table(("GPU activity", "kind", "per fwd", "avg"), [
        [name, k["kind"], k["per_forward"], us(k["avg_us"])]
        for k, name in zip(shown, distinct_short_names([k["name"] for k in shown]), strict=True)])
    cut = f"<p>{escape(line)}</p>" if (line := not_listed(a)) else ""
    return facts + (kernels + cut if a.get("kernels") else "") + _layers(a) + _findings(a.get("findings") or [])


def _layers(a: dict) -> str:
    """Attention per layer of a whole model's step (analysis.model_step), when the trace has attention."""
    step = a.get("model_step")
    if not step:
        return ""
    rows = [[r["layer"], ", ".join(r["implementations"]), us(r["forward_us"]), us(r["backward_us"]),
             f"{r['share']:.1%}" if r["share"] is not None else None, ", ".join(r["findings"])]
            for r in step["layers"]]
    share = step["share"]["total"]
    caption = f"attention: {share:.1%} of the {step['unit']} ({step['time_basis']})" if share is not None else ""
    return _table(("layer", "implementation", "forward", "backward", "share", "findings"), rows, caption)


def _lint(r: dict) -> str:
    rows = [[f"{f['file']}:{f['line']}" if f.get("line") else f.get("file"), f.get("code"), f["id"],
             f["message"], f.get("fix")] for f in r.get("findings") or []]
    return _table(("where", "code", "finding", "message", "fix"), rows, f"{r.get('target')} on {r.get('device')}")


def _findings(found: list[dict]) -> str:
    rows = [[f["id"], f["severity"], us(f["cost_us"]) if f.get("cost_us") else "-", f["message"], f.get("fix")]
            for f in found]  # an informational finding (cost 0.0) shows no cost
    return _table(("finding", "severity", "cost/fwd", "message", "fix"), rows) if rows else ""
