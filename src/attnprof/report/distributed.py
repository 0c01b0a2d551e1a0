"""Views of several ranks: `attnprof run --nproc N` results (`attnprof.cp-run/1`) and `attnprof analyze`
over several traces (`attnprof.ranks/1`), in the terminal and as one HTML page.

The timeline strip is each rank's typical region instance cut into slices, each slice drawn by what it
was mostly spent on (analysis.comm): compute alone, communication under compute, exposed communication,
idle. Rows share one time scale, so a rank that finishes early shows a shorter bar."""

from __future__ import annotations

import sys
from html import escape
from pathlib import Path

from markupsafe import Markup
from rich.console import Console
from rich.table import Table

from attnprof.files import write_atomic
from attnprof.report import page
from attnprof.report.html import REPORT
from attnprof.report.layout import print_table
from attnprof.report.terminal import STATUS_STYLE, render_findings
from attnprof.report.text import TEXT_LIMIT, safe_text
from attnprof.units import mib, spread, us

STATES = {"C": ("compute", "#4c78a8"), "O": ("communication under compute", "#9ecae9"),
          "X": ("exposed communication", "#e45756"), ".": ("idle", "#eeeeee")}
RANK_COLUMNS = ("rank", "NCCL kernels", "comm", "exposed comm", "overlap", "compute", "attention", "merge",
                "span")
OTHER = "other"  # the "merge" column where no rank shows ring attention: those kernels merge nothing
HOST_COLUMNS = ("rank", "instances", "host time")  # a CPU-only trace: no GPU activity to split
LEGEND = "timeline: C compute, O communication under compute, X exposed communication, . idle"
LISTED_RANKS = 16  # more ranks than this: the terminal shows their spread, not a row each
CASE_COLUMNS = ("variant", "mode", "status", "step (slowest rank)", "1 GPU, full problem", "ideal (1 GPU / N)",
                "speed-up", "efficiency", "exposed comm (worst rank)", "overlap (worst rank)", "skew (end)")


def progress(event: str, record: dict) -> None:
    """Rank 0's progress on stderr, one line per case."""
    if event == "start":
        print(f"attnprof: {record['name']} {record['mode']} on every rank ...", file=sys.stderr)
    elif event == "done":
        step = (record.get("step_us") or {}).get("median")
        print(f"attnprof: {record['name']} {record['mode']}: {record['status']}"
              f"{'' if step is None else ', ' + us(step) + ' per step'}", file=sys.stderr)


def _pct(x: float | None) -> str:
    return "-" if x is None else f"{x:.0%}"


def _on_gpu(ranks: list[dict]) -> bool:
    return any(r.get("gpu") for r in ranks)


def rank_columns(ranks: list[dict]) -> tuple[str, ...]:
    """The GPU ranks' columns; what is neither attention nor NCCL is "merge" only in a ring (analysis.ring)."""
    ring = any(r.get("ring_attention") for r in ranks)
    return tuple(c if c != "merge" or ring else OTHER for c in RANK_COLUMNS)


def _rank_cells(r: dict, gpu: bool = True) -> list[str]:
    if not gpu:
        return [str(r["rank"]), str(r.get("regions", "-")), us(r.get("host_us"))]
    return [str(r["rank"]), str(r.get("nccl_kernels", "-")), us(r.get("comm_us")), us(r.get("exposed_comm_us")),
            _pct(r.get("overlap_fraction")), us(r.get("compute_us")), us(r.get("attention_us")),
            us(r.get("merge_us")), us(r.get("span_us"))]


def _worst(record: dict) -> tuple[float | None, float | None]:
    ranks = [r for r in record.get("ranks") or [] if r.get("comm_us")]
    if not ranks:
        return None, None
    return max(r["exposed_comm_us"] for r in ranks), min(r["overlap_fraction"] for r in ranks)


def _case_cells(r: dict) -> list[str]:
    exposed, overlap = _worst(r)
    speed = r.get("speedup")
    return [r["name"], r["mode"], r["status"], spread(r.get("step_us")), spread(r.get("single_gpu_us")),
            us(r.get("ideal_us")), "-" if speed is None else f"{speed:.2f}x", _pct(r.get("efficiency")),
            us(exposed), _pct(overlap), us((r.get("distributed") or {}).get("skew_end_us"))]


def _ring_ran(results: dict) -> bool:
    """Whether any case ran ring attention (context parallelism), where the K/V rotation means something."""
    return any((r.get("sharding") or "").startswith("ring attention") for r in results["variants"])


def how_split(results: dict) -> str:
    """The rotation where a ring ran; else that no context parallelism ran (a CPU run: gloo, no CP kernels),
    never a rotation that did not happen."""
    if _ring_ran(results):
        return f"{results['config']['options']['rotate']} rotation"
    shown = {r.get("sharding") for r in results["variants"] if r.get("sharding")}
    return next(iter(shown)) if len(shown) == 1 else "no ring attention ran"


