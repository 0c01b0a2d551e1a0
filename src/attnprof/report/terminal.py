"""Terminal output with rich: progress while running, the at-a-glance table, analyses, diffs."""

from __future__ import annotations

import sys

from rich.console import Console
from rich.progress import (
    BarColumn,
    MofNCompleteColumn,
    Progress,
    SpinnerColumn,
    TextColumn,
    TimeElapsedColumn,
)
from rich.table import Table

from attnprof.analysis.noise import said
from attnprof.gpu.kernel_names import distinct_short_names, short_name
from attnprof.report.glance import (
    coverage_lines,
    fastest_cell,
    in_shares,
    memory_line,
    not_listed,
    revealed,
    target_line,
    verdict,
)
from attnprof.report.layout import print_table
from attnprof.report.model_step import render_model_step
from attnprof.report.streams import render_streams
from attnprof.report.text import TEXT_LIMIT, safe_text
from attnprof.units import count, error, exponent, flops, mib, sig, spread, us

# measured: B=1 H=2 S=64 D=32, a hand-written chain, 84 aten ops per forward in fp16 and bf16 against 50 in fp32
# (SDPA's math backend 79 against 61), torch 2.13 on a 2-core x86 CPU without AVX512-FP16
FP16_ON_CPU = ("fp16 on the CPU: torch has no fp16 arithmetic here, so it runs each batched fp16 matmul as one "
               "matmul per matrix and converts around the softmax: aten ops per forward are higher than in fp32 "
               "(a hand-written chain: 84 against 50); --dtype fp32 counts the same on every CPU.")
STATUS_STYLE = {"ok": "green", "unsupported": "yellow", "oom": "red", "error": "red"}


def console(file=None) -> Console:
    """A console that adds nothing to the text it is given: no highlighting, no `:name:` emoji codes.

    In a terminal rich wraps long lines at its width; into a pipe or a file it keeps each line whole
    (soft wrap), so `grep` and `head` see a finding or a long-form row as the one line it is."""
    out = Console(file=file, highlight=False, emoji=False)
    out.soft_wrap = not out.is_terminal
    return out


def stderr_is_live() -> bool:
    """Whether stderr can show a live display: a terminal. Elsewhere (a file, a pipe, CI) rich would leave
    a blank line where the transient bar was, so the bar is off and only the lines printed stay."""
    return console(sys.stderr).is_terminal


class LiveDisplay:
    """A rich progress display on stderr for the length of a `with` block (its subclass makes `_progress`)."""

    _progress: Progress

    def __enter__(self):
        self._progress.__enter__()
        return self

    def __exit__(self, *exc) -> None:
        self._progress.__exit__(*exc)


class RunProgress(LiveDisplay):
    """A listener for runner events that shows a progress bar; silent when quiet."""

    def __init__(self, out: Console, quiet: bool = False, cpu_default: dict | None = None):
        """`cpu_default`: the smaller CPU problem used for want of sizes, said when the run starts (after
        every option was checked, so a bad one is the only line)."""
        self.quiet, self.run_dir, self._cpu_default, self._out = quiet, None, cpu_default, out
        self._progress = Progress(SpinnerColumn(), TextColumn("{task.description}"), TimeElapsedColumn(),
                                  console=console(sys.stderr), transient=True, disable=quiet or not stderr_is_live())
        self._task, self._names = None, []

    def update(self, event: str, record: dict) -> None:
        if event == "run_dir":
            self.run_dir = record["path"]
            note_cpu_default(self._cpu_default, self._out)
            p, d = record["problem"], record["device"]
            self._progress.console.print(
                f"attnprof: {point_label(p)} on {d['type']} ({safe_text(d.get('name'))}), torch {d['torch']}")
            self._task = self._progress.add_task("starting", total=None)
            self._names = record.get("variants") or []
            return
        label = {"start": "measuring", "measured": "measured", "done": "profiled"}.get(event, event)
        where = (f" ({self._names.index(record['name']) + 1} of {len(self._names)})"
                 if record["name"] in self._names else "")
        self._progress.update(self._task, description=f"{label} {safe_text(record['name'])}{where}")


