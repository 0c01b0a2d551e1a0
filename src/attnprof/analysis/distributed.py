"""Several ranks' traces of one job, analysed together: what one rank's summary holds and how the
summaries merge. Imports no torch; finding the files, the process pool and each rank's findings are the
pipeline's (pipeline.ranks).

Each trace is analysed where it is (in its own process offline, on its own rank during
`attnprof run --nproc`), and only a small per-rank summary leaves that process: medians over the
region's instances, the instance windows, a timeline strip and the rank's findings. `merged` then
lines the ranks up (each trace's `baseTimeNanoseconds` puts its clock on a common one) and works
out what only several ranks show: skew, the slowest rank, imbalance. Memory per process is one
trace's; the merge holds kilobytes per rank, so a thousand ranks merge as easily as two.
"""

from __future__ import annotations

import re
import statistics
from collections import Counter
from pathlib import Path

from attnprof.analysis import join
from attnprof.analysis.attribution import PROFILER_STEP, STEP_REGION, Analysis, default_region
from attnprof.analysis.comm import (
    all_instances,
    compute_by_device,
    is_nccl,
    median_facts,
    names_passing,
    timeline_strip,
    top_merge_kernels,
)
from attnprof.analysis.cross_rank import cross_rank
from attnprof.analysis.regions import annotation_rows, rows_of
from attnprof.analysis.ring import parallelism
from attnprof.contracts import RanksResult
from attnprof.trace.reader import GPU_CATEGORIES, LAUNCH_CATEGORIES, Trace

STEP_FIELDS = ("busy_us", "compute_us", "attention_us", "exposed_comm_us", "comm_start_us")  # per instance, for the
# cross-rank view (analysis.cross_rank): a few floats per step, so hundreds of ranks' steps line up
_RANK_IN_NAME = re.compile(r"rank[_-]?(\d+)", re.IGNORECASE)
TOP_KERNELS = 5
MISSING_LISTED = 16  # ranks with no trace named in the result (the rest counted)


def step_region(trace: Trace) -> str:
    """Whole profiler steps when the trace has them (the unit a distributed job repeats), else the region
    a single trace's analysis picks (the one holding the most GPU time)."""
    cols = trace.columns
    annotations = trace.events_at(annotation_rows(cols))
    if any(PROFILER_STEP.fullmatch(e.name) for e in annotations):
        return STEP_REGION
    gpu_rows = rows_of(cols, *GPU_CATEGORIES)
    return default_region(annotations, cols, join.launches_of(cols, rows_of(cols, *LAUNCH_CATEGORIES), gpu_rows),
                          gpu_rows)


def rank_facts(a: Analysis, trace: Trace, path: str | Path) -> dict:
    """Everything the merge needs from one rank's analysed trace but its findings (the pipeline adds
    them): a few kilobytes whatever the trace's size."""
    info = trace.distributed_info or {}
    compute = compute_by_device(a)
    facts = all_instances(a)
    windows = [[round(f.start_us, 3), round(f.end_us, 3)] for f in facts]
    typical = _typical_forward(a, facts)
    return {
        "rank": _int_or_none(info.get("rank")), "world_size": _int_or_none(info.get("world_size")),
        "backend": info.get("backend"), "source": str(path), "region": a.region, "regions": len(a.forwards),
        "instances": len(facts),
        "gpu": a.has_gpu, "host_us": _host_us(a), **median_facts(facts), "windows_us": windows,
        "steps": {k: [None if (v := getattr(f, k)) is None else round(v, 3) for f in facts] for k in STEP_FIELDS},
        "base_time_ns": trace.base_time_ns,
        "timeline": timeline_strip(a, typical, compute) if typical is not None else "",
        "nccl_kernel_names": _names_per_instance(a, is_nccl),
        "merge_kernels": top_merge_kernels(a, TOP_KERNELS),
        "ring_attention": parallelism(a).ring_attention,  # context-parallel findings need it (analysis.ring)
    }


def _host_us(a) -> float | None:
    """Median host time of the region (on a CPU-only trace, the time of the work itself)."""
    return round(statistics.median(f.region.dur for f in a.forwards), 3) if a.forwards else None


def _int_or_none(value) -> int | None:
    return value if isinstance(value, int) and not isinstance(value, bool) else None


def _typical_forward(a, facts):
    """The instance whose GPU span is the median one: the strip shows a typical step, not an outlier."""
    if not facts:
        return None
    spans = [f.end_us - f.start_us for f in facts]
    target = statistics.median_low(spans)
    i = spans.index(target)
    active = [fwd for fwd in a.forwards if fwd.activities]
    return active[i]


def _names_per_instance(a, keep) -> dict[str, float]:
    n = max(sum(1 for f in a.forwards if f.activities), 1)
    names = Counter(names_passing(a, keep))
    return {name: round(c / n, 3) for name, c in names.most_common()}


def merged(ranks: list[dict]) -> dict:
    """Line the rank summaries up and add what only several ranks show (the pipeline adds the findings)."""
    failed = [r for r in ranks if "error" in r]
    good = [r for r in ranks if "error" not in r]
    warnings = [r["error"] for r in failed]
    _number_ranks(good, warnings)
    good.sort(key=lambda r: r["rank"])
    return RanksResult(world_size=_world_size(good), region=_common(good, "region"), ranks=good,
                       distributed=distributed_facts(good, warnings), warnings=warnings,
                       unread=[{"source": r["source"], "reason": r["error"]} for r in failed]).to_payload()


