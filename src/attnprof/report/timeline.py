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
    if info.is_attention or "flex_attention" in act.event.name:
        return "fused attention"
    return "GEMM" if info.is_gemm else "softmax/elementwise"


def strip(a: Analysis) -> str | None:
    """The SVG of the middle forward (or step) of the analysis; None without GPU activities."""
    if not a.forwards or not a.has_gpu:
        return None
    fwd = a.forwards[len(a.forwards) // 2]
    rows = {p: phases.in_phase(a, fwd, p) for p in phases.PHASES}
    rows = {p: acts for p, acts in rows.items() if acts}
    if not rows:
        return None
    t0 = min(x.event.ts for x in fwd.activities)
    span = max(x.event.ts + x.event.dur for x in fwd.activities) - t0 or 1.0
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


def from_trace(path: str | Path, region: str | None = None) -> tuple[str | None, str | None]:
    """(SVG, note) for a trace file; (None, why) when it cannot be drawn."""
    try:
        a = analyze_trace(load(path), region)
    except Exception as e:  # noqa: BLE001 - a report without a strip still beats no report
        return None, f"{Path(path).name}: cannot read the trace ({type(e).__name__})"
    svg = strip(a)
    if svg is None:
        return None, f"{Path(path).name}: no GPU activities to draw"
    n = len(a.forwards[len(a.forwards) // 2].activities)
    return svg, f"one {phases.unit(a)} of '{a.region}': {n} GPU activities; hover a bar for its kernel"
