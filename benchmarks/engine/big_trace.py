"""How fast and how lean attnprof is on a big trace, against the stdlib merely parsing it.

    python benchmarks/engine/big_trace.py TRACE [--repeat N] [--region NAME] [--memory [reading]]
    python benchmarks/engine/big_trace.py --make OUT.json [--mb 64 | --events N] [--steps 6] [--unique-names] [--lean]

`--make` writes a SYNTHETIC trace made from a recorded one (default: the H200 training step of
tests/fixtures/h200/train_4_16_1024_64_bf16_naive.json.gz, forward and autograd backward threads):
one profiler step of it is one "layer", laid back to back as often as it takes to reach the size,
in `--steps` ProfilerSteps each wrapped in a `train_step` annotation, with correlation, External and
flow ids made unique. `--unique-names` gives every event a name of its own (the worst case for
interning); `--lean` drops the args keys attnprof never reads (a smaller event, as in the 5M-event
trace of round 1).

Times `json.load` of TRACE (gunzip + parse for a .json.gz), attnprof's whole analysis (load +
attribution + per_forward + kernel_table + every findings rule: what `attnprof analyze --json` computes)
and its reading alone, each run in a fresh interpreter, its imports done first, so no cache of one run
speeds up the next, interleaved so that a noisy machine hurts all alike, and reports the medians and their ratio. Peak
memory is measured in a fresh subprocess (peak RSS, so the interpreter and every buffer count, with the
pages of its forked readers that it does not share: benchmarks/engine/process_memory.py; tracemalloc's peak of the
Python heap is shown too) and set against the size of the raw JSON. The
per-step GPU activity counts are checked against an independent count made here from the plain-json
parse, joining launches by correlation id.

Exits 1 if the ratio is above MAX_RATIO, peak memory above MAX_MEMORY times the raw size, or the counts
disagree.
"""

from __future__ import annotations

import argparse
import gc
import gzip
import json
import os
import re
import resource
import statistics
import subprocess
import sys
import time
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parents[2] / "src"))

from as_installed import compile_attnprof  # noqa: E402 (beside this file)
from process_memory import own_peak, peaks  # noqa: E402 (beside this file)

from attnprof.analysis.attribution import STEP_REGION, analyze_trace  # noqa: E402
from attnprof.pipeline.one_trace import analysis_dict  # noqa: E402
from attnprof.trace.reader import load  # noqa: E402

MAX_RATIO = 0.3  # issue 23: analyze at most 0.3x json.load (goal 0.2x)
MAX_MEMORY = 1.0  # issue 23: peak RSS at most the raw JSON size (goal half)
GPU_CATS = ("kernel", "gpu_memcpy", "gpu_memset")
LAUNCH_CATS = ("cuda_runtime", "cuda_driver")


def json_parse(path: Path):
    opener = gzip.open if path.name.endswith(".gz") else open
    with opener(path, "rt", encoding="utf-8") as f:
        return json.load(f)


def attnprof_analyze(path: Path, region: str | None):
    """Everything `attnprof analyze --json` computes: attribution, per-forward facts, the kernel
    table and every findings rule."""
    a = analyze_trace(load(path), region)
    return a, analysis_dict(a)


def cpu_s() -> float:
    """CPU seconds of this process and of its children that ended (a big trace is read by several)."""
    children = resource.getrusage(resource.RUSAGE_CHILDREN)
    return time.process_time() + children.ru_utime + children.ru_stime


def timed(fn, *args) -> tuple[float, float, object]:
    """(wall s, CPU s of this process and its readers, result): on a shared machine the CPU time says
    what the work costs, the wall time also what the neighbours took."""
    gc.collect()
    t, c = time.perf_counter(), cpu_s()
    out = fn(*args)
    return time.perf_counter() - t, cpu_s() - c, out


