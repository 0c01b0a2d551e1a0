"""CPU seconds of decoding and shortening every distinct GPU activity name of one trace, with cold caches,
three times each, for A/B runs of two source trees side by side (as stage_cpu.py):

    git archive COMMIT src | tar -x -C /tmp/old
    for src in /tmp/old/src src /tmp/old/src src; do
        PYTHONPATH=$src python3 benchmarks/engine/kernel_names_cpu.py TRACE; done

`decode` is timed as the rules use it on every kernel (`decode(name).is_attention`, fused-attention's
test), `short_name` as the views do. A trace of unique names (`big_trace.py --make --unique-names`) is
the case where the per-name caches do not help.
"""

from __future__ import annotations

import sys
import time

import numpy as np

from attnprof.gpu import kernel_info, kernel_names
from attnprof.trace.reader import load

GPU_CATS = ("kernel", "gpu_memcpy", "gpu_memset")


def gpu_names(path: str) -> list[str]:
    """The distinct names of the trace's GPU activities (kernels, copies, sets), first seen first."""
    cols = load(path).columns
    on_gpu = np.isin(cols.cat, [cols.cats.index(c) for c in GPU_CATS if c in cols.cats])
    return [cols.names[code] for code in dict.fromkeys(cols.name[on_gpu].tolist())]


def cold_cpu_s(names: list[str], one) -> float:
    """CPU seconds of `one(name)` for each name, every decode cache emptied first."""
    for cached in (kernel_names.decode, kernel_names.normalize, kernel_info.short_name):
        cached.cache_clear()
    start = time.process_time()
    for name in names:
        one(name)
    return time.process_time() - start


def main(path: str) -> None:
    names = gpu_names(path)
    timed = (("decode", lambda n: kernel_names.decode(n).is_attention), ("short_name", kernel_info.short_name))
    for label, one in timed:
        runs = [cold_cpu_s(names, one) for _ in range(3)]
        print(f"{label:<10} {len(names)} names: " + " ".join(f"{s:.3f}" for s in runs) + " s CPU")


if __name__ == "__main__":
    main(sys.argv[1])
