"""What a profiler's trace shows of batch-1 decode with and without the combine kernel launched as the split
kernel's programmatic dependent (decode.CardSettings.pdl_max_rows): how far each combine's span reaches back into
the split kernel's before it, read by attnprof's own check (analysis/streams.same_stream_overlaps), and the
per-kernel durations a sum of kernel times adds up. From the repository root, on a GPU:

    PYTHONPATH=src python3 benchmarks/kernel/decode_trace_overlap.py --out DIR

Each form runs CALLS eager calls at 2k / 4k / 8k cached keys (B1, 32/8 heads, D128) under torch.profiler; the
traces land in DIR, one line of JSON per form and cache on stdout.
"""

from __future__ import annotations

import argparse
import json
import statistics
from pathlib import Path

import numpy as np
import torch
from torch.profiler import ProfilerActivity, profile
from triton_decode import decode_inputs, ours_decode

from attnprof.analysis.regions import rows_of
from attnprof.analysis.streams import same_stream_overlaps
from attnprof.trace.events import GPU_CATEGORIES
from attnprof.trace.reader import load

CALLS = 20


def traced(q, k, v, lens, pdl: bool, path: Path) -> dict:
    """One form's trace: its calls' kernels by name (median µs, count), and the overlaps attnprof finds."""
    for _ in range(3):  # compiled and planned before the profiler starts
        ours_decode(q, k, v, lens, causal=False, pdl=pdl)
    torch.cuda.synchronize()
    with profile(activities=[ProfilerActivity.CPU, ProfilerActivity.CUDA]) as prof:
        for _ in range(CALLS):
            ours_decode(q, k, v, lens, causal=False, pdl=pdl)
        torch.cuda.synchronize()
    prof.export_chrome_trace(str(path))
    cols = load(path).columns
    gpu = rows_of(cols, *GPU_CATEGORIES)
    kernels: dict[str, list[float]] = {}
    for row in gpu.tolist():
        kernels.setdefault(cols.names[cols.name[row]], []).append(float(cols.dur[row]))
    rows, by = same_stream_overlaps(cols, gpu)
    return {"kernels": {name[:60]: {"median_us": statistics.median(d), "count": len(d)} for name, d in kernels.items()},
            "overlaps": len(rows), "overlap_us_median": float(np.median(by)) if len(by) else 0.0,
            "summed_us_per_call": sum(sum(d) for d in kernels.values()) / CALLS}


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--out", default="/tmp/decode-traces")
    out = Path(parser.parse_args().out)
    out.mkdir(parents=True, exist_ok=True)
    for cache in (2048, 4096, 8192):
        q, k, v, lens = decode_inputs(cache, 1, batch=1)
        for pdl in (True, False):
            row = {"cache": cache, "pdl": pdl, **traced(q, k, v, lens, pdl, out / f"decode_{cache}_pdl{int(pdl)}.json")}
            print(json.dumps(row), flush=True)


if __name__ == "__main__":
    main()
