"""`run --ncu`: reading Nsight Compute's raw page, the per-kernel counters, and the run going on without ncu.

The end-to-end tests put a stand-in `ncu` on PATH (tests/fixtures/ncu/fake_ncu.py) that records its
arguments and answers `--import` with a raw-page CSV fixture; the GPU test runs the real one.
"""

from __future__ import annotations

import os
import shutil
import sys
from dataclasses import dataclass, field
from pathlib import Path

import pytest

from attnprof.harness import ncu
from attnprof.options import RunOptions

FIXTURES = Path(__file__).resolve().parents[1] / "fixtures" / "ncu"


@dataclass
class Config:  # the fields of harness.runner.RunConfig that add_ncu reads
    device: str = "cuda"
    options: RunOptions = field(default_factory=lambda: RunOptions(warmup=1))


def results_with(*names: str, status: str = "ok") -> dict:
    return {"problem": {"batch": 1, "heads": 2, "seq": 64, "head_dim": 64, "dtype": "bf16"},
            "variants": [{"name": n, "status": status, "family": n} for n in names]}


@pytest.fixture
def fake_ncu(tmp_path, monkeypatch):
    bin_dir = tmp_path / "bin"
    bin_dir.mkdir()
    shutil.copy(FIXTURES / "fake_ncu.py", bin_dir / "ncu")
    shutil.copy(FIXTURES / "raw_page.csv", bin_dir / "raw_page.csv")
    monkeypatch.setenv("PATH", os.pathsep.join((str(bin_dir), os.environ.get("PATH", ""))))
    monkeypatch.setenv("FAKE_NCU_LOG", str(tmp_path / "ncu_calls.txt"))
    return bin_dir


def test_the_raw_page_gives_one_record_per_kernel_without_the_units_row():
    kernels = ncu.parse_raw_csv((FIXTURES / "raw_page.csv").read_text())
    assert [k["Kernel Name"] for k in kernels][1] == "flash_attn_triton_fwd"
    assert len(kernels) == 2
    assert kernels[0]["launch__shared_mem_per_block_dynamic"] == 137216.0  # "137,216": grouping dropped


def test_counters_name_occupancy_throughput_tensor_pipe_and_the_limiter():
    cudnn = ncu.counters(ncu.parse_raw_csv((FIXTURES / "raw_page.csv").read_text())[0])
    assert (cudnn["achieved_occupancy_pct"], cudnn["theoretical_occupancy_pct"]) == (14.11, 18.75)
    assert cudnn["registers_per_thread"] == 168.0 and cudnn["block_size"] == 384.0
    assert cudnn["tensor_pipe_pct"] == 68.9
    assert cudnn["occupancy_limiter"] == ["registers", "shared memory"]  # one block each; warps allow five
    assert cudnn["bound"] == "compute"


def test_a_kernel_under_sixty_percent_of_both_peaks_is_latency_bound():
    assert ncu.counters(ncu.parse_raw_csv((FIXTURES / "raw_page.csv").read_text())[1])["bound"] == "latency"


def test_a_cpu_run_gets_a_one_line_reason_and_its_variants_are_left_alone():
    results = results_with("sdpa-math")
    ncu.add_ncu(results, Config(device="cpu"))
    assert results["ncu"] == {"available": False, "reason": ncu.unavailable_reason("cpu")}
    assert "CPU" in results["ncu"]["reason"] and "ncu" not in results["variants"][0]


def test_without_ncu_on_path_the_run_goes_on_with_the_reason(monkeypatch, tmp_path):
    monkeypatch.setenv("PATH", str(tmp_path))
    results = results_with("sdpa-cudnn")
    ncu.add_ncu(results, Config())
    assert "not on PATH" in results["ncu"]["reason"]
    assert "ncu" not in results["variants"][0]


def test_each_variant_that_ran_is_profiled_in_the_nvtx_range_of_a_child(fake_ncu):
    results = results_with("sdpa-cudnn", "triton")
    results["variants"].append({"name": "flex", "status": "unsupported", "family": "flex"})
    ncu.add_ncu(results, Config())
    assert results["ncu"]["available"]
    cudnn, triton, flex = results["variants"]
    assert [k["name"] for k in triton["ncu"]["kernels"]] == [k["name"] for k in cudnn["ncu"]["kernels"]]
    assert cudnn["ncu"]["kernels"][0]["achieved_occupancy_pct"] == 14.11
    assert "ncu" not in flex
    calls = (fake_ncu.parent / "ncu_calls.txt").read_text().splitlines()
    assert len(calls) == 2  # one child per variant that ran
    assert all(f"--nvtx-include {ncu.NVTX_RANGE}/" in c and "attnprof.harness.ncu_child" in c for c in calls)


def test_the_child_command_profiles_only_the_nvtx_range(tmp_path):
    command = ncu.ncu_command("ncu", tmp_path / "r", ["python", "-m", "attnprof.harness.ncu_child", "spec.json"])
    joined = " ".join(command)
    assert f"--nvtx --nvtx-include {ncu.NVTX_RANGE}/" in joined
    assert "--clock-control none" in joined and "--section Occupancy" in joined
    assert command[-4:] == ["python", "-m", "attnprof.harness.ncu_child", "spec.json"]


