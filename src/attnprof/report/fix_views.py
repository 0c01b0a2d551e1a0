"""Views of the user's code: what `lint` found, what `patch` plans and wrote, what `--verify` proved.

Plain lines (a path:line and the code, then what was found), so they read in any terminal and paste
into an issue; `write` is print by default, with control characters written out (report.text).
"""

from __future__ import annotations

from collections.abc import Callable

from attnprof.files import shown
from attnprof.report.text import printable
from attnprof.units import mib, spread, us


def _print(line: str) -> None:
    """print, with control characters from the user's code, paths and torch's messages written out."""
    print(printable(line))


def render_lint(report: dict, write: Callable[[str], object] = _print) -> None:
    """`file:line  code` then each finding on it, most costly first."""
    pf = report["per_forward"]
    gpu = f"{pf['gpu_ops']} GPU activities, " if pf.get("gpu_ops") is not None else ""
    write(f"{report['target']} on {report['device']}: {gpu}{pf['aten_ops']} aten ops, "
          f"{pf['copies']} copies per forward")
    # the terminal shows what to act on; --json keeps every informational finding too
    notable = [f for f in report["findings"] if f["severity"] == "warn" or f.get("fix")]
    if not notable:
        write("no findings")
    for f in notable:  # in the order lint ranked them
        where = f"{shown(f['file'])}:{f['line']}" if f["line"] else shown(f["file"])
        write(f"{where}  {f['code'] or ''}".rstrip())
        write(f"  {f['id']} [{f['severity']}] {f['message']}")
        if f.get("fix"):
            write(f"  fix: {f['fix']}")
    hidden = len(report["findings"]) - len(notable)
    if hidden:
        write(f"({hidden} informational findings not shown; --json lists them all)")
    _render_copies(report.get("copies") or [], write)


def _render_copies(copies: list[dict], write: Callable[[str], object]) -> None:
    """Every copy the header counts, each with who asked for it."""
    if copies:
        write("copies per forward, each explained:")
    for c in copies:
        where = f"{shown(c['file'])}:{c['line']}" if c.get("line") else "elsewhere"
        write(f"  {c['per_forward']:g} × {c['kind']} at {where}: {c['why']}")


def render_patch_plan(edits: list, write: Callable[[str], object] = _print) -> None:
    """Each out-of-place masked_fill that ran: rewritten, or left alone and why."""
    for e in edits:
        verb = "rewrite" if e.safe else "left alone"
        write(f"{shown(e.file)}:{e.line}  {e.code}\n  {verb}: {e.reason}")
    if not edits:
        write("no out-of-place masked_fill ran in your code: nothing to patch")


def render_unified_diff(text: str) -> None:
    print(text, end="")


def render_written(paths: list, write: Callable[[str], object] = _print) -> None:
    for path in paths:
        write(f"wrote {shown(str(path))} (original kept as {shown(str(path))}.orig)")


COUNTS = {"gpu_ops": "GPU activities", "kernels": "kernels", "memcpy": "memcpy", "memset": "memset",
          "aten_ops": "aten ops", "copies": "copies"}


def render_verify(result: dict, write: Callable[[str], object] = _print) -> None:
    """Before and after a patch: measured device time and latency first, the exact counts once, the one
    verdict on the outputs, what was removed or added, then the profiled times (labelled so)."""
    out, d = result["outputs"], result["diff"]
    _render_device_time(result["latency_us"], write)  # measured outside the profiler: it leads
    keys = ("gpu_ops", "kernels", "memcpy", "memset") if d["a"].get("gpu_ops") is not None else ("aten_ops", "copies")
    write("per forward (exact counts): " + ", ".join(f"{COUNTS[k]} {d['a'][k]} → {d['b'][k]} ({d['delta'][k]:+g})"
                                                     for k in keys))
    write(f"outputs: {out['detail']}")
    for side in ("aten_removed", "aten_added"):
        if result.get(side):
            ops = ", ".join(f"{k} ×{n:g}" for k, n in sorted(result[side].items()))
            write(f"{side.replace('_', ' ')}: {ops}")
    counted = tuple(f"{label} per forward" for label in COUNTS.values())
    for line in d["summary"]:
        if not line.startswith((*counted, "device time per forward")):  # said above, measured
            write(line)
    if any(result.get("peak_memory_bytes") or ()):
        write("peak memory per forward: " + " → ".join(mib(n) for n in result["peak_memory_bytes"]))
    if result.get("sdpa_why"):
        configured = f"{result['configured']}: " if result.get("configured") else ""
        write(f"verdict: {configured}SDPA ran {result['sdpa_why']}")