def render_cp_run(results: dict, out: Console) -> None:
    p, c = results["problem"], results["config"]
    title = (f"B={p['batch']} H={p['heads']} S={p['seq']} D={p['head_dim']} {p['dtype']} on "
             f"{c['world_size']} ranks ({c['backend']}), {how_split(results)}")
    rows = []
    for r in results["variants"]:
        cells = [safe_text(x) for x in _case_cells(r)]
        cells[2] = f"[{STATUS_STYLE.get(r['status'], 'red')}]{r['status']}[/]"
        rows.append(cells)
    print_table(out, title, CASE_COLUMNS, rows, keys=2)
    for r in results["variants"]:
        if r.get("reason"):
            out.print(f"  {r['name']} {r['mode']}: {safe_text(r['reason'], TEXT_LIMIT)}")
        if r.get("single_gpu_reason"):
            why = safe_text(r["single_gpu_reason"], TEXT_LIMIT)
            out.print(f"  {r['name']} {r['mode']}: no single-GPU time ({why})")
        if r.get("ranks"):
            out.print(f"[bold]{r['name']} {r['mode']}[/]: {r.get('sharding')}")
            _rank_table(r["ranks"], out)
            render_findings(r.get("findings") or [], out)


def render_ranks(result: dict, out: Console) -> None:
    """Every rank's row for a few ranks; for more, a screen about all of them (report.many_ranks)."""
    if len(result["ranks"]) > LISTED_RANKS:
        from attnprof.report.many_ranks import render_summary

        render_summary(result, out)
        render_findings(result.get("findings") or [], out)
        return
    d = result["distributed"]
    out.print(f"[bold]{len(result['ranks'])} rank traces[/] of world size {result['world_size']}, "
              f"region '{safe_text(result['region'])}', {d.get('instances', 0)} instances each (medians below)")
    _rank_table(result["ranks"], out)
    if d.get("slowest_rank") is not None:
        out.print(f"slowest rank {d['slowest_rank']} (most compute), last to finish {d.get('last_to_finish')}; "
                  f"skew start {us(d.get('skew_start_us'))}, end {us(d.get('skew_end_us'))}; "
                  f"compute max/min {d.get('imbalance')}")
    render_findings(result.get("findings") or [], out)


def _rank_table(ranks: list[dict], out: Console) -> None:
    gpu = _on_gpu(ranks)
    table = Table()
    for col in (*rank_columns(ranks), "timeline") if gpu else HOST_COLUMNS:
        table.add_column(col, overflow="fold")
    for r in ranks:
        table.add_row(*_rank_cells(r, gpu), *([(r.get("timeline") or "")[::3]] if gpu else []))
    out.print(table)
    if gpu:
        out.print(LEGEND)


def strip_svg(ranks: list[dict], width: int = 900, row: int = 18) -> str:
    """The ranks' timeline strips on one time scale, as SVG (merged runs of one state per rect)."""
    spans = [r.get("span_us") or 0.0 for r in ranks]
    longest, left = max(spans + [1e-9]), 70
    parts = []
    for i, r in enumerate(ranks):
        strip, y = r.get("timeline") or "", 20 + i * (row + 4)
        parts.append(f'<text x="0" y="{y + row - 5}" font-size="12">rank {r["rank"]}</text>')
        scale = (width - left) * (r.get("span_us") or 0.0) / longest / max(len(strip), 1)
        start = 0
        for j in range(1, len(strip) + 1):
            if j == len(strip) or strip[j] != strip[start]:
                name, color = STATES.get(strip[start], STATES["."])
                parts.append(f'<rect x="{left + start * scale:.1f}" y="{y}" width="{(j - start) * scale:.1f}" '
                             f'height="{row}" fill="{color}"><title>{escape(name)}</title></rect>')
                start = j
    legend = "".join(f'<rect x="{left + k * 210}" y="2" width="12" height="12" fill="{color}"/>'
                     f'<text x="{left + k * 210 + 16}" y="12" font-size="12">{escape(name)}</text>'
                     for k, (name, color) in enumerate(STATES.values()))
    height = 24 + len(ranks) * (row + 4)
    return (f'<svg xmlns="http://www.w3.org/2000/svg" width="{width}" height="{height}" '
            f'viewBox="0 0 {width} {height}" font-family="sans-serif">{legend}{"".join(parts)}</svg>')


def _strip_section(sid: str, title: str, ranks: list[dict]) -> dict:
    longest = max((r.get("span_us") or 0.0 for r in ranks), default=0.0)
    return {"id": sid, "title": title, "notes": [f"Each row is that rank's typical instance (median span); "
                                                  f"the longest is {us(longest)}."],
            "plots": [{"title": title, "svg": Markup(strip_svg(ranks))}]}


