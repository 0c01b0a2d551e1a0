"""The views of several ranks: the terminal tables and the HTML page with the per-rank timeline strip,
on SYNTHETIC rank traces (tests/synthetic_ranks.py)."""

from __future__ import annotations

import io
import re

from rich.console import Console

from attnprof.pipeline.ranks import analyze_ranks
from attnprof.report.distributed import ranks_page, render_ranks, strip_svg, write_ranks_report
from synthetic_ranks import write_ranks


def test_the_terminal_view_lists_every_rank_and_the_findings(tmp_path):
    result = analyze_ranks(write_ranks(tmp_path, 2, extra_us=(0.0, 400.0)))
    out = io.StringIO()
    render_ranks(result, Console(file=out, width=200))
    text = out.getvalue()
    assert "slowest rank 1" in text and "cp-imbalance" in text and "exposed-comm" in text
    assert re.search(r"│ 1\s+│ 2\s+│", text)  # rank 1, 2 NCCL kernels per step


def test_the_strip_draws_one_row_per_rank_on_one_time_scale():
    ranks = [{"rank": 0, "span_us": 100.0, "timeline": "CCXX"}, {"rank": 1, "span_us": 50.0, "timeline": "OO.."}]
    svg = strip_svg(ranks, width=470)  # 400 px of bars after the 70 px label column
    assert svg.count("rank 0") == 1 and svg.count("rank 1") == 1
    assert 'x="70.0" y="20" width="200.0"' in svg  # rank 0's two C slices merged into one rect
    assert 'x="70.0" y="42" width="100.0"' in svg  # rank 1 spans half the time: half the width
    assert "exposed communication" in svg


def test_the_html_page_holds_the_rank_table_and_the_timeline_and_escapes_names(tmp_path):
    paths = write_ranks(tmp_path, 2)
    result = analyze_ranks(paths)
    result["ranks"][0]["region"] = "<script>"
    page = ranks_page(result)
    assert "Per rank" in page and "<svg" in page and "Timeline" in page
    assert "<script>" not in page
    out = write_ranks_report(result, tmp_path / "r.html")
    assert out.read_text() == page


def test_the_column_of_what_is_neither_attention_nor_nccl_says_merge_only_in_a_ring(tmp_path):
    from support import corpus_trace

    ring = analyze_ranks(write_ranks(tmp_path, 2))  # flash kernels with SendRecv and AllGather beside them
    assert "merge" in ranks_page(ring) and "merging of partial results" in ranks_page(ring)
    paths = [corpus_trace("hta/sampled/rank-0.json.gz"), corpus_trace("hta/sampled/rank-1.json.gz")]
    sampled = analyze_ranks(paths)  # 2 ranks of a 128-rank fp8 encoder/decoder job: SendRecv, no attention
    out = io.StringIO()
    render_ranks(sampled, Console(file=out, width=250))
    header = next(line for line in out.getvalue().splitlines() if "NCCL kernels" in line)
    assert " other " in header and "merge" not in header
    assert not [f for f in sampled["findings"] if f["id"].startswith("cp-")]