def note_cpu_default(problem: dict | None, out: Console) -> None:
    if problem:
        out.print(f"attnprof: no GPU in use, so a smaller problem than the article's (B=8 H=16 S=1024 D=64): "
                  f"B={problem['batch']} H={problem['heads']} S={problem['seq']} D={problem['head_dim']}, about a "
                  "minute on 2 cores; --batch/--heads/--seq/--head-dim change it")


def render_run(results: dict, out: Console) -> None:
    dev, p = results["device"], results["problem"]
    title = f"{point_label(p)} on {safe_text(dev.get('name'))} ({dev['type']}), torch {safe_text(dev['torch'])}"
    cpu, per = dev["type"] == "cpu", unit_short(p.get("unit"))
    headers = ("variant", "status", f"aten ops/{per}" if cpu else f"GPU ops/{per}",
               "time/call" if cpu else "device time", *(() if cpu else ("latency/call", "host/call", "peak mem")),
               "max err")
    rows = []
    mine = [r for r in results["variants"] if r.get("family") == "target"]  # the user's module: its own problem
    for r in (r for r in results["variants"] if r.get("family") != "target"):
        pf = r.get("per_forward") or {}
        ops = pf.get("aten_ops") if cpu else pf.get("gpu_ops")
        err = r.get("max_abs_error")
        gpu_cols = () if cpu else (spread(r.get("latency_us")), us(r.get("host_us")), mib(r.get("peak_memory_bytes")))
        rows.append((safe_text(r["name"]), f"[{STATUS_STYLE[r['status']]}]{r['status']}[/]",
                     "-" if ops is None else str(ops), spread(r.get("device_us")), *gpu_cols,
                     error(err)))
    if rows or not mine:
        print_table(out, title, headers, rows)
    warn_loaded(results.get("load"))
    line = verdict(results)
    if line:
        out.print(line)
    for r in mine:
        out.print(safe_text(target_line(r), TEXT_LIMIT))
    out.print("[bold]What the traces revealed[/]")
    shares = in_shares(results["variants"])  # one cost unit in the list
    for r in results["variants"]:
        out.print(f"  {safe_text(r['name'])}: {safe_text(revealed(r, shares), TEXT_LIMIT) or 'nothing unusual'}")
    held = [(r["name"], line) for r in results["variants"] if (line := memory_line(r))]
    if held:
        out.print("[bold]Memory per call[/] (one more call under profile_memory, apart from the timing)")
    for name, line in held:
        out.print(f"  {safe_text(name)}: {safe_text(line, TEXT_LIMIT)}")
    if cpu:
        out.print(f"On CPU the host does the work: time/call is wall-clock time per {p.get('unit') or 'forward'}.")
        if p.get("dtype") == "bf16" and dev.get("native_bf16") is False:
            out.print("This CPU has no native bf16 (AVX512-BF16 or AMX): torch runs bf16 matmuls as fp32 with "
                      "conversions around them, so aten ops per forward are higher than on a CPU that has it; "
                      "--dtype fp32 counts the same on every CPU.")
        if p.get("dtype") == "fp16":
            out.print(FP16_ON_CPU)
    if "run_dir" in results:
        out.print(f"Results, Chrome traces (open in ui.perfetto.dev) and tables: {safe_text(results['run_dir'])}")


def warn_loaded(load: dict | None) -> None:
    """One warning on stderr when the machine had more runnable processes than cores while timing."""
    top, cores = (load or {}).get("max_load_average"), (load or {}).get("cores")
    if top is not None and cores and top > cores:
        print(f"attnprof: warning: the machine was loaded while timing (load average {top:.1f} on {cores} cores): "
              "other work shared the CPU, so times read slower and wider (unstable) than on an idle machine",
              file=sys.stderr)


