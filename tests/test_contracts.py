"""The result contracts (contracts.py): each record's payload has its schema id first and its keys in the
order the result files always had, and the readers read what the writers wrote."""

from __future__ import annotations

import json

from attnprof import contracts
from attnprof.options import AXES, RunOptions
from attnprof.pipeline.one_trace import analyze_path
from support import h200_trace


def test_a_payload_puts_its_schema_first_then_the_fields_in_order():
    run = contracts.RunResult(device={"type": "cpu"}, problem={"seq": 64}, config={}).to_payload()
    assert list(run) == ["schema", "device", "problem", "config", "variants"] and run["schema"] == "attnprof.run/1"
    cp = contracts.CPRunResult(device={}, problem={}, config={}, run_dir="x").to_payload()
    assert list(cp) == ["schema", "device", "problem", "config", "variants", "run_dir"]
    assert cp["schema"] == contracts.CP_RUN


def test_an_empty_optional_section_is_left_out_and_a_given_one_kept_in_place():
    fields = dict(source="t", region="r", forwards=1, unit="forward", per_forward={}, phases={}, kernels=[])
    assert "kernels_not_listed" not in contracts.AnalysisResult(**fields).to_payload()
    given = list(contracts.AnalysisResult(**fields, kernels_not_listed={"n": 2}).to_payload())
    assert given.index("kernels_not_listed") == given.index("kernels") + 1


def test_the_analysis_payload_is_the_analysis_dict():
    d = analyze_path(h200_trace("naive"))
    assert d["schema"] == contracts.ANALYSIS
    assert list(d)[:8] == ["schema", "source", "region", "forwards", "unit", "per_forward", "phases", "kernels"]


def test_every_schema_id_is_distinct_and_versioned():
    ids = [contracts.RUN, contracts.SWEEP, contracts.CP_RUN, contracts.ANALYSIS, contracts.RANKS, contracts.DIFF,
           contracts.LINT, contracts.HISTORY, contracts.COMPARE]
    assert len(set(ids)) == 9 and all(i.startswith("attnprof.") and i.endswith("/1") for i in ids)


def test_the_grid_walks_every_axis_once_the_sequence_length_fastest():
    assert sorted(contracts.GRID_ORDER) == sorted(AXES) and contracts.GRID_ORDER[-1] == "seq"
    spec = contracts.SweepSpec({"seq": (64, 128), "dtype": ("bf16", "fp16"), "kv_heads": (1, 2)},
                               RunOptions(device="cpu", heads=2))
    points = spec.points()
    assert [(p.dtype, p.kv_heads, p.seq) for p in points[:3]] == [("bf16", 1, 64), ("bf16", 1, 128), ("bf16", 2, 64)]
    assert len(points) == 8


def test_a_sweep_spec_round_trips_and_its_lines_read_back(tmp_path):
    spec = contracts.SweepSpec({"seq": (64, 128), "mask": ("causal", "window=16")},
                               RunOptions(device="cpu", variants=("naive",)))
    again = contracts.SweepSpec.from_dict(json.loads(json.dumps(spec.as_dict())))
    assert again.points() == spec.points() and len(spec.points()) == 4
    (tmp_path / contracts.SWEEP_SPEC).write_text(json.dumps({"schema": contracts.SWEEP, "spec": spec.as_dict()}))
    assert contracts.load_spec(tmp_path).points() == spec.points()
    lines = tmp_path / contracts.SWEEP_LINES
    lines.write_text('{"key": "a", "variant": "v", "n": 1}\n{"key": "a", "variant": "v", "n": 2}\n{"key": "b", "va')
    assert [x["n"] for x in contracts.read_lines(lines)] == [2]  # the last complete line per (point, variant)


def test_a_sweep_line_has_the_point_then_the_measured_fields_then_where_they_are():
    line = contracts.SweepLine(key="k", point={}, variant="v", status="ok", run_dir="points/x").to_payload()
    assert list(line)[:4] == ["schema", "key", "point", "variant"] and list(line)[-2:] == ["run_dir", "trace"]
    assert list(line)[4:-2] == list(contracts.MEASURED) and line["schema"] == contracts.SWEEP
