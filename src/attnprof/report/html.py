"""One self-contained report.html per run, sweep or trace: the at-a-glance table, findings,
plots (inline SVG), kernel tables and links to the Perfetto traces, for reading offline.

The template autoescapes everything, so kernel names (`flash_fwd_kernel<...>`) and any other
text taken from a trace stay text; only the SVG drawn by report.plots goes in raw. A
Content-Security-Policy forbids scripts and every fetch as a second guard."""

from __future__ import annotations

import os
import time
from pathlib import Path, PurePath

from markupsafe import Markup

from attnprof.contracts import RESULTS, SWEEP_LINES, SWEEP_SPEC, SweepSpec, read_json, read_lines
from attnprof.files import write_atomic
from attnprof.report import page, plots, streams
from attnprof.report.glance import cost_text, coverage_lines, in_shares, memory_line, not_listed, revealed, target_line
from attnprof.report.terminal import point_label
from attnprof.units import bandwidth, count, error, exponent, flops, mib, sig, spread, us

REPORT = "report.html"
GLANCE = ("variant", "status", "GPU ops/fwd", "device time", "latency/call", "host/call", "CPU-bound",
          "FLOP/s (% matmul)", "bytes/s (% copy)", "bound", "peak mem", "first call (excluded)",
          "pin overhead", "max err", "what the trace revealed")
CPU_HEADERS = {"GPU ops/fwd": "aten ops/fwd", "device time": "time/call"}
CPU_DROPPED = {"latency/call", "host/call", "CPU-bound", "pin overhead", "peak mem"}
GPU_NOTES = [
    "device time: median (p25-p75) of the GPU's busy time per call, by CUDA-graph replay or back-to-back "
    "calls (a host-bound forward timed back to back shows its GPU busy time and idle share beside it); "
    "latency/call: one call between its own events after a sync, so it includes the host issuing it; "
    "host/call: CPU time to issue one call, measured outside the profiler.",
    "CPU-bound: host time per call exceeds the GPU's time, so latency measures the host, not the kernels.",
    "pin overhead: host time of a pinned SDPA variant minus sdpa-auto's where auto ran the same backend: "
    "the cost of `with sdpa_kernel(...)` per call.",
]
CPU_NOTES = [
    "time/call: wall-clock time per call on the CPU, median (p25-p75) of timed blocks of calls, with torch's "
    "intra-op threads fixed for the run (the count is in results.json). Costs from the trace are shares of "
    "the profiled call where the profiler slowed the host.",
]
NOTES = [
    "A measurement marked unstable failed a noise check (drift, two clusters, outliers, a wide spread): its "
    "median is not one number to trust.",
    "The first call (where torch.compile compiles) and the warm-up calls are excluded from every timing.",
    "FLOPs: 4·B·Hq·D per (query, key) pair the mask keeps (a square causal mask: half of S², a window: its "
    "band), ×3.5 for a training step (the backward counts 2.5× the forward); bytes: q, k and v (K/V at their "
    "own head count, so a decode call reads the whole cache), a dense mask, the output, and for a step the "
    "backward's reads and writes. A decode call is judged against the copy ceiling, a prefill against matmul.",
]


def write_report(folder: str | Path) -> Path:
    """Write report.html into a run folder (results.json) or a sweep folder (sweep.json)."""
    folder = Path(folder)
    if (folder / SWEEP_SPEC).is_file():
        html = sweep_page(folder)
    elif (folder / RESULTS).is_file():
        html = run_page(read_json(folder / RESULTS), folder)
    else:
        raise FileNotFoundError(f"{folder}: not a run folder (results.json) or a sweep folder (sweep.json)")
    write_atomic(folder / REPORT, html)
    return folder / REPORT


def write_analysis_report(analysis: dict, trace: str | Path, out: str | Path) -> Path:
    """The same page for one analyzed trace, linking the trace relative to where the page lands."""
    out = Path(out)
    href = os.path.relpath(Path(trace).resolve(), out.resolve().parent)
    write_atomic(out, analysis_page(analysis, href, trace))
    return out


def run_page(results: dict, folder: Path | None = None) -> str:
    records, cpu = results["variants"], results["device"]["type"] == "cpu"
    mine = [r for r in records if r.get("family") == "target"]  # the user's module: its own problem, its own table
    glance = _glance([r for r in records if r not in mine], cpu, with_point=False, unit=results["problem"].get("unit"))
    if mine:
        own = _glance(mine, cpu, with_point=False, unit=results["problem"].get("unit"))
        glance["tables"].append({**own["tables"][0], "id": "target"})
        glance["notes"] = [*glance["notes"], *map(target_line, mine)]
    traces = [(r["name"], t) for r in records if (t := _inside(folder, r.get("trace")))]
    timelines = [] if cpu else [_timelines(traces, (results.get("config") or {}).get("region"))]  # GPU work only
    sections = [glance, _notes(results.get("ceilings"), cpu), page.plots_section(plots.run_plot(records)), *timelines,
                *_details(records)]
    return page.render("attnprof run: " + point_label(results["problem"]), [page.device(results["device"])], sections)


