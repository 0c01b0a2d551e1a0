"""Terminal tables: drawn where they fit, a long form where they would be cut (a pipe is 80 columns), a
verdict line after the run table, and no number in scientific notation in any of them."""

from __future__ import annotations

import copy
import json

from rich.console import Console

from attnprof.report.distributed import render_cp_run
from attnprof.report.layout import natural_width, print_table
from attnprof.report.terminal import render_diff, render_run, render_sweep

HEADERS = ("variant", "status", "device time", "latency/call", "host/call", "peak mem", "max err")
ROWS = [("sdpa-efficient", "[green]ok[/]", "1.07 (1.07–1.07) ms", "1.16 (1.16–1.17) ms", "291.6 µs", "528 MiB",
         "1.6e-02")]


def shown(draw, width: int = 80) -> str:
    out = Console(record=True, width=width, highlight=False)
    draw(out)
    return out.export_text()


def test_a_table_too_wide_for_the_terminal_becomes_one_block_per_row_instead_of_cut_cells():
    assert natural_width(HEADERS, ROWS) > 80
    text = shown(lambda out: print_table(out, "title", HEADERS, ROWS))
    assert "…" not in text and max(map(len, text.splitlines())) <= 80
    assert "sdpa-efficient: status: ok; device time: 1.07 (1.07–1.07) ms" in " ".join(text.split())


def test_piped_output_keeps_each_long_form_row_on_one_line(tmp_path):
    from attnprof.report.terminal import console

    with open(tmp_path / "piped.txt", "w", encoding="utf-8") as file:
        print_table(console(file), None, HEADERS, ROWS)
    lines = (tmp_path / "piped.txt").read_text(encoding="utf-8").splitlines()
    assert len(lines) == len(ROWS) and lines[0].startswith("sdpa-efficient: ") and lines[0].endswith("1.6e-02")


def test_a_table_that_fits_is_drawn_as_a_table():
    text = shown(lambda out: print_table(out, None, HEADERS[:3], [r[:3] for r in ROWS]))
    assert "┃ variant" in text and "sdpa-efficient" in text


def run_results(dtype: str = "bf16") -> dict:
    def variant(name, median, err, roofline=None):
        return {"name": name, "status": "ok", "device_us": {"median": median, "p25": median * 0.99,
                                                            "p75": median * 1.01}, "max_abs_error": err,
                "per_forward": {"gpu_ops": 2}, "findings": [], "roofline": roofline}

    return {"device": {"type": "cuda", "name": "H200", "torch": "2.11"},
            "problem": {"batch": 8, "heads": 16, "seq": 1024, "head_dim": 64, "dtype": dtype, "mask": "causal"},
            "variants": [variant("naive", 1070.0, 0.016), variant("wrong", 10.0, 12.5),
                         variant("sdpa-cudnn", 59.6, 0.0087, {"bound": "compute", "pct_of_matmul": 14.2}),
                         variant("sdpa-math", 2600.0, 0.0078),
                         {"name": "hub", "status": "unsupported", "reason": "no network"}]}


def test_after_the_table_one_line_names_the_fastest_correct_variant_its_speed_up_and_its_roof():
    text = " ".join(shown(lambda out: render_run(run_results(), out), width=200).split())
    assert "fastest: sdpa-cudnn, 59.6 (59–60.2) µs, 43.6x the speed of sdpa-math (the slowest correct variant, " \
           "beyond both spreads); 14.2% of the measured matmul ceiling, compute-bound" in text
    assert "fastest: wrong" not in text  # 12.5 off the reference is not correct


def test_the_fastest_is_not_named_when_its_spread_overlaps_the_next_ones():
    """naive 7.71 (3.64–11.7) ms beside sdpa-flash's 8.43 (8.33–8.87) ms: a re-run may name the other."""
    results = run_results()
    results["variants"] = [
        {"name": "naive", "status": "ok", "device_us": {"median": 7710.0, "p25": 3640.0, "p75": 11700.0},
         "max_abs_error": 0.01, "findings": []},
        {"name": "sdpa-flash", "status": "ok", "device_us": {"median": 8430.0, "p25": 8330.0, "p75": 8870.0},
         "max_abs_error": 0.01, "findings": []}]
    text = " ".join(shown(lambda out: render_run(results, out), width=200).split())
    assert "fastest: none beyond the noise: naive 7.71 (3.64–11.7) ms, sdpa-flash 8.43 (8.33–8.87) ms are within " \
           "the noise of each other" in text
    assert "fastest: naive," not in text and "the speed of" not in text


def test_no_table_writes_a_number_in_scientific_notation():
    results = run_results()
    for v in results["variants"][:4]:
        v["device_us"] = {"median": 952.0, "p25": 425.0, "p75": 999.7}
        v["latency_us"] = {"median": 425.0, "p25": 400.0, "p75": 65300.0}
    run = shown(lambda out: render_run(results, out), width=200)
    line = {"variant": "naive", "status": "ok", "point": results["problem"], "device_us": {"median": 1e7},
            "roofline": {"pct_of_matmul": 1e-6, "matmul_ceiling_tflops": 1e-5}}
    sweep = shown(lambda out: render_sweep([line], {}, out), width=200)
    pa = {"gpu_ops": 1e6, "gpu_time_us": 127716.0, "cpu_time_us": 1.5e7}
    diff = shown(lambda out: render_diff({"a": pa, "b": pa, "removed": [{"name": "k", "kind": "kernel",
                                          "per_forward": 2e6}], "added": [], "findings_removed": [],
                                          "findings_added": []}, "a", "b", out), width=200)
    for text in (run, sweep, diff):
        assert "e+" not in text, text
    assert "127.72 ms" in diff and " us" not in diff