def test_a_failing_ncu_is_recorded_as_the_variants_reason(fake_ncu):
    (fake_ncu / "ncu").write_text("#!/bin/sh\necho 'ERR_NVGPUCTRPERM: no permission' >&2\nexit 1\n")
    results = results_with("sdpa-cudnn")
    ncu.add_ncu(results, Config())
    assert "ERR_NVGPUCTRPERM" in results["variants"][0]["ncu"]["reason"]


@pytest.mark.cuda
def test_on_a_gpu_with_ncu_cudnn_gets_an_achieved_occupancy():
    if ncu.find_ncu() is None:
        pytest.skip("ncu is not on PATH")
    from attnprof import api

    results = api.run(["sdpa-cudnn"], batch=2, heads=4, seq=512, head_dim=64, device="cuda", ncu=True,
                      out=Path(pytest.importorskip("tempfile").mkdtemp()))
    kernels = results["variants"][0]["ncu"]["kernels"]
    assert any(k["achieved_occupancy_pct"] for k in kernels)


FAKE_MODULE = '''
class Metric:
    def __init__(self, value):
        self.value = value

    def as_double(self):
        return float(self.value)

    def as_string(self):
        return str(self.value)


class Action:
    def name(self):
        return "flash_attn_triton_fwd"

    def metric_names(self):
        return ("sm__warps_active.avg.pct_of_peak_sustained_active", "launch__registers_per_thread")

    def metric_by_name(self, name):
        return Metric({"sm__warps_active.avg.pct_of_peak_sustained_active": 15.6,
                       "launch__registers_per_thread": 168}[name])


class Range:
    def num_actions(self):
        return 1

    def action_by_idx(self, i):
        return Action()


class Context:
    def num_ranges(self):
        return 1

    def range_by_idx(self, i):
        return Range()


def load_report(path):
    return Context()
'''


def test_ncus_python_module_is_read_before_its_csv(fake_ncu, monkeypatch):
    extras = fake_ncu / "extras" / "python"
    extras.mkdir(parents=True)
    (extras / "ncu_report.py").write_text(FAKE_MODULE)
    monkeypatch.delitem(sys.modules, "ncu_report", raising=False)
    monkeypatch.setattr(sys, "path", list(sys.path))
    results = results_with("triton")
    ncu.add_ncu(results, Config())
    (kernel,) = results["variants"][0]["ncu"]["kernels"]  # the CSV fixture has two kernels, the module one
    assert (kernel["name"], kernel["achieved_occupancy_pct"], kernel["registers_per_thread"]) == (
        "flash_attn_triton_fwd", 15.6, 168.0)


# Recorded on the H200 (ncu 2025.3.1, torch 2.11, cuDNN 9.19): `ncu --import R --csv --page raw` of cuDNN's
# fprop at B4 H16 S4096 D128 bf16 causal, with ncu's default display units (`auto`: `Kbyte/block 232.448`)
# and with `--print-units base` (what read_report asks for now).
RECORDED = {units: FIXTURES / f"h200_cudnn_fprop_raw_{units}.csv" for units in ("auto", "base")}


@pytest.mark.parametrize("units", ["auto", "base"])
def test_cudnns_dynamic_shared_memory_is_read_in_bytes_whatever_units_ncu_printed(units):
    (cudnn,) = [ncu.counters(k) for k in ncu.parse_raw_csv(RECORDED[units].read_text())]
    assert cudnn["dynamic_shared_bytes"] == pytest.approx(232448)  # not 232.448 "bytes" (shown as 0.2 KiB)
    assert cudnn["driver_shared_bytes"] == pytest.approx(1024) and cudnn["static_shared_bytes"] == 0
    assert cudnn["shared_bytes_per_block"] == pytest.approx(233472)
    assert cudnn["shared_per_sm_bytes"] == pytest.approx(233472)  # the whole SM: one block fits
    assert cudnn["blocks_per_sm"]["shared memory"] == 1 and cudnn["registers_per_sm"] == 65536


def test_sizes_scale_by_their_unit_and_other_values_stay_as_they_are():
    assert ncu.in_bytes(232.448, "Kbyte/block") == pytest.approx(232448)
    assert ncu.in_bytes(1.5, "Mbyte") == pytest.approx(1.5e6)
    assert ncu.in_bytes(18.75, "%") == 18.75 and ncu.in_bytes(168.0, "register/thread") == 168.0
    assert ncu.in_bytes("n/a", "Kbyte") == "n/a"


def test_the_csv_export_asks_ncu_for_base_units(fake_ncu, monkeypatch):
    seen = []
    monkeypatch.setattr(ncu, "read_with_module", lambda report, exe: None)  # no ncu_report module there
    real_run = ncu.subprocess.run
    monkeypatch.setattr(ncu.subprocess, "run", lambda cmd, **kw: seen.append(cmd) or real_run(cmd, **kw))
    ncu.read_report(fake_ncu / "r.ncu-rep", str(fake_ncu / "ncu"))
    assert seen and seen[0][-2:] == ["--print-units", "base"]