def sweep_page(sweep_dir: Path) -> str:
    meta = read_json(sweep_dir / SWEEP_SPEC)
    spec = SweepSpec.from_dict(meta["spec"])
    order = {(p.tag, v): i for i, (p, v) in enumerate((p, v) for p in spec.points() for v in spec.options.variants)}
    lines = sorted(read_lines(sweep_dir / SWEEP_LINES), key=lambda x: order.get((x["key"], x["variant"]), -1))
    runs = {d: read_json(sweep_dir / d / RESULTS) for d in {x["run_dir"] for x in lines} if d}
    records = [_merged(x, runs.get(x["run_dir"])) for x in lines]
    ceilings = {r["problem"]["dtype"]: r["ceilings"] for r in runs.values()
                if (r.get("ceilings") or {}).get("matmul_tflops")}
    matmul = {dtype: c["matmul_tflops"] for dtype, c in ceilings.items()}
    # the plots and fits first: the per-point table is long
    sections = [_notes(next(iter(ceilings.values()), None), spec.options.device == "cpu"),
                page.plots_section(plots.sweep_plots(lines, matmul)),
                _scaling(plots.scaling(lines)), _glance(records, spec.options.device == "cpu", with_point=True),
                *_details(records)]
    axes = ", ".join(f"{k}={','.join(map(str, spec.grid[k]))}"
                     for k in ("batch", "heads", "seq", "head_dim", "dtype"))
    subtitle = [page.device(meta["device"]), f"{len(lines)} of {len(order)} (point, variant) results; {axes}"]
    return page.render(f"attnprof sweep: {', '.join(spec.options.variants)}", subtitle, sections)


def analysis_page(a: dict, trace_href: str, trace: str | Path | None = None) -> str:
    pf = a["per_forward"]
    record = {"name": Path(a["source"]).name, "status": "ok", "kernels": a["kernels"],
              **({"kernels_not_listed": a["kernels_not_listed"]} if "kernels_not_listed" in a else {}),
              "findings": a["findings"], "trace": trace_href}
    per = "step" if a.get("unit") == "step" else "fwd"
    if pf.get("gpu_ops") is None:  # a CPU trace: its ops are aten ops and its time the host's, nothing on a GPU
        counts = [("aten ops/" + per, pf.get("aten_ops")), ("host time/" + per, us(pf.get("cpu_time_us")))]
    else:
        counts = [("GPU ops/" + per, pf.get("gpu_ops")), ("GPU time/" + per, us(pf.get("gpu_time_us"))),
                  ("CPU time/" + per, us(pf.get("cpu_time_us")))]
    row = [_variant(record), a["region"], page.num(a["forwards"]), *(page.num(v) for _, v in counts), revealed(record)]
    headers = ("trace", "region", "forwards", *(h for h, _ in counts), "what the trace revealed")
    notes = [line for line, _ in coverage_lines(a)] + list(a.get("warnings") or [])
    glance = {"id": "at-a-glance", "title": "At a glance", "notes": notes,
              "tables": [{"id": "glance", "headers": headers, "rows": [row]}]}
    strips = _timelines([(record["name"], trace)] if trace else [], a["region"])
    delay = streams.delay_line(a)
    per_stream = page.section("streams", "GPU time per stream (whole trace; HTA's kinds and idle causes)",
                              streams.HEADERS, streams.rows(a), "no GPU activities", [delay] if delay else [])
    # the trace's name: its folders on this machine are no reader's business (the links are relative)
    return page.render(f"attnprof analyze: {record['name']}", [record["name"]],
                       [glance, strips, per_stream, *_details([record])])


def _glance(records: list[dict], cpu: bool, with_point: bool, unit: str | None = None) -> dict:
    headers = (("problem",) if with_point else ()) + GLANCE
    if unit == "step":
        headers = tuple(h.replace("/fwd", "/step") for h in headers)
    if cpu:
        headers = tuple(CPU_HEADERS.get(h, h) for h in headers)
    shares = in_shares(records)  # one cost unit in the column
    rows = [([point_label(r["point"])] if with_point else []) + _glance_row(r, cpu, shares) for r in records]
    if cpu:  # the host does the work: latency and host time are time/call again, and no GPU waits on it
        keep = [i for i, h in enumerate(headers) if h not in CPU_DROPPED]
        headers, rows = tuple(headers[i] for i in keep), [[r[i] for i in keep] for r in rows]
    headers, rows = _without_empty_columns(headers, rows)
    notes = [f"On CPU the host does the work: time/call is wall-clock time per {unit or 'forward'}."] if cpu else []
    return {"id": "at-a-glance", "title": "At a glance", "notes": notes,
            "tables": [{"id": "glance", "headers": headers, "rows": rows}]}


