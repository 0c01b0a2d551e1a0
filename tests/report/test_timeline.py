"""The timeline strip: one call's GPU activities on the time axis, coloured by kind, phases on their rows,
names escaped; in the HTML report of a trace."""

from __future__ import annotations

import re

from attnprof.analysis.attribution import analyze_trace
from attnprof.report import timeline
from attnprof.trace.reader import load
from support import CPU, H200, h200_trace


def test_naive_draws_its_seven_activities_with_the_copy_in_red():
    svg = timeline.strip(analyze_trace(load(h200_trace("naive"))))
    assert svg.count("<title>") == 7 and "forward" in svg and "backward" not in svg
    copy = svg.split("Memcpy DtoD")[0].rsplit("<rect", 1)[1]
    assert timeline.COLOURS["copy/memset"] in copy


def test_a_fused_kernel_is_one_green_bar():
    svg = timeline.strip(analyze_trace(load(h200_trace("sdpa-flash"))))
    assert svg.count("<title>") == 1 and timeline.COLOURS["fused attention"] in svg


def test_a_cpu_trace_has_no_strip_and_says_why():
    items, notes = timeline.from_traces([("naive", CPU / "train_1_2_64_32_bf16_naive.json.gz")])
    assert items == [] and "no GPU activities" in notes[0]


def test_variants_share_one_time_axis_and_a_step_shows_its_backward():
    items, _ = timeline.from_traces([("flash", H200 / "train_4_16_1024_64_bf16_sdpa-flash.json.gz"),
                                     ("naive", H200 / "train_4_16_1024_64_bf16_naive.json.gz")])
    flash, naive = (item["svg"] for item in items)
    assert "backward" in flash and "backward" in naive
    def busy(svg: str) -> float:  # the bars' widths, not the rows' grey background
        return sum(float(w) for w in re.findall(r'width="([\d.]+)" height="22" fill="#(?!f4f4f4)', svg))

    assert busy(flash) < 0.3 * busy(naive)  # on naive's axis flash's six kernels take a fifth of the length


def test_names_from_the_trace_are_escaped(tmp_path):
    import gzip
    import json

    with gzip.open(h200_trace("sdpa-flash")) as f:
        doc = json.load(f)
    for e in doc["traceEvents"]:
        if e.get("cat") == "kernel":
            e["name"] = 'evil&"/></svg>'  # short naming keeps evil&"/>: a quote, an ampersand, a tag's end
    path = tmp_path / "evil.json"
    path.write_text(json.dumps(doc))
    [item], _ = timeline.from_traces([("evil", path)])
    svg = item["svg"]
    assert "evil&amp;&#34;/&gt;" in svg and svg.count("</svg>") == 1 and '"/>' not in svg.split("evil")[1][:9]
