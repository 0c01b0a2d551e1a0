"""Attention inside a whole model's step as a person reads it: the table `analyze` prints, the one line the
profiler handler logs per trace, and the line that says what to change after a window of steps."""

from __future__ import annotations

from rich.console import Console
from rich.table import Table

from attnprof.analysis.noise import said
from attnprof.report.text import TEXT_LIMIT, printable, safe_text
from attnprof.units import us


def render_model_step(d: dict, out: Console) -> None:
    """The per-layer table of an analysis's `model_step`, with the findings at their layers."""
    step = d.get("model_step")
    if not step:
        return
    unit = d.get("unit") or "forward"
    out.print(f"attention in the {unit} ({step['time_basis']}): {_shares(step)}")
    table = Table(title=f"attention per layer, per {unit} ({step['passes']:g} pass(es) each)")
    for col in ("layer", "implementation", "forward", "backward", "share", "findings"):
        table.add_column(col, overflow="fold")
    for row in step["layers"]:
        table.add_row(str(row["layer"]), safe_text(", ".join(row["implementations"])), us(row["forward_us"]),
                      us(row["backward_us"] if unit == "step" else None), _pct(row["share"]),
                      safe_text(", ".join(row["findings"])) or "-")
    out.print(table)
    spread = step["spread"]
    out.print(f"spread over layers: {us(spread['min_us'])} to {us(spread['max_us'])} per {unit}")
    elsewhere = [f["id"] for f in step["findings"] if not f["layers"]]
    if elsewhere:
        out.print(f"findings at no attention call: {safe_text(', '.join(elsewhere))}")


def step_line(d: dict) -> str:
    """One line about a trace: attention's share of the step, the backends that ran, the top finding and its
    cost (plain text, for a log)."""
    step = d.get("model_step")
    where = printable(d.get("source", ""), 200)
    if not step:
        found = "no attention call" if d.get("forwards") else "no such region"
        return f"attnprof: {where}: {found} in region '{printable(d.get('region'), 80)}'"
    top = (d.get("findings") or [None])[0]
    finding = (f"top finding: {top['id']} ({us(top['cost_us'])} per {d.get('unit') or 'forward'})"
               if top and top.get("cost_us") else f"top finding: {top['id']}" if top else "no finding")
    # attention's share leads: it is what the line is for; the trace it was read from comes last
    return (f"attnprof: attention {_shares(step)}; ran {printable(', '.join(step['implementations']))}; "
            f"{finding}; in {where}")


def advice_line(d: dict, attn_implementation: str | None = None) -> str:
    """What to change, from an analysed step: on transformers' eager attention the switch to SDPA, else
    the top finding's fix."""
    step, top = d.get("model_step"), (d.get("findings") or [None])[0]
    if attn_implementation == "eager" and step:
        return ('attnprof: what to change: attn_implementation="sdpa" (from_pretrained(..., '
                'attn_implementation="sdpa") or model.set_attn_implementation("sdpa")): eager attention, op by op, '
                f"is {_pct(step['share']['total'])} of the step")
    if top is not None and top.get("fix"):
        return f"attnprof: what to change: {top['id']}: {printable(top['fix'], TEXT_LIMIT)}"
    return "attnprof: nothing to change in attention: no finding with a fix"


def switch_line(result: dict) -> str:
    """What to change, from a verified switch of attention implementation (api.verify_attention)."""
    change = f"switch to {result['configured']}"
    if not result["outputs"]["match"]:
        return (f"attnprof: {change} was tried, but the outputs are "
                f"{printable(result['outputs']['detail'], TEXT_LIMIT)}: check before switching")
    latency = result["latency_us"]
    verdict = said(latency["change"]) if latency.get("change") else f"{latency.get('change_pct') or 0:+.0f}%, unjudged"
    same = ("outputs as close to an fp32 run as before" if "fp32 run" in result["outputs"]["detail"]
            else "same outputs")
    gain = (f": forward {us(latency['before'])} -> {us(latency['after'])} ({verdict}), {same}"
            if latency.get("before") else f": {same}")
    return f"attnprof: {change}{gain} (measured on one of the profiled batches, {result['device']})"


def _shares(step: dict) -> str:
    share = step["share"]
    parts = f"{_pct(share['total'])} of the step" if step["unit"] == "step" else f"{_pct(share['total'])}"
    if step["unit"] == "step":
        parts += f" (forward {_pct(share['forward'])}, backward {_pct(share['backward'])})"
    return f"{parts}, {us(step['attention_us']['forward'] + step['attention_us']['backward'])} of {us(step['step_us'])}"


def _pct(x: float | None) -> str:
    return "-" if x is None else f"{x:.0%}" if x >= 0.1 else f"{x:.1%}"