def _glance_row(r: dict, cpu: bool, shares: bool) -> list:
    pf, roof = r.get("per_forward") or {}, r.get("roofline") or {}
    err, first, pin = r.get("max_abs_error"), r.get("first_call_s"), r.get("pin_overhead_us")
    compiled = " (compile)" if r.get("first_call_includes_compile") else ""
    return [_variant(r), {"text": r["status"], "class": r["status"]},
            page.num(pf.get("aten_ops" if cpu else "gpu_ops")), page.num(spread(r.get("device_us"))),
            page.num(spread(r.get("latency_us"))), page.num(us(r.get("host_us"))),
            {True: "yes", False: "no"}.get(r.get("cpu_bound"), "-"),
            page.num(_rate(roof.get("tflops"), roof.get("pct_of_matmul"), flops, roof.get("matmul_ceiling_tflops"))),
            page.num(_rate(roof.get("tbps"), roof.get("pct_of_copy"), bandwidth, roof.get("copy_ceiling_tbps"))),
            roof.get("bound") or "-",
            page.num(mib(r.get("peak_memory_bytes"))), page.num(None if first is None else f"{first:g} s{compiled}"),
            page.num(None if pin is None else f"{pin:+.1f} µs"), page.num(None if err is None else error(err)),
            revealed(r, shares)]


def _timelines(traces: list[tuple[str, Path]], region: str | None) -> dict:
    """Per variant, one forward (or step) on the GPU's time axis."""
    from attnprof.report.timeline import from_traces

    items, notes = from_traces(traces, region)
    items = [{**item, "svg": Markup(item["svg"])} for item in items]  # drawn by us, every trace name escaped
    if not items and not notes:
        notes.append("No traces (not profiled).")
    return {"id": "timeline", "title": "On the GPU, one call", "plots": items, "notes": notes}


def _notes(ceiling: dict | None, cpu: bool = False) -> dict:
    notes = (CPU_NOTES if cpu else GPU_NOTES) + NOTES
    if ceiling and ceiling.get("matmul_tflops"):
        notes.append(ceiling_note(ceiling))
    elif ceiling:
        notes.append(f"The ceilings could not be measured: {ceiling.get('error')}")
    return {"id": "reading", "title": "How to read the numbers", "notes": notes}


def ceiling_note(c: dict) -> str:
    """The ceilings the percentages used, with the spread of their measurement and when it was made."""
    spread_ = c.get("spread") or {}
    width = {k: f"; blocks {sig(s['p25'], 4)}–{sig(s['p75'], 4)}, n={s['n']}" for k, s in spread_.items() if s}
    when = time.strftime("%Y-%m-%d %H:%M", time.localtime(c["measured_at"])) if c.get("measured_at") else "?"
    # the cache's name only: a page is shared, the path of a home folder is not the reader's business
    fresh = "measured for this run" if c.get("remeasured") else f"measured {when}, cached in ceilings.json"
    flag = f" Marked unstable: {c['unstable']}." if c.get("unstable") else ""
    kept = (c.get("distribution") or {}).get("matmul") or {}
    best = (f" Each ceiling is the best of the {kept['n']} measurements this machine keeps (matmul "
            f"{flops(kept['p25'])}–{flops(kept['p75'])} between them), so a percentage does not move with the "
            "load of the day." if kept.get("n", 0) > 1 else "")
    return (f"Ceilings measured on this device (not datasheet values), the fastest timed block: matmul "
            f"{flops(c['matmul_tflops'])} ({c['matmul_dtype']}, n={c.get('matmul_n')}{width.get('matmul', '')}), "
            f"copy {bandwidth(c['copy_tbps'])} ({(c.get('copy_bytes') or 0) / 2**20:.0f} MiB read and written"
            f"{width.get('copy', '')}); {fresh}; re-measured when a day old, unstable or asked "
            f"(--remeasure-ceilings).{flag}{best}")


