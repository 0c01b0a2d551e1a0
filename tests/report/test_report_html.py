"""report.html: one self-contained page per run, sweep or trace; trace text is escaped; plots
carry the fitted scaling exponents."""

from __future__ import annotations

import gzip
import json
import re
from pathlib import Path

import pytest

import attnprof
from attnprof.report import html, plots
from support import assert_one_line_error, h200_trace
from support import attnprof as cli

EVIL = "<script>alert(1)</script>"


def evil_trace(tmp_path: Path) -> Path:
    """The H200 naive trace with its softmax kernel renamed to carry a script tag."""
    trace = json.loads(gzip.decompress(h200_trace("naive").read_bytes()))
    for e in trace["traceEvents"]:
        if e.get("cat") == "kernel" and "softmax" in e.get("name", ""):
            e["name"] = f"softmax_kernel{EVIL}<float, 10>"
    path = tmp_path / "traces" / "evil.json.gz"
    path.parent.mkdir()
    path.write_bytes(gzip.compress(json.dumps(trace).encode()))
    return path


def test_kernel_names_from_a_trace_render_escaped(tmp_path):
    page = tmp_path / "out" / "page.html"
    page.parent.mkdir()
    proc = cli("analyze", str(evil_trace(tmp_path)), "--html", str(page))
    assert proc.returncode == 0, proc.stderr
    text = page.read_text()
    assert EVIL not in text and "<script" not in text
    assert "softmax_kernel&lt;script&gt;alert(1)&lt;/script&gt;&lt;float, 10&gt;" in text
    assert 'href="../traces/evil.json.gz"' in text  # relative to the page, so the folder can move
    assert '<table id="glance"' in text


def sweep_folder(tmp_path: Path, seqs=(512, 1024, 2048, 4096)) -> Path:
    """A sweep folder made by hand: time ~S^2 for both, memory ~S^2 for naive and ~S for flash."""
    spec = {"batch": [4], "heads": [16], "seq": list(seqs), "head_dim": [64], "dtype": ["bf16"],
            "variants": ["naive", "sdpa-flash"], "device": "cuda"}
    device = {"type": "cuda", "name": "Test GPU", "torch": "2"}
    meta = {"schema": "attnprof.sweep/1", "spec": spec, "device": device}
    (tmp_path / "sweep.json").write_text(json.dumps(meta))
    lines = []
    for s in seqs:
        point = {"batch": 4, "heads": 16, "seq": s, "head_dim": 64, "dtype": "bf16", "causal": True}
        for name, t, mem in (("naive", 1e-4 * s**2, 64 * s**2), ("sdpa-flash", 1e-5 * s**2, 4096 * s)):
            lines.append({"key": f"4_16_{s}_64_bf16", "point": point, "variant": name, "status": "ok",
                          "device_us": {"median": t, "p25": t, "p75": t, "method": "cuda-graph"},
                          "peak_memory_bytes": mem, "roofline": {"tflops": 8 * s**2 / t / 1e6},
                          "run_dir": None, "trace": None})
    lines.append({**lines[-2], "status": "oom", "reason": "CUDA out of memory", "device_us": None,
                  "roofline": None, "peak_memory_bytes": None})
    (tmp_path / "results.jsonl").write_text("".join(json.dumps(x) + "\n" for x in lines))
    return tmp_path


def test_scaling_exponents_are_fitted_in_log_log(tmp_path):
    lines = [json.loads(x) for x in (sweep_folder(tmp_path) / "results.jsonl").read_text().splitlines()]
    fits = plots.scaling(lines)["B=4 H=16 D=64 bf16"]
    assert {k: fits["naive"][k]["k"] for k in ("time", "memory")} == {"time": 2.0, "memory": 2.0}
    assert {k: fits["sdpa-flash"][k]["k"] for k in ("time", "memory")} == {"time": 2.0, "memory": 1.0}
    assert fits["naive"]["time"]["r2"] == 1.0 and fits["naive"]["time"]["meaningful"]
    assert plots.fit([1, 2], [None, 3]) is None and plots.fit([2, 2], [1, 4]) is None


def test_a_fit_without_three_points_a_good_r2_or_stable_points_is_not_meaningful():
    two = plots.fit([512, 1024], [1.0, 4.0])
    assert two["k"] == 2.0 and not two["meaningful"] and "at least 3" in two["why"]
    scattered = plots.fit([64, 128, 256, 512], [110.0, 24_000.0, 16_000.0, 200.0])  # the CPU sweep
    assert not scattered["meaningful"] and "R²" in scattered["why"]
    unstable = plots.fit([512, 1024, 2048], [1.0, 4.0, 16.0], unstable=1)
    assert unstable["r2"] == 1.0 and not unstable["meaningful"] and "unstable" in unstable["why"]


