"""How fast and how lean attnprof is on a big trace, against the stdlib merely parsing it.

    python benchmarks/big_trace.py TRACE [--repeat N] [--region NAME]

Times `json.load` of TRACE (gunzip + parse for a .json.gz) and attnprof's whole analysis
(load + attribution + per_forward + kernel_table + every findings rule: what `attnprof analyze
--json` computes), interleaved so that a noisy machine
hurts both alike, and reports the medians and their ratio. Peak memory is measured in a
fresh subprocess (peak RSS, so the interpreter and every buffer count; tracemalloc's peak
of the Python heap is shown too) and set against the size of the raw JSON. The per-step
GPU activity counts are checked against an independent count made here from the
plain-json parse, joining launches by correlation id.

Exits 1 if the ratio is above 0.5, peak memory reaches twice the raw size, or the counts
disagree.
"""

from __future__ import annotations

import argparse
import gc
import gzip
import json
import re
import resource
import statistics
import subprocess
import sys
import time
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parents[1] / "src"))

from attnprof.analysis.attribution import STEP_REGION, analyze_trace  # noqa: E402
from attnprof.pipeline import analysis_dict  # noqa: E402
from attnprof.trace.reader import load  # noqa: E402

MAX_RATIO = 0.5
MAX_MEMORY = 2.0  # peak RSS over raw JSON size
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


def timed(fn, *args) -> tuple[float, object]:
    gc.collect()
    t = time.perf_counter()
    out = fn(*args)
    return time.perf_counter() - t, out


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


def peak_memory(path: Path, region: str | None) -> dict:
    """Peak RSS of a fresh interpreter that runs the analysis, of one that only imports, and the
    tracemalloc peak of the analysis."""
    def child(mode: str) -> int:
        extra = ["--region", region] if region else []
        cmd = [sys.executable, __file__, str(path), "--child", mode, *extra]
        return json.loads(subprocess.run(cmd, check=True, capture_output=True, text=True).stdout)["peak"]
    return {mode: child(mode) for mode in ("rss", "base", "tracemalloc")}


def run_child(path: Path, mode: str, region: str | None) -> None:
    if mode == "tracemalloc":
        import tracemalloc

        tracemalloc.start()
        attnprof_analyze(path, region)
        peak = tracemalloc.get_traced_memory()[1]
    else:
        if mode == "rss":
            attnprof_analyze(path, region)
        peak = _peak_rss()
    print(json.dumps({"peak": peak}))


def _peak_rss() -> int:
    """This process's peak RSS. VmHWM, not ru_maxrss: Linux carries ru_maxrss over from the parent
    through fork and exec, so a child of a big process would report the parent's size."""
    try:
        with open("/proc/self/status") as f:
            return next(int(line.split()[1]) * 1024 for line in f if line.startswith("VmHWM:"))
    except (OSError, StopIteration):
        return resource.getrusage(resource.RUSAGE_SELF).ru_maxrss * 1024  # KiB on Linux


def raw_size(path: Path) -> int:
    if not path.name.endswith(".gz"):
        return path.stat().st_size
    with gzip.open(path, "rb") as f:
        return sum(len(b) for b in iter(lambda: f.read(1 << 20), b""))


def bench(path: Path, repeat: int, region: str | None) -> tuple[list[float], list[float], object, tuple]:
    parse_s, ours_s, doc = [], [], None
    for _ in range(repeat):  # interleaved, so that a busy neighbour slows both alike
        doc = None  # nothing big of the other side alive: its GC cost would land on this side
        t, _ = timed(attnprof_analyze, path, region)  # dropped at once, like the parse below
        ours_s.append(t)
        t, doc = timed(json_parse, path)
        parse_s.append(t)
    return parse_s, ours_s, doc, attnprof_analyze(path, region)


def main(argv: list[str] | None = None) -> int:
    p = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    p.add_argument("trace", type=Path)
    p.add_argument("--repeat", type=int, default=5)
    p.add_argument("--region", default=None)
    p.add_argument("--child", choices=("rss", "base", "tracemalloc"), help=argparse.SUPPRESS)
    args = p.parse_args(argv)
    if args.child:
        run_child(args.trace, args.child, args.region)
        return 0
    mem, size = peak_memory(args.trace, args.region), raw_size(args.trace)  # before this process grows
    parse_s, ours_s, doc, (a, result) = bench(args.trace, max(args.repeat, 1), args.region)
    ratio = statistics.median(ours_s) / statistics.median(parse_s)
    counts = [len(f.activities) for f in a.forwards]
    expected = independent_counts(doc, a.region)
    what = "gunzip + json.load" if args.trace.name.endswith(".gz") else "json.load"
    print(f"trace            {args.trace} ({size / 1e6:.1f} MB of JSON, "
          f"{len(a.trace.events)} complete events)")
    print(f"{what:<16} median {statistics.median(parse_s):.3f} s  {_runs(parse_s)}")
    print(f"attnprof analyze median {statistics.median(ours_s):.3f} s  {_runs(ours_s)}")
    print(f"ratio            {ratio:.3f} (limit {MAX_RATIO})")
    print(f"peak memory      {mem['rss'] / 1e6:.1f} MB RSS = {mem['rss'] / size:.2f}x raw "
          f"(limit {MAX_MEMORY}x); "
          f"interpreter alone {mem['base'] / 1e6:.1f} MB; python heap peak (tracemalloc) "
          f"{mem['tracemalloc'] / 1e6:.1f} MB = {mem['tracemalloc'] / size:.2f}x raw")
    print(f"region           {a.region}: {len(a.forwards)} forwards; "
          f"orphans {a.orphans}, outside {a.outside}")
    print(f"GPU activities   per step {counts}; independent count {expected}: "
          f"{'match' if counts == expected else 'MISMATCH'}")
    print(f"per forward      {result['per_forward']}; {len(result['kernels'])} distinct GPU activities")
    print(f"findings         {', '.join(f['id'] for f in result['findings'])}")
    ok = ratio <= MAX_RATIO and mem["rss"] < MAX_MEMORY * size and counts == expected
    return 0 if ok else 1


def _runs(values: list[float]) -> str:
    return "[" + ", ".join(f"{v:.3f}" for v in values) + "]"


if __name__ == "__main__":
    sys.exit(main())