def render_analysis(d: dict, out: Console) -> None:
    pf = d["per_forward"]
    unit = d.get("unit") or "forward"
    out.print(f"[bold]{safe_text(d['source'])}[/]: region '{safe_text(d['region'])}', {d['forwards']} {unit}s")
    facts = ", ".join(f"{k}={v}" for k, v in pf.items() if v is not None)
    out.print(f"per {unit}: {facts}")
    for phase, counts in (d.get("phases") or {}).items():
        out.print(f"  {phase}: " + ", ".join(f"{k}={v}" for k, v in counts.items() if v is not None))
    for line, loud in coverage_lines(d):
        out.print(f"[bold red]{safe_text(line, TEXT_LIMIT)}[/]" if loud else safe_text(line, TEXT_LIMIT))
    calls = [f"{safe_text(c['implementation'])} x{count(c['calls_per_forward'])}, {us(c['time_us_per_forward'])}"
             + ("" if c["share"] is None else f" ({c['share']:.0%})") for c in d.get("attention_calls") or []]
    if calls:
        out.print(f"attention calls per {unit}: " + "; ".join(calls))
    if d["kernels"]:
        table = Table(title=f"GPU activities launched per {unit} (by launch correlation)")
        for col in ("name", "kind", f"per {unit_short(unit)}", "avg", "total"):
            table.add_column(col, overflow="fold")
        shown = d["kernels"][:25]  # short names (distinct): full template names are in --json and the trace
        for k, name in zip(shown, distinct_short_names([k["name"] for k in shown]), strict=True):
            table.add_row(safe_text(name), k["kind"], count(k["per_forward"]), us(k["avg_us"]), us(k["total_us"]))
        out.print(table)
        if cut := not_listed(d, unit):
            out.print(cut)
    render_model_step(d, out)
    render_streams(d, out)
    render_findings(d.get("findings") or [], out)


def render_findings(findings: list[dict], out: Console) -> None:
    for f in findings:
        style = "yellow" if f["severity"] == "warn" else "cyan"
        out.print(f"[{style}]{f['id']}[/] {safe_text(f['message'], TEXT_LIMIT)}")
        if f.get("fix"):
            out.print(f"    fix: {safe_text(f['fix'], TEXT_LIMIT)}")


def render_list(rows: list[dict], device: str, out: Console) -> None:
    table = Table(title=f"variants on {device}")
    for col in ("variant", "family", "layout", "runs here", "description / reason"):
        table.add_column(col, overflow="fold")
    for r in rows:
        table.add_row(safe_text(r["name"]), r["family"], r["layout"], "yes" if r["runs_here"] else "[yellow]no[/]",
                      safe_text(r["reason"] or r["description"], TEXT_LIMIT))
    out.print(table)


def render_diff(d: dict, a: str, b: str, out: Console) -> None:
    pa, pb = d["a"], d["b"]
    out.print(f"[bold]A[/] {safe_text(a)}\n[bold]B[/] {safe_text(b)}")
    if d.get("device_time"):  # measured outside the profiler, with spreads: it leads (diff's first summary line)
        out.print(f"  {safe_text(d['summary'][0])}")
    for key in ("gpu_ops", "kernels", "memcpy", "memset", "aten_ops", "copies", "gpu_time_us", "cpu_time_us"):
        if pa.get(key) is not None or pb.get(key) is not None:
            timed = key.endswith("_time_us")
            label, show = (f"{key.removesuffix('_us')} (profiled)", us) if timed else (key, _count_or_dash)
            change = (d.get("profiled_change") or {}).get(key) if timed else None
            noise = f": {said(change)}, not a speed-up measure" if change else ""
            out.print(f"  {label:22} {show(pa.get(key))} -> {show(pb.get(key))}{noise}")
    for row in d["removed"]:
        out.print(f"  [green]- {_short(row['name'])}[/] ({row['kind']}, {count(row['per_forward'])} per forward)")
    for row in d["added"]:
        out.print(f"  [red]+ {_short(row['name'])}[/] ({row['kind']}, {count(row['per_forward'])} per forward)")
    for fid in d["findings_removed"]:
        out.print(f"  finding gone: [green]{fid}[/]")
    for fid in d["findings_added"]:
        out.print(f"  finding new: [red]{fid}[/]")


def _count_or_dash(x: float | None) -> str:
    return "-" if x is None else count(x)


def _short(kernel: str) -> str:
    return safe_text(short_name(kernel))