def independent_counts(doc, region: str) -> list[int]:
    """GPU activities per region occurrence, by where their launch ran: plain dicts, no attnprof."""
    events = doc["traceEvents"] if isinstance(doc, dict) else doc
    step = re.compile(r"ProfilerStep#\d+")
    regions = sorted(
        (e for e in events if e.get("ph") == "X" and e.get("cat") == "user_annotation"
         and (step.fullmatch(e["name"]) if region == STEP_REGION else e.get("name") == region)),
        key=lambda e: e["ts"])
    launches = {e["args"]["correlation"]: e for e in events
                if e.get("ph") == "X" and e.get("cat") in LAUNCH_CATS and "correlation" in e.get("args", {})}
    counts = [0] * len(regions)
    for e in events:
        if e.get("ph") != "X" or e.get("cat") not in GPU_CATS:
            continue
        launch = launches.get(e.get("args", {}).get("correlation"))
        if launch is None:
            continue
        holders = [i for i, r in enumerate(regions)
                   if r["pid"] == launch["pid"] and r["ts"] <= launch["ts"] <= r["ts"] + r["dur"]]
        if holders:
            counts[holders[-1]] += 1  # the latest-starting region that holds the launch
    return counts


def cold_analysis(path: Path, region: str | None, mode: str = "time") -> tuple[float, float]:
    """(wall s, CPU s) of one analysis (`mode` "read": of reading alone) in a fresh interpreter, its imports
    done before the clock starts: what `attnprof analyze` pays for the trace. Not a repeat in this process,
    whose caches (kernel names decoded, names interned, lazily imported rules) would make every repeat
    after the first cheaper."""
    extra = ["--region", region] if region else []
    cmd = [sys.executable, __file__, str(path), "--child", mode, *extra]
    out = json.loads(subprocess.run(cmd, check=True, capture_output=True, text=True).stdout)
    return out["wall"], out["cpu"]


def peak_memory(path: Path, region: str | None, modes: tuple[str, ...] = ("rss", "read", "base", "tracemalloc"),
                ) -> dict:
    """Peak memory of a fresh interpreter that runs the analysis, of one that only reads the trace, of one
    that only imports (process_memory.peaks: the pages the interpreter and its forked readers hold, each
    counted once; and their RSS summed), and the tracemalloc peak of the analysis."""
    found = {}
    for mode in modes:
        extra = ["--region", region] if region else []
        got = peaks([sys.executable, __file__, str(path), "--child", mode, *extra])
        found[mode], found[f"{mode} summed"] = got["held"], got["rss_summed"]
    return found


def run_child(path: Path, mode: str, region: str | None) -> None:
    if mode in ("time", "readtime"):
        wall, cpu, _ = timed(attnprof_analyze if mode == "time" else lambda p, _: load(p), path, region)
        print(json.dumps({"wall": wall, "cpu": cpu}))
        return
    if mode == "tracemalloc":
        import tracemalloc

        tracemalloc.start()
        attnprof_analyze(path, region)
        peak = tracemalloc.get_traced_memory()[1]
    else:
        if mode == "rss":
            attnprof_analyze(path, region)
        elif mode == "read":
            load(path)
        peak = own_peak()  # the readers' are sampled by the parent (`peak_memory`)
    print(json.dumps({"peak": peak}))


def raw_size(path: Path) -> int:
    if not path.name.endswith(".gz"):
        return path.stat().st_size
    with gzip.open(path, "rb") as f:
        return sum(len(b) for b in iter(lambda: f.read(1 << 20), b""))


def bench(path: Path, repeat: int, region: str | None) -> tuple[dict, dict, dict, object, tuple]:
    """Wall and CPU seconds of json.load, the analysis and reading alone ({"wall": [...], "cpu": [...]}),
    interleaved."""
    (parse_s, ours_s, read_s), doc = ({"wall": [], "cpu": []} for _ in range(3)), None
    for _ in range(repeat):  # interleaved, so that a busy neighbour slows all alike
        doc = None  # nothing big of the other side alive: its GC cost would land on this side
        for side, mode in ((ours_s, "time"), (read_s, "readtime")):
            wall, cpu = cold_analysis(path, region, mode)
            side["wall"].append(wall)
            side["cpu"].append(cpu)
        wall, cpu, doc = timed(json_parse, path)
        parse_s["wall"].append(wall)
        parse_s["cpu"].append(cpu)
    return parse_s, ours_s, read_s, doc, attnprof_analyze(path, region)