def test_the_cp_case_table_writes_no_exponent_either():
    case = {"name": "sdpa-cudnn", "mode": "fwd", "status": "ok", "step_us": {"median": 952.0, "p25": 950.0,
                                                                             "p75": 1000.4}}
    results = {"problem": {"batch": 1, "heads": 16, "seq": 32768, "head_dim": 128, "dtype": "bf16"},
               "config": {"world_size": 2, "backend": "nccl", "options": {"rotate": "allgather"}},
               "variants": [copy.deepcopy(case)]}
    text = shown(lambda out: render_cp_run(results, out))
    assert "e+" not in text and "952 (950–1000) µs" in text, json.dumps(text)


def test_a_machine_loaded_beyond_its_cores_while_timing_gets_one_warning(capsys):
    results = run_results()
    shown(lambda out: render_run({**results, "load": {"max_load_average": 5.5, "cores": 2}}, out), width=200)
    err = capsys.readouterr().err
    assert err.count("\n") == 1 and "load average 5.5 on 2 cores" in err
    shown(lambda out: render_run({**results, "load": {"max_load_average": 0.5, "cores": 2}}, out), width=200)
    assert capsys.readouterr().err == ""


def test_a_bf16_run_on_a_cpu_without_native_bf16_says_why_its_op_counts_are_higher():
    results = run_results()
    results["device"] = {"type": "cpu", "name": "x86_64", "torch": "2.13", "native_bf16": False}
    text = " ".join(shown(lambda out: render_run(results, out), width=200).split())
    assert "no native bf16" in text and "--dtype fp32" in text
    results["device"]["native_bf16"] = True
    assert "no native bf16" not in shown(lambda out: render_run(results, out), width=200)


def test_a_sweep_row_names_its_fastest_variant_only_beyond_both_spreads():
    point = {"batch": 1, "heads": 2, "seq": 64, "head_dim": 32, "dtype": "fp32", "mask": "causal"}

    def line(variant, median, lo, hi, seq=64):
        return {"variant": variant, "status": "ok", "point": {**point, "seq": seq},
                "device_us": {"median": median, "p25": lo, "p75": hi, "method": "cpu-wall"}}

    lines = [line("naive", 100.0, 60.0, 140.0), line("sdpa-math", 110.0, 105.0, 115.0),
             line("naive", 400.0, 390.0, 410.0, 128), line("sdpa-math", 200.0, 195.0, 205.0, 128)]
    text = shown(lambda out: render_sweep(lines, {}, out), width=250)
    s64 = next(x for x in text.splitlines() if "S=64 " in x)
    s128 = next(x for x in text.splitlines() if "S=128 " in x)
    assert "within the noise: naive, sdpa-math" in s64
    assert s128.rstrip(" │").endswith("sdpa-math")


def test_a_run_the_profiler_slowed_291x_is_called_unusable_and_names_no_fastest():
    """`--threads 2` on a busy 2-core machine: 291x profiler inflation, a "48.7x the speed" that was the load's."""
    results = run_results()
    results["device"] = {"type": "cpu", "name": "x86_64", "torch": "2.13", "threads": 2}
    results["load"] = {"max_load_average": 7.9, "cores": 2}
    results["variants"][0]["profiler"] = {"inflation": 291.0, "costs_trusted": False}
    text = " ".join(shown(lambda out: render_run(results, out), width=200).split())
    assert "unusable run: the profiler slowed naive's host time 291x" in text
    assert "load average 7.9 on 2 cores" in text and "with fewer --threads than 2" in text
    assert "fastest:" not in text and "the speed of" not in text


def test_fp16_on_the_cpu_says_why_it_counts_more_aten_ops():
    results = run_results("fp16")
    results["device"] = {"type": "cpu", "name": "x86_64", "torch": "2.13"}
    text = " ".join(shown(lambda out: render_run(results, out), width=200).split())
    assert "fp16 on the CPU: torch has no fp16 arithmetic here" in text and "--dtype fp32" in text


def test_a_cpu_cp_run_names_no_rotation_it_did_not_run():
    case = {"name": "sdpa-flash", "mode": "fwd", "status": "ok", "sharding": "shard-local (no context "
            "parallelism: each rank attends within its own shard)", "step_us": None}
    results = {"problem": {"batch": 1, "heads": 2, "seq": 64, "head_dim": 32, "dtype": "fp32"},
               "config": {"world_size": 2, "backend": "gloo", "options": {"rotate": "allgather"}},
               "variants": [case]}
    text = " ".join(shown(lambda out: render_cp_run(results, out), width=200).split())
    assert "allgather" not in text and "shard-local (no context parallelism" in text
    ring = {**case, "sharding": "ring attention, allgather rotation, load-balanced"}
    text = " ".join(shown(lambda out: render_cp_run({**results, "variants": [ring]}, out), width=200).split())
    assert "allgather rotation" in text
