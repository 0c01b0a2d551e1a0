"""Every plot attnprof draws, as SVG text to inline in the HTML report (matplotlib, Agg canvas,
no pyplot: no global state, no window). Also the data behind them: per variant, the exponent k of
time ~ S^k and memory ~ S^k fitted by least squares in log-log space. Attention does S^2 work, so
time grows ~S^2 for every variant once the GPU is full; memory tells them apart: naive and SDPA
math store the S x S scores (~S^2), fused kernels only q, k, v and the output (~S)."""

from __future__ import annotations

import hashlib
import io
import math
import re
import statistics
from collections import defaultdict
from typing import TYPE_CHECKING

from attnprof.units import spread

if TYPE_CHECKING:  # matplotlib is imported where a plot is drawn: 0.5 s that `analyze` never needs
    from matplotlib.figure import Figure

Series = dict[str, list[dict]]  # variant -> its ok lines, by sequence length


def group_label(point: dict) -> str:
    """The problem apart from its sequence length: what one set of curves shares (a mode, GQA or a mask
    other than a causal forward's adds itself)."""
    mask, mode = point.get("mask", "causal"), point.get("mode", "fwd")
    extra = [f"Hkv={point['kv_heads']}" if point.get("kv_heads") not in (None, point["heads"]) else "",
             "" if mask == "causal" else mask, "dense" if point.get("dense_mask") else "",
             "" if mode == "fwd" else mode]
    base = f"B={point['batch']} H={point['heads']} D={point['head_dim']} {point['dtype']}"
    return " ".join([base, *filter(None, extra)])


def by_group(lines: list[dict]) -> dict[str, Series]:
    """Ok lines grouped by problem (without S), then by variant, sorted by S."""
    groups: dict[str, Series] = defaultdict(lambda: defaultdict(list))
    for line in lines:
        if line.get("status") == "ok" and line.get("device_us"):
            groups[group_label(line["point"])][line["variant"]].append(line)
    return {g: {v: sorted(ls, key=lambda x: x["point"]["seq"]) for v, ls in sorted(s.items())}
            for g, s in sorted(groups.items())}


MIN_FIT_POINTS = 3  # two points always fit a line exactly: a slope from them says nothing about its quality
GOOD_FIT_R2 = 0.9  # below this in log-log, time is not one power of S over the range


def fit(xs: list[float], ys: list[float | None], unstable: int = 0) -> dict | None:
    """Least-squares slope k of log(y) against log(x), with R² and whether it means anything: at least
    MIN_FIT_POINTS distinct x, R² >= GOOD_FIT_R2, and no point marked unstable (`unstable` counts them).
    None without two distinct x with positive y."""
    pairs = [(math.log(x), math.log(y)) for x, y in zip(xs, ys, strict=True) if x and y and x > 0 and y > 0]
    if len({x for x, _ in pairs}) < 2:
        return None
    lx, ly = [x for x, _ in pairs], [y for _, y in pairs]
    slope, intercept = statistics.linear_regression(lx, ly)
    mean = statistics.fmean(ly)
    total = sum((y - mean) ** 2 for y in ly)
    r2 = 1.0 - sum((y - (slope * x + intercept)) ** 2 for x, y in pairs) / total if total else 1.0
    points = len(set(lx))
    why = (f"{points} points: a fit needs at least {MIN_FIT_POINTS}" if points < MIN_FIT_POINTS else
           f"R² {r2:.2f}: not one power of S over this range" if r2 < GOOD_FIT_R2 else
           f"{unstable} point(s) measured unstable" if unstable else None)
    return {"k": round(slope, 2), "r2": round(r2, 3), "points": points, "meaningful": why is None, "why": why}


def _seq(lines: list[dict]) -> list[int]:
    return [x["point"]["seq"] for x in lines]


def _device_us(lines: list[dict]) -> list[float]:
    return [x["device_us"]["median"] for x in lines]


def _memory(lines: list[dict]) -> list[float | None]:
    return [x.get("peak_memory_bytes") for x in lines]


def _memory_mib(lines: list[dict]) -> list[float | None]:
    return [m / 2**20 if m else None for m in _memory(lines)]


def _unstable(lines: list[dict]) -> int:
    return sum(1 for x in lines if (x.get("device_us") or {}).get("unstable"))


def scaling(lines: list[dict]) -> dict[str, dict[str, dict]]:
    """{group: {variant: {"time": fit, "memory": fit}}}, each `fit` (k, R², points, meaningful, why) or None."""
    return {g: {v: {"time": fit(_seq(ls), _device_us(ls), _unstable(ls)),
                    "memory": fit(_seq(ls), _memory(ls))} for v, ls in series.items()}
            for g, series in by_group(lines).items()}


def time_words(records: list[dict]) -> tuple[str, str]:
    """(title, axis label) of the time a record holds: a GPU's device time, or on the CPU wall time."""
    on_cpu = any((r.get("device_us") or {}).get("method") == "cpu-wall" for r in records)
    return ("Time per call (CPU, wall clock)", "time per call (µs)") if on_cpu else (
        "Device time per forward", "device time (µs)")