def test_sweep_report_has_the_table_the_three_plots_and_the_exponents(tmp_path):
    text = html.write_report(sweep_folder(tmp_path)).read_text()
    svgs = re.findall(r"<svg.*?</svg>", text, flags=re.S)
    assert len(svgs) == 3  # device time, TFLOP/s, peak memory
    assert "naive (~S^2)" in svgs[0] and "sdpa-flash (~S^1)" in svgs[2]
    assert '<td class="oom" data-label="status">oom</td>' in text and "Test GPU" in text
    ids = re.findall(r'id="([^"]+)"', "".join(svgs))
    assert len(ids) == len(set(ids)), "element ids repeat across the inlined plots"


def test_run_report_links_traces_and_lists_kernels_and_findings(tmp_path):
    results = attnprof.run(["naive", "sdpa-cudnn"], device="cpu", batch=1, heads=2, seq=64, head_dim=32,
                           repeats=3, out=tmp_path)
    run_dir = Path(results["run_dir"])
    text = html.write_report(run_dir).read_text()
    naive = results["variants"][0]
    assert f'href="{naive["trace"]}"' in text and (run_dir / naive["trace"]).is_file()
    assert "hidden-copy" in text  # naive's masked_fill copy, from the findings
    assert "CUDA only" in text  # why cuDNN did not run
    assert "<svg" in text and "Ceilings measured on this device" in text
    # a CPU report in CPU words, and without the columns no CPU record fills
    assert "Time per call (CPU, wall clock)" in text and "wall-clock time per call" in text
    assert "GPU's busy time" not in text and "<th>latency/call</th>" not in text and "<th>time/call</th>" in text


def test_template_autoescapes_every_field():
    page = html.run_page({"device": {"type": "cpu", "name": "<b>cpu</b>", "torch": "2"},
                          "problem": {"batch": 1, "heads": 1, "seq": 1, "head_dim": 1, "dtype": "bf16"},
                          "variants": [{"name": "<i>v</i>", "status": "error", "reason": "<img src=x>"}]})
    assert "<b>cpu" not in page and "<i>v" not in page and "<img" not in page
    assert "&lt;img src=x&gt;" in page


def test_report_of_a_folder_that_is_neither_run_nor_sweep(tmp_path):
    assert_one_line_error(cli("report", str(tmp_path)), str(tmp_path))


@pytest.mark.cuda
def test_gpu_run_report_has_kernel_tables(tmp_path):
    results = attnprof.run(["sdpa-flash", "sdpa-auto"], device="cuda", batch=2, heads=4, seq=256, head_dim=64,
                           repeats=5, out=tmp_path)
    text = html.write_report(results["run_dir"]).read_text()
    assert "flash" in text and "<details>" in text and "GPU activities launched per forward" in text


def test_a_table_of_many_columns_becomes_labelled_cards_in_a_narrow_window(tmp_path):
    """At 800 px the at-a-glance table (15 columns) would scroll sideways and squeeze its text column to
    one word a line: under 1100 px each row is a card whose cells carry their header."""
    from attnprof.report.page import render

    page = render("t", [], [{"id": "g", "title": "g", "tables": [
        {"id": "glance", "headers": tuple(f"h{i}" for i in range(8)), "rows": [[f"c{i}" for i in range(8)]]},
        {"headers": ("a", "b"), "rows": [["x", "y"]]}]}])
    assert '<table id="glance" class="wide">' in page and '<td data-label="h7">c7</td>' in page
    assert "<table>" in page  # a narrow table stays a table
    media = page[page.index("@media (max-width: 1100px)"):page.index("</style>")]
    assert "table.wide td::before { content: attr(data-label)" in media and "display: block" in media


def test_a_cpu_trace_page_shows_aten_ops_and_host_time_and_no_absolute_path(tmp_path):
    from support import cpu_trace

    page = tmp_path / "out" / "page.html"
    page.parent.mkdir()
    proc = cli("analyze", str(cpu_trace("sdpa-math").resolve()), "--html", str(page))
    assert proc.returncode == 0, proc.stderr
    text = page.read_text()
    assert "GPU ops/fwd" not in text and "GPU time/fwd" not in text
    assert "aten ops/fwd" in text and "host time/fwd" in text
    shown = re.sub(r'href="[^"]*"', "", text)  # a link climbs to the trace relative to the page; text never
    assert str(cpu_trace("sdpa-math").parent.resolve()) not in shown  # names this machine's folders


def test_a_run_page_embeds_no_absolute_path_and_plots_time_with_its_spread(tmp_path):
    results = attnprof.run(["naive", "sdpa-math"], device="cpu", batch=1, heads=2, seq=64, head_dim=32,
                           repeats=3, out=tmp_path)
    text = html.write_report(results["run_dir"]).read_text()
    for path in (str(tmp_path), str(Path.home()), str(Path.cwd())):
        assert path not in text
    assert "median and p25–p75" in text  # the time-per-call chart: a linear axis with error bars
    assert "<th>cost</th>" in text  # the findings table shows each cost as the terminal does
    for v in results["variants"]:
        r = v["roofline"]
        assert r["judged_against"] == ("matmul" if r["bound"] == "compute" else "copy")
