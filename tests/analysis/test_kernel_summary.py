"""The kernel table of the analysis dict: its rows as the full table's first, the rest summed so that the
times add up, and the rows it picks by NumPy's sums the ones a sort of the shown sums picks."""

from __future__ import annotations

import numpy as np
import pytest

import attnprof
from attnprof.analysis import kernel_summary as kt
from attnprof.analysis.attribution import analyze_trace
from attnprof.trace.reader import load
from support import H200


@pytest.mark.parametrize("listed", [5, 33, 34, 500])
def test_a_cut_table_is_the_full_one_s_first_rows_and_the_rest_adds_up(listed, monkeypatch):
    path = H200 / "llama_fwd_eager.json.gz"  # 34 distinct GPU activities
    full = kt.kernel_table(analyze_trace(load(path)))
    monkeypatch.setattr(kt, "KERNELS_LISTED", listed)
    a = analyze_trace(load(path))
    rows, rest = kt.kernel_table(a), kt.kernels_not_listed(a)
    assert rows == full[:listed] and len(full) == 34
    if listed >= len(full):
        assert rest is None
        return
    left = full[listed:]
    assert rest["distinct"] == len(left)
    assert rest["total_us"] == pytest.approx(sum(r["total_us"] for r in left), abs=1e-3 * len(left))
    assert rest["per_forward"] == pytest.approx(sum(r["per_forward"] for r in left), abs=1e-3 * len(left))


def test_the_views_say_what_a_cut_table_leaves_out(monkeypatch, capsys):
    monkeypatch.setattr(kt, "KERNELS_LISTED", 5)
    d = attnprof.analyze(H200 / "llama_fwd_eager.json.gz")
    assert len(d["kernels"]) == 5 and d["kernels_not_listed"]["distinct"] == 29
    from attnprof.report.html import analysis_page
    from attnprof.report.terminal import console, render_analysis

    render_analysis(d, console())
    for text in (capsys.readouterr().out, d._repr_html_(), analysis_page(d, "t.json")):
        assert "29 more distinct GPU activities" in text


def test_picked_by_numpy_sums_as_a_sort_of_the_shown_sums_picks():
    rng = np.random.default_rng(3)
    for _ in range(60):
        sizes = rng.integers(1, 6, rng.integers(1, 120))
        durs = rng.choice([0.0005, 0.001, 0.0015, 0.1, 1 / 3, 2.0004, 2.0006], sizes.sum()) * rng.integers(1, 4)
        bounds = np.concatenate(([0], np.cumsum(sizes)))
        per = int(rng.integers(1, 7))
        among = np.flatnonzero(rng.random(len(sizes)) < 0.7) if rng.random() < 0.5 else None
        shown = [round(sum(durs[i:j].tolist()) / per, 3) for i, j in zip(bounds[:-1], bounds[1:], strict=True)]
        groups = range(len(shown)) if among is None else among.tolist()
        expected = sorted(groups, key=lambda g: -shown[g])[:40]
        assert kt.costliest(durs, bounds, 40, per, among) == expected
