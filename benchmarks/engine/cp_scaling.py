"""How `attnprof analyze` scales with ranks: N rank traces SYNTHESISED from recorded 2-rank ones.

Rank k of N is a copy of recorded rank k % 2 with its distributedInfo set to (k, N) and its clock
shifted by k µs; `--repeat R` also repeats each trace's events R times (shifted by whole trace
lengths) to stand for a longer profile. Then it times `analyze_ranks` (one process per trace) on 1
trace and on N, and reports wall time and the peak resident memory of the parent and of the largest
worker. The copies are identical work, so this measures the analysis, not the job.

    python benchmarks/engine/cp_scaling.py RANK0.json.gz RANK1.json.gz --ranks 1,2,4,8 --repeat 1
"""

from __future__ import annotations

import argparse
import gzip
import json
import resource
import sys
import tempfile
import time
from pathlib import Path

from attnprof.pipeline.ranks import analyze_ranks


def synthesise(sources: list[dict], world: int, repeat: int, folder: Path) -> list[Path]:
    paths = []
    for k in range(world):
        doc = json.loads(json.dumps(sources[k % len(sources)]))
        events = [e for e in doc["traceEvents"] if e.get("ph") == "X"]
        length = max(e["ts"] + e.get("dur", 0) for e in events) - min(e["ts"] for e in events) + 1000.0
        copies = []
        for r in range(repeat):
            for e in events:
                copies.append({**e, "ts": e["ts"] + k + r * length})
        doc["traceEvents"] = copies
        doc["distributedInfo"] = {**doc.get("distributedInfo", {}), "rank": k, "world_size": world}
        path = folder / f"synthetic_rank{k}.json.gz"
        path.write_bytes(gzip.compress(json.dumps(doc).encode(), compresslevel=1))
        paths.append(path)
    return paths


def main() -> None:
    p = argparse.ArgumentParser()
    p.add_argument("traces", nargs="+")
    p.add_argument("--ranks", default="1,2,4,8")
    p.add_argument("--repeat", type=int, default=1)
    args = p.parse_args()
    sources = [json.loads(gzip.decompress(Path(t).read_bytes())) for t in args.traces]
    rows = []
    with tempfile.TemporaryDirectory() as tmp:
        for world in map(int, args.ranks.split(",")):
            folder = Path(tmp) / f"n{world}"
            folder.mkdir()
            paths = synthesise(sources, world, args.repeat, folder)
            size = sum(x.stat().st_size for x in paths) / len(paths)
            t0 = time.perf_counter()
            result = analyze_ranks(paths, workers=world)
            wall = time.perf_counter() - t0
            child = resource.getrusage(resource.RUSAGE_CHILDREN).ru_maxrss / 1024
            parent = resource.getrusage(resource.RUSAGE_SELF).ru_maxrss / 1024
            rows.append({"ranks": world, "trace_mib_gz": round(size / 2**20, 2), "wall_s": round(wall, 3),
                         "peak_worker_mib": round(child, 1), "peak_parent_mib": round(parent, 1),
                         "ranks_found": result["distributed"]["ranks_found"],
                         "findings": sorted(f["id"] for f in result["findings"])})
            print(json.dumps(rows[-1]), flush=True)
    base = rows[0]["wall_s"]
    for r in rows:
        print(f"{r['ranks']:>5} ranks: {r['wall_s']:.3f} s ({r['wall_s'] / base:.2f}x one rank's)", file=sys.stderr)


if __name__ == "__main__":
    main()
