"""The --ncu view: a row per profiled kernel, a variant ncu could not profile says why, and no ncu is
one line on stderr."""

from __future__ import annotations

from pathlib import Path

from rich.console import Console

from attnprof.harness.ncu import counters, parse_raw_csv
from attnprof.report.ncu import render_ncu

RAW = Path(__file__).resolve().parents[1] / "fixtures" / "ncu" / "raw_page.csv"


def rendered(results: dict, table: bool = True) -> str:
    console = Console(record=True, width=240)
    render_ncu(results, console, table=table)
    return console.export_text()


def test_each_kernel_shows_achieved_against_theoretical_occupancy_and_its_limiter():
    kernels = [counters(k) for k in parse_raw_csv(RAW.read_text())]
    results = {"ncu": {"available": True}, "variants": [{"name": "sdpa-cudnn", "ncu": {"kernels": kernels[:1]}},
                                                        {"name": "triton", "ncu": {"kernels": kernels[1:]}}]}
    text = rendered(results)
    assert "14.1% / 18.8%" in text and "registers, shared memory" in text
    assert "flash_attn_triton_fwd" in text and "latency" in text


def test_a_variant_ncu_failed_on_shows_the_reason():
    results = {"ncu": {"available": True}, "variants": [{"name": "flex", "ncu": {"reason": "ncu exited 1: boom"}}]}
    assert "not profiled: ncu exited 1: boom" in rendered(results)


def test_without_ncu_one_line_goes_to_stderr_and_no_table_is_drawn(capsys):
    results = {"ncu": {"available": False, "reason": "--ncu: ncu (Nsight Compute) is not on PATH"}, "variants": []}
    assert rendered(results).strip() == ""
    assert capsys.readouterr().err.strip() == "attnprof: --ncu: ncu (Nsight Compute) is not on PATH"


def test_with_json_output_the_table_is_left_to_the_json():
    results = {"ncu": {"available": True}, "variants": [{"name": "x", "ncu": {"kernels": []}}]}
    assert rendered(results, table=False).strip() == ""


def test_the_recorded_h200_cudnn_kernel_shows_its_dynamic_shared_memory_and_why_one_block_fits():
    recorded = RAW.with_name("h200_cudnn_fprop_raw_auto.csv")
    kernels = [counters(k) for k in parse_raw_csv(recorded.read_text())]
    text = " ".join(rendered({"ncu": {"available": True},
                              "variants": [{"name": "sdpa-cudnn", "ncu": {"kernels": kernels}}]}).split())
    assert "228.0 KiB" in text and "0.2 KiB" not in text
    assert "1 block/SM (12 of 64 warps)" in text
    assert "232,448 B dynamic + 1,024 B driver) of 233,472 B per SM" in text
    assert "registers 168 x 384 threads = 64,512 a block of 65,536 per SM" in text