def _scaling(fits: dict) -> dict:
    rows = [[group, variant, page.num(exponent(k["time"])), page.num((k["time"] or {}).get("r2")),
             page.num(exponent(k["memory"])), (k["time"] or {}).get("why") or ""]
            for group, series in fits.items() for variant, k in series.items()]
    notes = ["k in time ~ S^k and memory ~ S^k, by least squares in log-log, with R² of the time fit. A k in "
             "parentheses with a question mark means nothing: fewer than 3 points, R² below 0.9, or a point "
             "measured unstable. Storing the S x S scores (naive, SDPA math) grows memory ~S²; fused kernels ~S."]
    return page.section("scaling", "Scaling with sequence length",
                    ("problem", "variant", "time k", "R²", "memory k", "why not meaningful"), rows, "Nothing ran.",
                    notes)


def _without_empty_columns(headers: tuple, rows: list[list]) -> tuple[tuple, list[list]]:
    """Drop the columns no row has a value in (a CPU run has no latency, host time or peak memory)."""
    def empty(cell) -> bool:
        return (cell.get("text") if isinstance(cell, dict) else cell) in ("-", "", None)

    keep = [i for i in range(len(headers)) if not rows or not all(empty(r[i]) for r in rows)]
    return tuple(headers[i] for i in keep), [[r[i] for i in keep] for r in rows]


def _details(records: list[dict]) -> list[dict]:
    """Findings (each cost as the terminal shows it: a share of the profiled call where the profiler's
    inflation makes its µs untrustworthy), kernel tables and trace links of every record that has them."""
    shares = in_shares(records)  # one cost unit in the table
    findings = [[_where(r), {"text": f["id"], "class": f.get("severity")}, f.get("severity"),
                 cost_text(f, "/step" if r.get("unit") == "step" else "/fwd", shares) or "-",
                 f.get("message"), f.get("fix") or ""] for r in records for f in r.get("findings") or []]
    said = ["Costs are shares of the profiled call: the profiler slowed the host past trust, so the µs in the "
            "messages are profiled time, not what the code costs unprofiled."] if shares else []
    kernels = [_kernel_table(r) for r in records if r.get("kernels")]
    traces = [[_where(r), {"text": PurePath(r["trace"]).name, "href": page.href(r["trace"]), "class": "name"}]
              for r in records if r.get("trace")]
    memory = [[_where(r), line] for r in records if (line := memory_line(r))]
    return [page.section("findings", "Findings", ("variant", "id", "severity", "cost", "message", "fix"), findings,
                     "No findings.", said),
            page.section("memory", "Memory per call", ("variant", "peak, and what holds it"), memory,
                         "No memory pass (not profiled)."),
            {"id": "kernels", "title": "Kernels per variant", "tables": kernels,
             "notes": [] if kernels else ["No GPU activities recorded (a CPU run, or not profiled)."]},
            page.section("traces", "Perfetto traces", ("variant", "trace (open in ui.perfetto.dev)"), traces,
                     "No traces (not profiled).")]


def _kernel_table(r: dict) -> dict:
    rows = [[{"text": k["name"], "class": "name"}, k["kind"], page.num(count(k["per_forward"])),
             page.num(us(k["avg_us"])), page.num(us(k["total_us"]))] for k in r["kernels"]]
    cut = f"; {line}" if (line := not_listed(r)) else ""
    return {"caption": f"{_where(r)}: {len(rows)} distinct GPU activities launched per forward{cut}",
            "collapsed": True, "headers": ("name", "kind", "per fwd", "avg", "total"), "rows": rows}


def _merged(line: dict, run: dict | None) -> dict:
    """A sweep line plus what its point's results.json adds (kernels, findings), keyed as a run record;
    its trace path stays the line's, relative to the sweep folder where the report lands."""
    found = {r["name"]: r for r in (run or {}).get("variants", [])}.get(line["variant"], {})
    return {**found, **line, "name": line["variant"]}


def _where(r: dict) -> str:
    return f"{r['name']} @ {point_label(r['point'])}" if r.get("point") else r["name"]


def _variant(r: dict) -> dict:
    return {"text": r["name"], "class": "variant", "href": page.href(r.get("trace"))}


def _rate(value: float | None, pct: float | None, unit, ceiling: float | None = None) -> str | None:
    """`12.3 TFLOP/s (4% of 795 TFLOP/s)`: the rate in the unit that reads (GFLOP/s on a CPU), its share of
    the ceiling, and the ceiling that share used."""
    if value is None:
        return None
    of = "" if ceiling is None else f" of {unit(ceiling)}"
    return unit(value) + ("" if pct is None else f" ({count(pct)}%{of})")


def _inside(folder: Path | None, name: str | None) -> Path | None:
    """`folder / name` when that stays inside the folder: a results.json is data, and a crafted one must
    not make the report read files elsewhere (an absolute path, `../`)."""
    if folder is None or not name or page.href(name) is None:
        return None
    path = (folder / name).resolve()
    return path if path.is_relative_to(Path(folder).resolve()) else None