def sweep_plots(lines: list[dict], matmul_tflops: dict[str, float]) -> list[dict]:
    """Per problem group: device time (wall time on the CPU), TFLOP/s (against the measured matmul
    ceiling of that dtype) and, where measured (CUDA), peak memory against S. Returns [{"title", "svg", "note"}]."""
    out = []
    title, axis = time_words(lines)
    for group, series in by_group(lines).items():
        dtype = next(iter(series.values()))[0]["point"]["dtype"]
        out.append(_vs_seq(f"{title}, {group}", axis, series, _device_us, "time"))
        decode = next(iter(series.values()))[0]["point"].get("mode") == "decode"
        # a decode call reads the cache: judged by its bandwidth; a forward or a step by its FLOP/s
        out.append(_bandwidth_plot(group, series) if decode else _tflops_plot(group, series, matmul_tflops.get(dtype)))
        if any(m for ls in series.values() for m in _memory(ls)):
            out.append(_vs_seq(f"Peak extra memory, {group}", "peak memory (MiB)", series, _memory_mib,
                               "memory"))
    return out


def _vs_seq(title: str, ylabel: str, series: Series, values, fitted: str) -> dict:
    fig, ax = figure()
    for variant, ls in series.items():
        ys = values(ls)
        f = fit(_seq(ls), ys, _unstable(ls) if fitted == "time" else 0)
        ax.plot(_seq(ls), [y or math.nan for y in ys], marker="o",
                label=f"{variant} (~S^{f['k']:g})" if f and f["meaningful"] else variant)
    ax.set_xscale("log", base=2)
    ax.set_yscale("log")
    return finish(fig, ax, title, ylabel, note=f"legend: {fitted} ~ S^k, k fitted in log-log where it means "
                   "something (3+ points, R² >= 0.9, no unstable point)")


def _tflops_plot(group: str, series: Series, ceiling: float | None) -> dict:
    fig, ax = figure()
    for variant, ls in series.items():
        ax.plot(_seq(ls), [(x.get("roofline") or {}).get("tflops") or math.nan for x in ls], marker="o",
                label=variant)
    if ceiling:
        ax.axhline(ceiling, color="black", linestyle="--", label=f"measured matmul {ceiling:.4g} TFLOP/s")
    ax.set_xscale("log", base=2)
    return finish(fig, ax, f"Achieved TFLOP/s (useful causal FLOPs), {group}", "TFLOP/s")


def _bandwidth_plot(group: str, series: Series) -> dict:
    fig, ax = figure()
    for variant, ls in series.items():
        ax.plot(_seq(ls), [(x.get("roofline") or {}).get("tbps") or math.nan for x in ls], marker="o", label=variant)
    ax.set_xscale("log", base=2)
    return finish(fig, ax, f"Achieved TB/s (the least bytes: the KV cache read once), {group}", "TB/s")


def run_plot(records: list[dict]) -> list[dict]:
    """One run: device time per variant as bars on a linear axis (a bar's length is its time, which a log
    axis's is not), the median with its p25–p75 spread as an error bar, each labelled with its median, its
    spread and its share of the matmul ceiling."""
    ok = [r for r in records if r.get("status") == "ok" and r.get("device_us")]
    if not ok:
        return []
    fig, ax = figure(height=0.45 * len(ok) + 1.2)
    d = [r["device_us"] for r in ok]
    times = [t["median"] for t in d]
    below = [max(t["median"] - (t.get("p25") if t.get("p25") is not None else t["median"]), 0.0) for t in d]
    above = [max((t.get("p75") if t.get("p75") is not None else t["median"]) - t["median"], 0.0) for t in d]
    bars = ax.barh([r["name"] for r in ok], times, xerr=[below, above], capsize=3, ecolor="0.25")
    pct = [(r.get("roofline") or {}).get("pct_of_matmul") for r in ok]
    ax.bar_label(bars, labels=[f" {spread(t)}" + ("" if p is None else f", {p:g}% of matmul")
                               for t, p in zip(d, pct, strict=True)], padding=4)
    ax.set_xlim(left=0)
    ax.invert_yaxis()
    ax.margins(x=0.6)
    title, axis = time_words(ok)
    return [finish(fig, ax, f"{title}: median and p25–p75", None, xlabel=axis)]


def figure(height: float = 4.0) -> tuple[Figure, object]:
    from matplotlib.backends.backend_agg import FigureCanvasAgg
    from matplotlib.figure import Figure

    fig = Figure(figsize=(7.5, height))
    FigureCanvasAgg(fig)
    return fig, fig.add_subplot()


def finish(fig: Figure, ax, title: str, ylabel: str | None, xlabel: str = "sequence length S",
            note: str | None = None) -> dict:
    from matplotlib import rc_context

    ax.set_title(title, fontsize=10)
    ax.set_xlabel(xlabel)
    if ylabel:
        ax.set_ylabel(ylabel)
    ax.grid(True, which="both", alpha=0.3)
    if ax.get_legend_handles_labels()[0]:
        ax.legend(fontsize=8, loc="center left", bbox_to_anchor=(1.01, 0.5))
    buf = io.StringIO()
    with rc_context({"svg.fonttype": "none"}):  # text stays text: small, searchable, selectable
        fig.savefig(buf, format="svg", bbox_inches="tight", metadata={"Date": None})
    svg = buf.getvalue()
    prefix = "p" + hashlib.sha1(title.encode()).hexdigest()[:8] + "-"
    return {"title": title, "svg": _prefix_ids(svg[svg.index("<svg"):], prefix), "note": note}


def _prefix_ids(svg: str, prefix: str) -> str:
    """Every inlined SVG numbers its elements from 1 (figure_1, clip paths, markers): prefix the
    ids and the references to them so several plots on one page never collide."""
    return re.sub(r'(\bid="|url\(#|href="#)', lambda m: m.group(1) + prefix, svg)