TEMPLATE = Path(__file__).resolve().parents[2] / "tests/fixtures/h200/train_4_16_1024_64_bf16_naive.json.gz"
READ_ARGS = ("correlation", "External id", "registers per thread", "shared memory", "blocks per SM", "warps per SM",
             "grid", "block", "est. achieved occupancy %", "bytes", "Input Dims", "Input type", "device", "stream")


def _layer(doc: dict) -> tuple[list[dict], float]:
    """The events of the template's middle profiler step (its annotations left out), and their span."""
    events = doc["traceEvents"]
    steps = sorted((e for e in events if e.get("cat") == "user_annotation" and e["name"].startswith("ProfilerStep#")),
                   key=lambda e: e["ts"])
    step = steps[len(steps) // 2]
    lo, hi = step["ts"], step["ts"] + step["dur"]
    host = [e for e in events if e.get("pid") == step["pid"] and lo <= e.get("ts", -1) <= hi and e is not step
            and not (e.get("cat") == "user_annotation" and e["ts"] + e.get("dur", 0) > hi - 1)]
    host = [e for e in host if e.get("cat") != "user_annotation"]
    corr = {e["args"]["correlation"] for e in host if "correlation" in e.get("args", {})}
    gpu = [e for e in events if e.get("pid") != step["pid"] and (
        e.get("args", {}).get("correlation") in corr or (e.get("cat") == "ac2g" and e.get("id") in corr))]
    layer = host + gpu
    return layer, max(e["ts"] + e.get("dur", 0) for e in layer) - lo + 10.0


def make(out: Path, template: Path, mb: float, events: int | None, steps: int, unique: bool, lean: bool) -> None:
    doc = json_parse(template)
    layer, span = _layer(doc)
    t0 = min(e["ts"] for e in layer)
    pid, tid = next((e["pid"], e["tid"]) for e in layer if e.get("cat") == "cpu_op")
    bump = 1 + max(max(e.get("args", {}).get("correlation", 0), e.get("args", {}).get("External id", 0),
                       e.get("id", 0) if isinstance(e.get("id"), int) else 0) for e in layer)
    per_layer = len(json.dumps(layer)) + len(layer)
    copies = -(-events // len(layer)) if events else max(int(mb * 1e6 / per_layer), steps)
    per_step = max(copies // steps, 1)
    head = {k: v for k, v in doc.items() if k != "traceEvents"}
    n = 0
    with open(out, "w") as f:
        f.write(json.dumps(head)[:-1] + ', "traceEvents": [\n')
        for k in range(per_step * steps):
            shift, s = k * span + (k // per_step) * 50.0, k // per_step
            if k % per_step == 0:
                for name in (f"ProfilerStep#{s + 1}", "train_step"):
                    _write(f, {"ph": "X", "cat": "user_annotation", "name": name, "pid": pid, "tid": tid,
                               "ts": round(t0 + shift - 5, 3), "dur": round(per_step * span, 3)}, n == 0)
                    n += 1
            for e in layer:
                e = dict(e, ts=round(e["ts"] + shift, 3))
                if "args" in e:
                    e["args"] = args = {a: v for a, v in e["args"].items() if not lean or a in READ_ARGS}
                    for key in ("correlation", "External id"):
                        if key in args:
                            args[key] += k * bump
                if isinstance(e.get("id"), int):
                    e["id"] += k * bump
                if unique:
                    e["name"] = f"{e['name']} #{n}"
                _write(f, e, False)
                n += 1
        f.write("\n]}\n")
    print(f"{out}: {out.stat().st_size / 1e6:.1f} MB, {n} events, {steps} steps of {per_step} layers")


def _write(f, event: dict, first: bool) -> None:
    f.write(("" if first else ",\n") + json.dumps(event))


def main(argv: list[str] | None = None) -> int:
    p = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    p.add_argument("trace", type=Path, nargs="?")
    p.add_argument("--make", type=Path, metavar="OUT", help="write a synthetic trace (see above) and stop")
    p.add_argument("--template", type=Path, default=TEMPLATE)
    p.add_argument("--mb", type=float, default=64.0)
    p.add_argument("--events", type=int, default=None)
    p.add_argument("--steps", type=int, default=6)
    p.add_argument("--unique-names", action="store_true")
    p.add_argument("--lean", action="store_true")
    p.add_argument("--repeat", type=int, default=5)
    p.add_argument("--region", default=None)
    p.add_argument("--memory", nargs="?", const="all", choices=("all", "reading"),
                   help="measure peak memory only (no timing, no counts); 'reading': of reading alone")
    p.add_argument("--child", choices=("rss", "read", "base", "tracemalloc", "time", "readtime"),
                   help=argparse.SUPPRESS)
    args = p.parse_args(argv)
    if args.make:
        make(args.make, args.template, args.mb, args.events, args.steps, args.unique_names, args.lean)
        return 0
    if args.child:
        run_child(args.trace, args.child, args.region)
        return 0
    print(compile_attnprof())  # the timed and measured children start as an installed attnprof does
    if args.memory == "reading":
        mem, size = peak_memory(args.trace, args.region, ("read", "base")), raw_size(args.trace)
        print(f"reading alone    {mem['read'] / 1e6:.1f} MB = {mem['read'] / size:.2f}x raw with its readers' "
              f"own pages (RSS summed {mem['read summed'] / 1e6:.1f} MB); interpreter alone {mem['base'] / 1e6:.1f} MB")
        return 0
    mem, size = peak_memory(args.trace, args.region), raw_size(args.trace)  # before this process grows
    if args.memory:
        print(_memory_line(mem, size))
        return 0
    load_before = os.getloadavg()[0]
    parse_s, ours_s, read_s, doc, (a, result) = bench(args.trace, max(args.repeat, 1), args.region)
    ratio = statistics.median(ours_s["wall"]) / statistics.median(parse_s["wall"])
    cpu_ratio = statistics.median(ours_s["cpu"]) / statistics.median(parse_s["cpu"])
    counts = [len(f.activities) for f in a.forwards]
    expected = independent_counts(doc, a.region)
    what = "gunzip + json.load" if args.trace.name.endswith(".gz") else "json.load"
    print(f"trace            {args.trace} ({size / 1e6:.1f} MB of JSON, "
          f"{len(a.trace.events)} complete events)")
    for label, side in ((what, parse_s), ("attnprof analyze", ours_s), ("reading alone", read_s)):
        print(f"{label:<16} median {statistics.median(side['wall']):.3f} s wall {_runs(side['wall'])}, "
              f"{statistics.median(side['cpu']):.3f} s CPU {_runs(side['cpu'])}")
    read_ratio = statistics.median(read_s["cpu"]) / statistics.median(parse_s["cpu"])
    print(f"ratio            {ratio:.3f} wall (limit {MAX_RATIO}), {cpu_ratio:.3f} CPU (reading alone "
          f"{read_ratio:.3f} CPU); load average "
          f"{load_before:.1f} before, {os.getloadavg()[0]:.1f} after ({os.cpu_count()} cores)")
    print(_memory_line(mem, size))
    print(f"region           {a.region}: {len(a.forwards)} forwards; "
          f"orphans {a.orphans}, outside {a.outside}")
    print(f"GPU activities   per step {counts}; independent count {expected}: "
          f"{'match' if counts == expected else 'MISMATCH'}")
    print(f"per forward      {result['per_forward']}; {len(result['kernels'])} distinct GPU activities")
    print(f"findings         {', '.join(f['id'] for f in result['findings'])}")
    ok = ratio <= MAX_RATIO and mem["rss"] < MAX_MEMORY * size and counts == expected
    return 0 if ok else 1


def _memory_line(mem: dict, size: int) -> str:
    return (f"peak memory      {mem['rss'] / 1e6:.1f} MB = {mem['rss'] / size:.2f}x raw (limit {MAX_MEMORY}x: RSS with "
            f"the readers' own pages; RSS summed {mem['rss summed'] / 1e6:.1f} MB); reading alone "
            f"{mem['read'] / 1e6:.1f} MB = {mem['read'] / size:.2f}x; interpreter alone {mem['base'] / 1e6:.1f} MB; "
            f"python heap peak (tracemalloc) {mem['tracemalloc'] / 1e6:.1f} MB = {mem['tracemalloc'] / size:.2f}x raw")


def _runs(values: list[float]) -> str:
    return "[" + ", ".join(f"{v:.3f}" for v in values) + "]"


if __name__ == "__main__":
    sys.exit(main())
