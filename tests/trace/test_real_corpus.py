"""The public real-trace corpus (`../shared/corpus/traces/`: HTA's tests/data, AMD TraceLens' tests/traces,
kineto's 2021 tb_plugin sample; CUDA and ROCm, old and new schemas, training and serving, one and several
ranks), read as a user would: every trace analyses with no error, and attnprof's counts equal those of an
independent plain-JSON counter (`count_trace.py`, in `expected_*.json` beside the traces). A bare clone has
no corpus: the tier skips.

Where HTA reports the same quantity its figure is named (HTA 0.5, round4-facts.md): HTA's kernel times
round float timestamps unless HTA_DISABLE_NS_ROUNDING=1 (then they equal the counter's, as ours do); its
comm/compute overlap is over the whole trace (46% on hta/tdiff_control, the counter's 46.24%), ours a
ratio of per-step medians (51.7% there, the counter's `--comm-region` 0.517).
"""

from __future__ import annotations

import json
from functools import cache

import numpy as np
import pytest

from attnprof.analysis.attribution import Analysis, analyze_trace
from attnprof.analysis.comm import all_instances, median_facts
from attnprof.analysis.regions import STEP_REGION
from attnprof.pipeline.one_trace import analysis_dict
from attnprof.trace.reader import Trace, load
from support import CORPUS, attnprof

pytestmark = pytest.mark.skipif(CORPUS is None, reason="no ../shared/corpus/traces beside the checkout")


def _expected(name: str) -> dict[str, dict]:
    return {e["trace"]: e for e in json.loads((CORPUS / name).read_text())} if CORPUS else {}


COUNTS, PER_STEP, COMM = (_expected(f"expected_{n}.json") for n in ("counts", "per_step", "comm_per_step"))
KINDS = {"kernel": ("kernel",), "memcpy": ("gpu_memcpy",), "memset": ("gpu_memset",)}


@cache
def _trace(name: str) -> Trace:
    return load(CORPUS / name, readers=1)


@cache
def _analysed(name: str, region: str | None = None) -> tuple[Analysis, dict]:
    a = analyze_trace(_trace(name), region)
    return a, analysis_dict(a)


def test_the_corpus_is_the_one_the_counts_were_made_of():
    assert len(COUNTS) == 22 and all((CORPUS / name).is_file() for name in COUNTS)  # 21 traces, sampled's 2 ranks


@pytest.mark.parametrize("name", sorted(COUNTS))
def test_every_trace_is_analysed_whole_with_no_error(name):
    a, d = _analysed(name)
    assert json.loads(json.dumps(d))["schema"] == "attnprof.analysis/1"  # every section made, plain JSON
    assert not any("malformed" in w for w in d["warnings"])  # no event of a real trace is dropped
    assert d["forwards"] >= 1 and d["unattributed"]["outside_regions"] == 0  # the default region covers the work


@pytest.mark.parametrize("name", sorted(COUNTS))
def test_every_trace_streams_in_pieces_and_reads_as_the_whole_file_does(name, monkeypatch):
    """No real trace needs the whole-file path, which holds the document decoded at once (hta/ns's 15 MB
    peaked at 89 MB that way against 35 MB in pieces): Kineto's log lines (`"INFO": [...]`, brackets in them)
    and TraceLens' `deviceProperties` after the events array leave the cut at its end found; the columns
    equal the whole file's, decoded at once."""
    import gzip

    from attnprof.trace import reader

    path = CORPUS / name
    raw = path.read_bytes()
    whole = reader.parse(gzip.decompress(raw) if raw[:2] == b"\x1f\x8b" else raw)

    def whole_file_read(*args, **kwargs):
        raise AssertionError("streaming gave up and read the file whole")

    monkeypatch.setattr(reader, "parse", whole_file_read)
    streamed = load(path, readers=1)
    got, want = streamed.columns, whole.columns  # both code names, threads and args in first-seen order
    for column in ("ts", "dur", "cat", "name", "pid", "thread", "corr", "args"):
        assert np.array_equal(getattr(got, column), getattr(want, column)), column
    for table in ("cats", "pids", "threads", "arg_sets"):
        assert getattr(got, table) == getattr(want, table), table
    assert list(got.names) == list(want.names)
    assert (streamed.warnings, streamed.lenient) == (whole.warnings, whole.lenient)