def _render_device_time(lat: dict, write: Callable[[str], object]) -> None:
    """Device time before → after: "no change" when the difference is inside both spreads, else the %
    change (and how many times less or more), then one forward's latency where it differs."""
    if not lat.get("spread"):
        change = f" ({lat['change_pct']:+.0f}%)" if lat["change_pct"] is not None else ""
        write(f"latency: {us(lat['before'])} → {us(lat['after'])}{change}")
        return
    before, after = lat["spread"]
    verdict = lat.get("change") or {}
    if verdict.get("verdict") == "no change":
        said = "no change (inside both spreads)"
    else:
        ratio = before["median"] / after["median"] if after["median"] and before["median"] else None
        times = "" if ratio is None else f", {ratio:.1f}× less" if ratio >= 1 else f", {1 / ratio:.1f}× more"
        said = f"{lat['change_pct']:+.1f}%{times}"
    unstable = f" (marked unstable: {', '.join(verdict['unstable'])})" if verdict.get("unstable") else ""
    write(f"device time per forward ({lat['method']}, median (p25–p75)): {spread(before)} → "
          f"{spread(after)}: {said}{unstable}")
    if lat.get("one_forward") and lat["method"] != "cpu-wall":
        write("one forward, launch to end (host included): " + " → ".join(map(spread, lat["one_forward"])))


def render_checked(verdict: dict, write: Callable[[str], object] = _print) -> None:
    """The verdict on what was run before anything was shown or written (README, `--to-sdpa`): the float64
    result, the rounding in the model's dtype, the inputs tried, the autograd kept or lost, what changed."""
    if not verdict:
        return
    f64 = verdict["float64"]
    what = "outputs and gradients" if f64["gradients"] else "outputs (no gradient: nothing requires grad)"
    absorbed = f64["absorbed"]
    on_absorbed = (f"; where a finite fill absorbs the scores {absorbed['max_relative_difference']:.2g}, bar "
                   f"{absorbed['rtol']:.2g}" if absorbed["rtol"] > f64["rtol"] else "")
    write(f"checked against the original (same weights, in float64): {what} equal on {len(verdict['inputs'])} "
          f"inputs, {f64['tensors']} tensors (max relative difference {f64['max_relative_difference']:.2g}, "
          f"bar {f64['rtol']:g}{on_absorbed})")
    sixteen = verdict.get("quality")
    if sixteen:
        write(f"  {sixteen['dtype']} error against float64, original → rewrite: outputs "
              f"{sixteen['outputs'][0]:.3g} → {sixteen['outputs'][1]:.3g} (bar 2× + 2 units), gradients "
              f"{sixteen['gradients'][0]:.3g} → {sixteen['gradients'][1]:.3g} (bar 3× + 2 units)")
    write(f"  inputs tried: {'; '.join(verdict['inputs'])}")
    autograd = verdict["autograd"]
    write(f"  autograd kept: {', '.join(autograd['preserved'])}")
    for lost in autograd["lost"]:
        write(f"  autograd lost: {lost} (--strict refuses this rewrite)")
    if autograd["unsupported"]:
        write(f"  not supported by the original either: {', '.join(autograd['unsupported'])}")
    for note in verdict["notes"]:
        write(f"  note: {note}")


def render_sdpa_plan(rewrites: list, write: Callable[[str], object] = _print) -> None:
    """Each attention chain the forward ran: rewritten to SDPA (the call), or left alone and why."""
    for r in rewrites:
        write(f"{shown(r.file)}:{r.line}  {r.code}")
        write(f"  {'rewrite' if r.safe else 'left alone'}: {r.reason}")
        if r.call:
            write(f"  call: {r.call}")
    if not rewrites:
        write("no hand-written attention that attnprof reads ran in your code: nothing to rewrite (it reads a softmax "
              "between two products written with @, matmul, bmm or einsum without `...`; scores made by baddbmm, "
              "or an einsum with `...`, are not read)")