def _rank_section(sid: str, title: str, ranks: list[dict]) -> dict:
    gpu = _on_gpu(ranks)
    rows = [[page.num(c) for c in _rank_cells(r, gpu)] for r in ranks]
    columns = rank_columns(ranks)
    return page.section(sid, title, columns if gpu else HOST_COLUMNS, rows, "No rank was analysed.",
                        ["Medians over the region's instances (HTA's overlap is over the whole trace). comm and "
                         "exposed comm are unions of NCCL kernel time (exposed: no other kernel running on that GPU); "
                         f"overlap = 1 - exposed/comm; {columns[7]}: kernels that are neither attention nor NCCL"
                         + (" (the ring's merging of partial results)." if columns[7] == "merge" else ".")])


def _findings(records: list[tuple[str, list[dict]]]) -> dict:
    rows = [[where, {"text": f["id"], "class": f["severity"]}, f["severity"], f["message"], f.get("fix") or ""]
            for where, found in records for f in found]
    return page.section("findings", "Findings", ("case", "id", "severity", "message", "fix"), rows, "No findings.")


def _traces(cases: list[dict]) -> dict:
    rows = [[f"{r['name']} {r['mode']}", str(rank), {"text": name, "href": page.href(name), "class": "name"}]
            for r in cases for rank, name in enumerate(r.get("traces") or [])]
    return page.section("traces", "Rank traces", ("case", "rank", "trace (open in ui.perfetto.dev)"), rows,
                    "No traces (no case ran on every rank).")


def cp_run_page(results: dict) -> str:
    c = results["config"]
    cases = list(results["variants"])
    glance = page.section("at-a-glance", "Speed-up and efficiency", CASE_COLUMNS,
                      [[page.num(x) for x in _case_cells(r)] for r in cases], "Nothing ran.",
                      ["step: per repeat, n steps back to back between CUDA events on every rank after a "
                       "barrier; the repeat counts its slowest rank. ideal: the full problem on one GPU / N. "
                       "efficiency = ideal / step."])
    sections = [glance]
    for i, r in enumerate(cases):
        if r.get("ranks"):
            where = f"{r['name']} {r['mode']}"
            sections.append(_rank_section(f"ranks-{i}", f"Per rank: {where}", r["ranks"]))
            if _on_gpu(r["ranks"]):
                sections.append(_strip_section(f"timeline-{i}", f"Timeline: {where}", r["ranks"]))
    sections.append(_findings([(f"{r['name']} {r['mode']}", r.get("findings") or []) for r in cases]))
    sections.append(_traces(cases))
    balance = f", load balancing {'on' if c['options']['load_balance'] else 'off'}" if _ring_ran(results) else ""
    subtitle = [page.device(results["device"]), f"{c['world_size']} ranks, {c['backend']}, {how_split(results)}"
                f"{balance}; peak memory per rank {', '.join(mib(r.get('peak_memory_bytes')) for r in cases)}"]
    p = results["problem"]
    return page.render(f"attnprof run --nproc {c['world_size']}: B={p['batch']} H={p['heads']} S={p['seq']} "
                   f"D={p['head_dim']}", subtitle, sections)


def _heat_section(ranks: list[dict]) -> dict:
    from attnprof.report.many_ranks import heat_map_svg

    plots = [{"title": title, "svg": Markup(svg)} for title, field in (("GPU time", "busy_us"),
                                                                       ("exposed communication", "exposed_comm_us"))
             for svg in [heat_map_svg(ranks, field)] if svg]
    return {"id": "heat-map", "title": "Ranks by step", "plots": plots,
            "notes": ["Each row a rank, each column a step: white the least of all cells, red the most; a cell's "
                      "value in its tooltip."]}


def ranks_page(result: dict) -> str:
    ranks = result["ranks"]
    sections = [_rank_section("ranks", "Per rank", ranks),
                *([_heat_section(ranks), _strip_section("timeline", "Timeline", ranks)] if _on_gpu(ranks) else []),
                _findings([("all ranks", result.get("findings") or [])])]
    subtitle = [f"{len(result['ranks'])} traces, world size {result['world_size']}, region '{result['region']}'",
                *result.get("warnings", [])]
    return page.render("attnprof analyze: ranks", subtitle, sections)


def write_cp_report(results: dict) -> Path:
    path = Path(results["run_dir"]) / REPORT
    write_atomic(path, cp_run_page(results))
    return path


def write_ranks_report(result: dict, out: str | Path) -> Path:
    write_atomic(Path(out), ranks_page(result))
    return Path(out)