@pytest.mark.parametrize("name", sorted(COUNTS))
def test_the_reader_counts_every_gpu_activity_as_the_counter_does(name):
    """Kernels, memcpys and memsets by kind and their summed time, from the reader's columns: ROCm's and the
    2021 schema's categories (`Kernel`, `Memcpy`, `Memset`) included."""
    cols, want = _trace(name).columns, COUNTS[name]
    for kind, cats in KINDS.items():
        rows = np.flatnonzero(np.isin(cols.cat, [cols.code("cats", c) for c in cats]))
        assert len(rows) == want[kind + ("s" if kind == "kernel" else "")], kind
        assert round(float(cols.dur[rows].sum()), 3) == pytest.approx(want[f"{kind}_time_us"], abs=2e-3), kind


@pytest.mark.parametrize("name", sorted(COUNTS))
def test_every_gpu_activity_is_attributed_outside_the_region_or_without_a_launch(name):
    """attributed + launched outside the region + matching no launch = the counter's GPU activities; those
    with no launch are the counter's activities whose correlation matches no launch event."""
    u, want = _analysed(name)[1]["unattributed"], COUNTS[name]
    assert u["attributed"] + u["outside_regions"] + u["orphans"] == want["gpu_activities"] == u["gpu_activities"]
    assert u["orphans"] == want["gpu_activities"] - want["gpu_correlation_matched"]
    time = want["kernel_time_us"] + want["memcpy_time_us"] + want["memset_time_us"]
    assert u["attributed_us"] + u["outside_us"] + u["orphans_us"] == pytest.approx(time, abs=5e-3)


@pytest.mark.parametrize("name", sorted(PER_STEP))
def test_each_profiler_step_holds_what_the_counter_attributes_to_it(name):
    """Per step (a GPU activity belongs to the step whose host span holds its launch), by kind, and those
    outside every step or with no launch; the default region is the profiler steps on all of these."""
    a, _ = _analysed(name)
    want = PER_STEP[name]
    assert a.region == STEP_REGION
    assert [len(f.activities) for f in a.forwards] == want["per_instance"]
    assert [f.gpu_time_us for f in a.forwards] == pytest.approx(want["per_instance_time_us"], abs=2e-3)
    kinds = {k: sum(f.count(k) for f in a.forwards) for k in KINDS}
    assert {k: n for k, n in kinds.items() if n} == want["attributed_by_kind"]
    assert (a.outside, a.orphans) == (want["outside"], want["orphans"])


@pytest.mark.parametrize("name", sorted(COMM))
def test_communication_per_step_equals_the_counters(name):
    """NCCL time and the part of it no compute kernel overlaps, medians over the steps (the counter's
    `--comm-region 'ProfilerStep#*'`; HTA's overlap is over the whole trace, another quantity)."""
    facts = median_facts(all_instances(_analysed(name)[0]))
    want = COMM[name]
    assert facts["nccl_kernels"] == want["median_nccl_kernels"]
    assert facts["comm_us"] == pytest.approx(want["median_comm_us"], abs=2e-3)
    assert facts["exposed_comm_us"] == pytest.approx(want["median_exposed_us"], abs=2e-3)


def test_the_2021_schema_is_read_as_steps_of_gpu_work():
    """kineto's resnet50 sample (categories Operator/Runtime/Kernel/Memcpy/Memset) read as a CPU-only trace
    before: 0 forwards, 9,096 GPU activities ignored."""
    a, d = _analysed("kineto/resnet50/worker0.1623143089861.pt.trace.json.gz")
    assert a.region == STEP_REGION and len(a.forwards) == 6 and d["unattributed"]["attributed"] == 9096
    # its autograd nodes are ops of their own names (CudnnConvolutionBackward) on the engine's thread
    assert d["unit"] == "step" and d["phases"]["backward"]["gpu_ops"] > 0 and d["phases"]["forward"]["gpu_ops"] > 0


