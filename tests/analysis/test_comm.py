"""Communication against computation on one GPU: interval arithmetic and per-instance facts (analysis.comm),
on SYNTHETIC traces whose figures are known exactly (tests/synthetic_ranks.py)."""

from __future__ import annotations

import random

import numpy as np
import pytest

from attnprof.analysis import comm
from attnprof.analysis.attribution import analyze_trace
from attnprof.analysis.comm import (
    all_instances,
    clip,
    intersect,
    is_comm,
    length,
    median_facts,
    timeline_strip,
    union,
)
from attnprof.gpu.kernel_names import is_attention
from attnprof.trace.reader import parse
from synthetic_ranks import ATTENTION_US, COMM_US, COMPUTE_US, EXPOSED_US, MERGE_US, rank_trace


def _analysis(**kw):
    import json

    return analyze_trace(parse(json.dumps(rank_trace(0, 2, **kw)).encode()), "ProfilerStep#*")


def test_union_merges_overlapping_and_touching_spans_and_counts_each_moment_once():
    assert union([(5, 7), (0, 2), (1, 3), (3, 4)]) == [(0, 4), (5, 7)]
    assert length(union([(0, 10), (2, 3), (9, 12)])) == 12


def test_intersect_and_clip_keep_only_the_shared_time():
    a, b = [(0, 4), (6, 10)], [(3, 7), (9, 20)]
    assert intersect(a, b) == [(3, 4), (6, 7), (9, 10)]
    assert clip([(0, 4), (6, 10), (12, 14)], 3, 13) == [(3, 4), (6, 10), (12, 13)]
    assert clip([], 0, 1) == []


def test_kernels_are_sorted_into_nccl_attention_and_the_rest_by_name():
    assert is_comm("ncclDevKernel_SendRecv(ncclDevKernelArgsStorage<4096ul>)")
    assert is_comm("ncclKernel_AllGather_RING_LL_Sum_int8_t")
    assert is_attention("cudnn_generated_fort_native_sdpa_sm90_flash_fprop_wgmma_f16_knob_7")
    assert is_attention("void pytorch_flash::flash_bwd_dot_do_o_kernel<true>(...)")
    assert not is_attention("void at::native::(anonymous namespace)::CatArrayBatchedCopy<float>(...)")


def test_each_step_counts_nccl_time_by_union_and_exposed_time_where_no_kernel_runs():
    facts = all_instances(_analysis())
    assert len(facts) == 3
    for f in facts:
        assert f.nccl_kernels == 2
        assert f.comm_us == pytest.approx(COMM_US)
        assert f.exposed_comm_us == pytest.approx(EXPOSED_US)
        assert f.compute_us == pytest.approx(COMPUTE_US)
        assert f.attention_us == pytest.approx(ATTENTION_US)
        assert f.merge_us == pytest.approx(MERGE_US)
        assert f.overlap_fraction == pytest.approx(1 - EXPOSED_US / COMM_US, abs=1e-4)


def test_medians_over_instances_hold_every_field_and_the_overlap():
    m = median_facts(all_instances(_analysis(extra_us=100)))
    assert m["compute_us"] == pytest.approx(COMPUTE_US + 100)
    assert m["span_us"] == pytest.approx(800)
    assert m["overlap_fraction"] == pytest.approx(1 - EXPOSED_US / COMM_US, abs=1e-4)
    assert median_facts([]) == {}


def test_the_timeline_strip_marks_exposed_overlapped_compute_and_idle_slices():
    a = _analysis()
    from attnprof.analysis.comm import compute_by_device

    strip = timeline_strip(a, a.forwards[0], compute_by_device(a), bins=70)  # 10 µs per slice over [100, 800]
    assert len(strip) == 70
    assert strip[:5] == "CCCCC"  # attention alone, 100-150
    assert strip[5:30] == "O" * 25  # SendRecv under attention, 150-400
    assert strip[30:40] == "X" * 10  # SendRecv alone, 400-500
    assert strip[-20:] == "C" * 20  # the last attention kernel, 600-800


def test_a_strip_bins_lengths_are_exactly_those_of_clipping_the_union_to_each_bin():
    rng = random.Random(23)
    for case in range(300):
        base = 1.7e15 if case % 2 else 0.0  # Kineto's epoch-based µs, where float spacing is 0.25 µs
        starts = [base + rng.uniform(0, 1e6) for _ in range(rng.randint(0, 40))]
        spans = union((t, t + rng.expovariate(1e-4)) for t in starts)
        start, width, bins = base + rng.uniform(-10, 1e5), rng.uniform(1, 5e4), rng.randint(1, 130)
        want = [length(clip(spans, start + i * width, start + (i + 1) * width)) for i in range(bins)]
        assert comm._per_bin(spans, start, width, bins) == want


def test_union_of_arrays_is_the_walk_that_extends_the_last_interval():
    from attnprof.analysis.comm import union_of
    rng = random.Random(7)
    for _ in range(300):
        spans = [(float(s), float(s + rng.choice([0, 0, 1, 2, 5]))) for s in
                 (rng.randint(0, 30) for _ in range(rng.randint(0, 25)))]  # ties, touching, empty spans
        walked: list[tuple[float, float]] = []
        for start, end in sorted(spans):
            if walked and start <= walked[-1][1]:
                walked[-1] = (walked[-1][0], max(walked[-1][1], end))
            else:
                walked.append((start, end))
        starts, ends = np.array([s for s, _ in spans], np.float64), np.array([e for _, e in spans], np.float64)
        assert union_of(starts, ends) == walked
        assert union(spans) == walked
