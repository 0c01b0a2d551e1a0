"""One forward or training step drawn as a strip: its GPU activities on the time axis (GPU timestamps, so
the gaps are the GPU idling), coloured by kind, forward and backward on their own rows. The picture the
article took from Perfetto, inline SVG, so the hidden Memcpy or math's twenty kernels are seen before they
are read. Every name taken from the trace is escaped: the SVG goes into the page as markup."""

from __future__ import annotations

from pathlib import Path

from markupsafe import escape

from attnprof.analysis import phases
from attnprof.analysis.attribution import Activity, Analysis, analyze_trace
from attnprof.gpu import kernel_names as kn
from attnprof.trace.reader import load
from attnprof.units import us

COLOURS = {"copy/memset": "#d62728", "GEMM": "#1f77b4", "fused attention": "#2ca02c",
           "softmax/elementwise": "#ff7f0e"}
WIDTH, LABEL, ROW, GAP = 860, 70, 22, 6  # pixels: drawing width, row label column, row height, between rows


def kind_of(act: Activity) -> str:
    info = kn.decode(act.event.name)
    if act.kind != "kernel" or "copy" in info.short.lower():
        return "copy/memset"
    if kn.is_attention(act.event.name):
        return "fused attention"
    return "GEMM" if info.is_gemm else "softmax/elementwise"


def span_us(a: Analysis) -> float:
    """From the first GPU activity of the middle forward (or step) to the end of its last."""
    fwd = a.forwards[len(a.forwards) // 2] if a.forwards else None
    if fwd is None or not fwd.activities:
        return 0.0
    return max(x.event.ts + x.event.dur for x in fwd.activities) - min(x.event.ts for x in fwd.activities)


def strip(a: Analysis, axis_us: float | None = None) -> str | None:
    """The SVG of the middle forward (or step) of the analysis, on an axis of `axis_us` (default its own span,
    a longer one to draw several variants on one scale); None without GPU activities."""
    if not a.forwards or not a.has_gpu:
        return None
    fwd = a.forwards[len(a.forwards) // 2]
    rows = {p: phases.in_phase(a, fwd, p) for p in phases.PHASES}
    rows = {p: acts for p, acts in rows.items() if acts}
    if not rows:
        return None
    t0 = min(x.event.ts for x in fwd.activities)
    span = max(axis_us or 0.0, span_us(a)) or 1.0
    scale = WIDTH / span
    height = len(rows) * (ROW + GAP) + 34
    parts = [f'<svg xmlns="http://www.w3.org/2000/svg" width="{WIDTH + LABEL + 10}" height="{height}" '
             f'viewBox="0 0 {WIDTH + LABEL + 10} {height}" font-family="sans-serif" font-size="11">']
    for i, (phase, acts) in enumerate(rows.items()):
        y = i * (ROW + GAP)
        parts.append(f'<text x="0" y="{y + 15}">{phase}</text>')
        parts.append(f'<rect x="{LABEL}" y="{y}" width="{WIDTH}" height="{ROW}" fill="#f4f4f4"/>')
        parts += [_bar(x, LABEL + (x.event.ts - t0) * scale, y, scale) for x in acts]
    axis = len(rows) * (ROW + GAP)
    parts.append(f'<text x="{LABEL}" y="{axis + 10}">0</text>')
    parts.append(f'<text x="{LABEL + WIDTH}" y="{axis + 10}" text-anchor="end">{escape(us(span))}</text>')
    x = LABEL
    for kind, colour in COLOURS.items():
        parts.append(f'<rect x="{x}" y="{axis + 18}" width="10" height="10" fill="{colour}"/>')
        parts.append(f'<text x="{x + 14}" y="{axis + 27}">{kind}</text>')
        x += 14 + 7 * len(kind) + 16
    parts.append("</svg>")
    return "".join(parts)


def _bar(act: Activity, x: float, y: int, scale: float) -> str:
    kind = kind_of(act)
    tip = escape(f"{kn.short_name(act.event.name)} ({kind}, {us(act.event.dur)})")
    width = max(act.event.dur * scale, 1.0)  # a 2 µs kernel stays visible on a 2 ms axis
    return (f'<rect x="{x:.2f}" y="{y}" width="{width:.2f}" height="{ROW}" fill="{COLOURS[kind]}">'
            f"<title>{tip}</title></rect>")


def from_traces(traces: list[tuple[str, Path]], region: str | None = None) -> tuple[list[dict], list[str]]:
    """One strip per (name, trace file), all on the time axis of the longest, so that lengths compare:
    ([{title, svg, note}], notes on the traces that cannot be drawn)."""
    found, notes = [], []
    for name, path in traces:
        try:
            found.append((name, analyze_trace(load(path), region)))
        except Exception as e:  # noqa: BLE001 - a report without a strip still beats no report
            notes.append(f"{name}: cannot read {Path(path).name} ({type(e).__name__})")
    axis = max((span_us(a) for _, a in found), default=0.0)
    items = []
    for name, a in found:
        svg = strip(a, axis)
        if svg is None:
            notes.append(f"{name}: no GPU activities to draw")
            continue
        n = len(a.forwards[len(a.forwards) // 2].activities)
        items.append({"title": name, "svg": svg, "note": f"{name}: one {phases.unit(a)} of '{a.region}', "
                      f"{n} GPU activities in {us(span_us(a))} (axis: {us(axis)}); hover a bar for its kernel"})
    return items, notes
