"""`run --target`: the user's module runs its own problem, so it is stated apart (its inputs, parameters and
projections), checked against a float64 run of itself, and never named in the variants' `fastest:` line."""

from __future__ import annotations

import io

from rich.console import Console

from attnprof.report.terminal import render_run
from support import FIXTURES

MODELS = FIXTURES / "user_models"


def test_a_target_has_its_own_line_problem_and_float64_error(tmp_path):
    import attnprof

    results = attnprof.run("sdpa-math", device="cpu", batch=1, heads=2, seq=64, head_dim=32, dtype="fp32",
                           repeats=3, warmup=1, out=tmp_path, target=f"{MODELS / 'nanogpt_block.py'}:make")
    target = next(r for r in results["variants"] if r["family"] == "target")
    assert target["status"] == "ok", target["reason"]
    own = target["own_problem"]
    assert own["inputs"] == [{"name": "arg0", "shape": [2, 32, 64], "dtype": "float32"}]
    assert own["parameters"] > 0 and own["parameter_dtypes"] == ["float32"]
    assert any(p.startswith("c_attn 64->192") for p in own["projections"])
    # an fp32 module against its own float64 run: rounding-sized, and measured (not the reference's None)
    assert 0 <= target["max_abs_error"] < 1e-4
    assert target["error_against"].startswith("a float64 run of itself")
    out = io.StringIO()
    render_run(results, Console(file=out, width=400))
    text = out.getvalue()
    headline = next(x for x in text.splitlines() if x.startswith(("fastest:", "unusable run:")))  # a busy machine
    assert "nanogpt_block.make" not in headline
    line = next(x for x in text.splitlines() if x.startswith("your module nanogpt_block.make"))
    assert "on its own problem (inputs arg0 [2, 32, 64] float32" in line
    assert "against a float64 run of itself" in line and "not compared with the variants" in line
    # a memory view per variant and for the module: its peak and what holds it
    assert all(r["memory"]["peak_bytes"] > 0 and r["memory"]["held_by"] for r in results["variants"])
    assert "Memory per call" in text and "nanogpt_block.make: peak " in text
    table = text.split("fastest:")[0]
    assert "nanogpt_block.make" not in table  # the variants' table holds the variants only
    from attnprof.report.html import run_page

    page = run_page(dict(results))
    assert page.count("nanogpt_block.make") >= 2 and "on its own problem (inputs arg0 [2, 32, 64] float32" in page