def test_the_profilers_empty_closing_step_is_no_step():
    """HTA's MI250 trace: ProfilerStep#2 holds no op and no GPU work; the per-step medians read 0 GPU ops."""
    a, d = _analysed("hta/amd/mi250_minitoy_train_ROCm6_2_kineto.json.gz")
    assert d["forwards"] == 1 and d["per_forward"]["gpu_ops"] == 16 and d["unattributed"]["attributed"] == 16


def test_a_gpu_only_trace_is_analysed_as_the_whole_trace():
    """MI210, runtime and kernel events only: no host op, no annotation (0 GPU ops before)."""
    a, d = _analysed("tl/mi210_gpu_only/gpu_only_trace.json.gz")
    assert d["forwards"] == 1 and d["per_forward"]["kernels"] == 562 and d["unattributed"]["attributed"] == 562


def test_a_trace_with_launches_but_no_gpu_activity_says_so():
    _, d = _analysed("hta/cupti/cupti.json.gz")
    assert any("launch event(s) but no GPU activity" in w for w in d["warnings"])


ROCM = [("hta/amd/mi250_minitoy_train_ROCm6_2_kineto.json.gz", "stream", 0),
        ("tl/mi300_bert/bert.json.gz", "bytes", 1), ("tl/mi210_gpu_only/gpu_only_trace.json.gz", "shared_memory", 0)]


@pytest.mark.parametrize(("name", "field", "value"), ROCM)
def test_rocm_text_numbers_are_read_as_numbers_and_every_kernel_has_its_grid(name, field, value):
    """roctracer writes args.stream as "0x0" and args.bytes as "1": read as the numbers, nothing dropped; ROCm 6
    writes grid and block on the launch (MI250, MI210), and the kernel is given its launch's."""
    trace = _trace(name)
    launches = trace.events_at(np.flatnonzero(trace.columns.cat == trace.columns.code("cats", "cuda_runtime")))
    assert any(e.args and getattr(e.args, field) == value for e in launches) and not trace.warnings
    assert all(e.args.grid and e.args.block for e in trace.events if e.cat == "kernel")


@pytest.mark.parametrize("name", ["stream_str_grid512.json", "stream_str_inputdims.json", "silent_str.json"])
def test_the_reader_repros_read_like_their_integer_twins(name):
    """The minimal repros of the ROCm failures (exit 2 'bytes must be in range(0, 256)', exit 1 TypeError,
    grid/block silently lost): read, with the kernel's geometry and the findings it gives."""
    trace = load(CORPUS / "repro" / name)
    kernel = next(e for e in trace.events if e.cat == "kernel")
    assert kernel.args.grid and kernel.args.block and not trace.warnings
    if name == "silent_str.json":
        ids = [[f["id"] for f in analysis_dict(analyze_trace(load(CORPUS / "repro" / n)))["findings"]]
               for n in ("silent_str.json", "silent_int.json")]
        assert ids[0] == ids[1] and "occupancy" in ids[0]


def test_the_text_says_what_a_small_region_leaves_out():
    """HTA's sampled trace: its most frequent annotation holds 6 of 1,204 GPU activities; asked for, the text
    says so first, and always how many fell outside and how many match no launch."""
    proc = attnprof("analyze", str(CORPUS / "hta/sampled/rank-0.json.gz"), "--region", "## encoder fp8 None ##")
    assert proc.returncode == 0, proc.stderr
    assert "holds only 1% of the trace's GPU time" in proc.stdout and "holds only 1%" in proc.stderr
    assert "GPU activities: 6 of 1204 in region '## encoder fp8 None ##'; 1198 (" in proc.stdout