def _number_ranks(ranks: list[dict], warnings: list[str]) -> None:
    """A trace without `distributedInfo` takes the rank in its file name, else its place in the list."""
    for i, r in enumerate(ranks):
        if r["rank"] is None:
            m = _RANK_IN_NAME.search(Path(r["source"]).name)
            r["rank"] = int(m.group(1)) if m else i
            warnings.append(f"{r['source']}: no distributedInfo; taken as rank {r['rank']}")
    seen = Counter(r["rank"] for r in ranks)
    for rank, n in sorted(seen.items()):
        if n > 1:
            warnings.append(f"rank {rank} appears in {n} traces (traces of several runs mixed?)")


def _world_size(ranks: list[dict]) -> int | None:
    sizes = {r["world_size"] for r in ranks if r["world_size"] is not None}
    return max(sizes) if sizes else (len(ranks) or None)


def _common(ranks: list[dict], key: str):
    values = {r[key] for r in ranks}
    return values.pop() if len(values) == 1 else sorted(map(str, values))


def distributed_facts(ranks: list[dict], warnings: list[str]) -> dict:
    """Across ranks: who is missing, skew of the same instance, the slowest rank, the spread of work."""
    world = _world_size(ranks)
    found = sorted({r["rank"] for r in ranks})
    missing, listed, runs = _missing(world or 0, found)
    if missing:
        more = f" and {len(runs) - MISSING_LISTED} more runs" if len(runs) > MISSING_LISTED else ""
        warnings.append(f"ranks {_ranges(runs[:MISSING_LISTED])}{more} of {world} have no trace here")
    timed = [r for r in ranks if r.get("instances")]
    facts = {"ranks_found": len(found), "missing_ranks": listed, "missing": missing,
             "instances": min((r["instances"] for r in timed), default=0)}
    if not timed or not any(r.get("busy_us") for r in timed):
        return facts
    shift = clock_shift(timed, warnings)
    facts |= _skew(timed, shift)
    by_compute = max(timed, key=lambda r: r["compute_us"])
    for key in ("compute_us", "attention_us", "comm_us", "exposed_comm_us", "merge_us", "span_us"):
        values = [r[key] for r in timed]
        facts[key] = {"min": min(values), "median": round(statistics.median(values), 3), "max": max(values)}
    least = facts["compute_us"]["min"]
    facts["slowest_rank"] = by_compute["rank"]  # the most GPU work: the rank the others wait for
    facts["imbalance"] = round(by_compute["compute_us"] / least, 4) if least > 0 else None
    overlaps = [r["overlap_fraction"] for r in timed if r.get("overlap_fraction") is not None]
    facts["overlap_fraction"] = {"min": min(overlaps), "max": max(overlaps)} if overlaps else None
    return facts | cross_rank(timed, shift)


def _missing(world: int, found: list[int]) -> tuple[int, list[int], list[tuple[int, int]]]:
    """(how many of ranks 0..world-1 have no trace, the first MISSING_LISTED of them, the missing ranks as
    runs (first, last)): the world size is the trace's word, so it sizes neither memory nor output (a trace
    may claim 10^9 ranks); the runs are the gaps between the ranks found, so there are at most one more."""
    present = sorted({r for r in found if isinstance(r, int) and 0 <= r < world})
    runs = [(a + 1, b - 1) for a, b in zip([-1, *present], [*present, world], strict=True) if b - a > 1]
    listed: list[int] = []
    for first, last in runs:
        listed += range(first, min(last, first + MISSING_LISTED - len(listed) - 1) + 1)
        if len(listed) >= MISSING_LISTED:
            break
    return world - len(present), listed, runs


def clock_shift(ranks: list[dict], warnings: list[str]) -> dict[int, float]:
    """Per rank, the µs to add to its trace's times to put them on the common clock (the earliest base)."""
    if any(r["base_time_ns"] is None for r in ranks):
        warnings.append("a trace has no baseTimeNanoseconds: skew assumes the traces share one clock")
    base = min((r["base_time_ns"] or 0) for r in ranks)
    return {r["rank"]: ((r["base_time_ns"] or base) - base) / 1000.0 for r in ranks}


def _ranges(runs: list[tuple[int, int]]) -> str:
    """Runs of rank numbers in a line: [(2, 4), (9, 9)] -> "2-4, 9" (a 1,024-rank job's missing ranks)."""
    return ", ".join(str(a) if a == b else f"{a}-{b}" for a, b in runs)


def _skew(ranks: list[dict], shift: dict[int, float]) -> dict:
    """Start and end spread of the same instance across ranks (median over instances), on the common
    clock; which rank ends last most often."""
    n = min(len(r["windows_us"]) for r in ranks)
    starts, ends, last = [], [], Counter()
    for i in range(n):
        s = {r["rank"]: r["windows_us"][i][0] + shift[r["rank"]] for r in ranks}
        e = {r["rank"]: r["windows_us"][i][1] + shift[r["rank"]] for r in ranks}
        starts.append(max(s.values()) - min(s.values()))
        ends.append(max(e.values()) - min(e.values()))
        last[max(e, key=e.__getitem__)] += 1
    if not n:
        return {}
    return {"skew_start_us": round(statistics.median(starts), 3), "skew_end_us": round(statistics.median(ends), 3),
            "last_to_finish": last.most_common(1)[0][0]}
