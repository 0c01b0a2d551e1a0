"""The reader's columns (trace.columns) hold exactly what the events hold, aligned with them; and the
synthetic big traces that benchmarks/big_trace.py makes analyse as their template says."""

from __future__ import annotations

import subprocess
import sys
from pathlib import Path

from attnprof.analysis.attribution import analyze_trace
from attnprof.trace.reader import load
from support import H200

BIG_TRACE = Path(__file__).parents[2] / "benchmarks" / "big_trace.py"


def test_the_columns_are_the_events_fields_with_each_value_coded_once():
    t = load(H200 / "train_4_16_1024_64_bf16_naive.json.gz")
    c = t.columns
    assert len(c) == len(t.events) > 100
    assert c.ts.tolist() == [e.ts for e in t.events] and c.dur.tolist() == [e.dur for e in t.events]
    assert [c.names[i] for i in c.name.tolist()] == [e.name for e in t.events]
    assert [c.cats[i] for i in c.cat.tolist()] == [e.cat for e in t.events]
    assert [c.threads[i] for i in c.thread.tolist()] == [(e.pid, e.tid) for e in t.events]
    assert len(set(c.names)) == len(c.names) and len(set(c.threads)) == len(c.threads)


def test_a_made_trace_repeats_its_templates_step_as_layers(tmp_path):
    out = tmp_path / "made.json"
    subprocess.run([sys.executable, str(BIG_TRACE), "--make", str(out), "--mb", "0.4", "--steps", "2"],
                   check=True, capture_output=True, timeout=120)
    template = analyze_trace(load(H200 / "train_4_16_1024_64_bf16_naive.json.gz"), "ProfilerStep#*")
    a = analyze_trace(load(out), "train_step")
    per_step = [len(f.activities) for f in a.forwards]
    assert len(per_step) == 2 and per_step[0] == per_step[1] > 0
    assert per_step[0] % len(template.forwards[1].activities) == 0  # whole copies of the middle step