def point_label(p: dict) -> str:
    """A problem in one line: `B=4 H=16 S=512 D=64 bf16 causal`, then what departs from a plain forward
    (`train`, `decode q=1`, `Hkv=8`, `dense mask`)."""
    mask = p.get("mask") or ("causal" if p.get("causal") else "")
    text = f"B={p['batch']} H={p['heads']} S={p['seq']} D={p['head_dim']} {p['dtype']} {mask}".rstrip()
    extra = [f"Hkv={p['kv_heads']}" if p.get("kv_heads") not in (None, p["heads"]) else "",
             "dense mask" if p.get("dense_mask") else "",
             {"train": "train", "decode": f"decode q={p.get('q_len')}"}.get(p.get("mode"), "")]
    return " ".join([text, *filter(None, extra)])


def unit_short(unit: str | None) -> str:
    """`step` or `fwd`: the column suffix for what one call is."""
    return "step" if unit == "step" else "fwd"


class SweepProgress(LiveDisplay):
    """A listener for sweep events (and the runner's, per variant) that draws a progress bar of points."""

    def __init__(self, out: Console, quiet: bool = False):
        self.quiet, self.sweep_dir, self._point = quiet, None, ""
        self._progress = Progress(SpinnerColumn(), TextColumn("{task.description}"), BarColumn(),
                                  MofNCompleteColumn(), TimeElapsedColumn(),
                                  console=console(sys.stderr), transient=True, disable=quiet or not stderr_is_live())
        self._task = self._progress.add_task("sweep", total=None)

    def update(self, event: str, record: dict) -> None:
        if event == "sweep":
            self.sweep_dir = record["path"]
            done = record["total"] - record["todo"]
            self._progress.update(self._task, total=record["total"], completed=done)
        elif event == "point":
            self._point = point_label(record)
            self._progress.update(self._task, description=self._point)
        elif event == "start":
            self._progress.update(self._task, description=f"{self._point}: {safe_text(record['name'])}")
        elif event == "point_done":
            self._progress.advance(self._task)


def render_sweep(lines: list[dict], fits: dict, out: Console) -> None:
    """Device time (and share of the matmul ceiling) per point and variant, then the fitted exponents."""
    variants = list(dict.fromkeys(x["variant"] for x in lines))
    on_cpu = any((x.get("device_us") or {}).get("method") == "cpu-wall" for x in lines)
    what = "time per call (CPU, wall clock)" if on_cpu else "device time per forward"
    used = sorted({f"{flops(r['matmul_ceiling_tflops'])} {r.get('matmul_ceiling_dtype') or ''}".rstrip()
                   for x in lines if (r := x.get("roofline") or {}).get("matmul_ceiling_tflops")})
    table = Table(title=f"sweep: {what} (% of the measured matmul ceiling{': ' if used else ''}{', '.join(used)})")
    for col in ("point", *variants, "fastest (beyond both spreads)"):
        table.add_column(safe_text(col), overflow="fold")
    cells: dict[str, dict[str, str]] = {}
    points: dict[str, list[dict]] = {}
    for x in lines:
        cells.setdefault(point_label(x["point"]), {})[x["variant"]] = _sweep_cell(x)
        points.setdefault(point_label(x["point"]), []).append(x)
    for point, row in cells.items():
        table.add_row(point, *(row.get(v, "") for v in variants), safe_text(fastest_cell(points[point])))
    out.print(table)
    for group, series in fits.items():
        ks = ", ".join(f"{v} {exponent(k['time'])}"
                       + ("" if k["memory"] is None else f" (memory {exponent(k['memory'])})")
                       for v, k in series.items() if k["time"] is not None)
        if ks:
            out.print(f"{group}: {'time' if on_cpu else 'device time'} ~ S^k, k fitted: {ks}")
        for v, k in series.items():
            if k["time"] and not k["time"]["meaningful"]:
                out.print(f"  {safe_text(v)}: time k {sig(k['time']['k'])} not meaningful ({k['time']['why']})")


def _sweep_cell(line: dict) -> str:
    if line["status"] != "ok":
        return f"[{STATUS_STYLE[line['status']]}]{line['status']}[/]"
    pct, device = (line.get("roofline") or {}).get("pct_of_matmul"), line.get("device_us") or {}
    flag = ", unstable" if device.get("unstable") else ""
    return us(device.get("median")) + ("" if pct is None else f" ({count(pct)}%)") + flag
