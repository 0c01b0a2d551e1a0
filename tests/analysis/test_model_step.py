"""Attention inside a whole model's training step: every call, forward and backward, at its layer, and its
share of the step. The Trainer traces are a 2-layer Llama's step of 2 micro-batches (gradient accumulation),
recorded by AttnprofCallback on CPU (benchmarks/device_runs/trainer_attention.py); the counts are checked against the
raw JSON."""

from __future__ import annotations

import gzip
import io
import json

import pytest
from rich.console import Console

from attnprof import analyze
from attnprof.report.terminal import render_analysis
from support import CPU, H200

EAGER, SDPA = CPU / "llama_train_eager.json.gz", CPU / "llama_train_sdpa.json.gz"
REGION = "attnprof.train_step"


def raw_count(path, name: str, region: str = REGION) -> int:
    """Events called `name` inside the regions, by plain json."""
    with gzip.open(path) as f:
        events = [e for e in json.load(f)["traceEvents"] if e.get("ph") == "X"]
    spans = [(e["ts"], e["ts"] + e["dur"]) for e in events if e.get("cat") == "user_annotation" and e["name"] == region]
    return sum(1 for e in events if e["name"] == name and any(lo <= e["ts"] <= hi for lo, hi in spans))


@pytest.fixture(scope="module")
def eager():
    return analyze(EAGER)


def test_the_callbacks_region_is_what_analyze_picks_over_torchs_own_annotations(eager):
    assert eager["region"] == REGION  # not `enumerate(DataLoader)#...` nor `Optimizer.step#AdamW.step`
    assert eager["unit"] == "step"


def test_every_hand_written_call_of_the_step_is_found_in_both_phases_at_its_layer(eager):
    step = eager["model_step"]
    softmaxes = raw_count(EAGER, "aten::softmax")
    backward = raw_count(EAGER, "autograd::engine::evaluate_function: SoftmaxBackward0")
    assert softmaxes == backward == 4  # 2 layers x 2 micro-batches, each once forward and once backward
    assert step["implementations"] == ["hand-written"]
    assert step["passes"] == 2
    assert [row["layer"] for row in step["layers"]] == [0, 1]
    assert all(row["calls"] == 4 for row in step["layers"])  # per layer: 2 forward + 2 backward
    assert all(row["forward_us"] > 0 and row["backward_us"] > 0 for row in step["layers"])


def test_the_shares_add_up_and_the_layers_add_up_to_attentions_time(eager):
    step = eager["model_step"]
    total = step["attention_us"]["forward"] + step["attention_us"]["backward"]
    assert sum(row["time_us"] for row in step["layers"]) == pytest.approx(total, abs=0.01)
    assert step["share"]["total"] == pytest.approx(step["share"]["forward"] + step["share"]["backward"], abs=2e-4)
    assert 0 < step["share"]["total"] < 1
    assert step["step_us"] == pytest.approx(eager["per_forward"]["cpu_time_us"], rel=0.01)
    spread = step["spread"]
    assert spread["min_us"] == min(r["time_us"] for r in step["layers"]) <= spread["max_us"]


def test_findings_are_placed_at_the_layers_whose_calls_they_name(eager):
    placed = {f["id"]: f["layers"] for f in eager["model_step"]["findings"]}
    assert placed["hand-written-attention"] == [0, 1]
    assert placed["layout-transposes"] == []  # every transpose of the step, not one attention call's
    assert all("hand-written-attention" in row["findings"] for row in eager["model_step"]["layers"])


def test_sdpas_backward_is_its_own_node():
    step = analyze(SDPA)["model_step"]
    node = "autograd::engine::evaluate_function: ScaledDotProductFlashAttentionForCpuBackward0"
    assert raw_count(SDPA, node) == raw_count(SDPA, "aten::scaled_dot_product_attention") == 4
    assert step["implementations"] == ["sdpa (flash)"]
    assert [row["calls"] for row in step["layers"]] == [4, 4]


@pytest.mark.parametrize(("variant", "label"), [("sdpa-cudnn", "sdpa (cudnn)"), ("sdpa-flash", "sdpa (flash)"),
                                                 ("flex", "flex"), ("sdpa-math", "sdpa (math)"),
                                                 ("naive", "hand-written")])
def test_on_the_h200_each_backward_is_named_like_its_forward(variant, label):
    step = analyze(H200 / f"train_4_16_1024_64_bf16_{variant}.json.gz")["model_step"]
    assert step["implementations"] == [label]
    (row,) = step["layers"]
    assert row["forward_us"] > 0 and row["backward_us"] > 0  # GPU time of each phase's kernels


def test_a_forward_only_trace_has_its_layers_and_no_backward():
    d = analyze(H200 / "llama_fwd_eager.json.gz")
    step = d["model_step"]
    assert step["unit"] == "forward" and step["attention_us"]["backward"] == 0
    softmaxes = raw_count(H200 / "llama_fwd_eager.json.gz", "aten::softmax", d["region"])
    assert len(step["layers"]) * d["forwards"] == softmaxes


def test_analyze_prints_the_per_layer_table(eager):
    out = io.StringIO()
    render_analysis(eager, Console(file=out, width=200))
    text = out.getvalue()
    assert "attention in the step (host time)" in text
    assert "attention per layer" in text and "hand-written-attention" in text
    elsewhere = next(line for line in text.splitlines() if line.startswith("findings at no attention call: "))
    assert "layout-transposes" in elsewhere
    # views move no data: charged no time, they rank after every finding that costs some
    assert not elsewhere.endswith(": layout-transposes")


def test_under_autocast_sdpa_calls_itself_and_its_backend_is_the_inner_calls(tmp_path):
    def op(name, ts, dur, cat="cpu_op"):
        return {"ph": "X", "cat": cat, "name": name, "ts": ts, "dur": dur, "pid": 1, "tid": 1}

    events = [op("step", 0, 100, "user_annotation"), op("aten::scaled_dot_product_attention", 10, 50),
              op("aten::to", 11, 5), op("aten::scaled_dot_product_attention", 20, 30),
              op("aten::_scaled_dot_product_cudnn_attention", 21, 25)]  # autocast's casts, then the call again
    path = tmp_path / "autocast.json"
    path.write_text(json.dumps({"traceEvents": events}))
    step = analyze(path)["model_step"]
    assert step["implementations"] == ["sdpa (cudnn)"] and len(step["layers"]) == 1


def test_in_a_notebook_the_analysis_shows_its_layers(eager):
    page = eager._repr_html_()
    assert f"attention: {eager['model_step']['share']['total']:.1%} of the step (host time)" in page
    assert page.count("<td>hand-written</td>") == 2  # one row per layer


def test_a_fused_kernels_backward_node_takes_its_forwards_name(tmp_path):
    """Our kernel's forward is known by its kernel; its backward node by its autograd.Function's name."""
    def event(name, cat, ts, dur, tid=1, corr=None):
        e = {"ph": "X", "cat": cat, "name": name, "ts": ts, "dur": dur, "pid": 1, "tid": tid}
        if corr is not None:
            e["args"] = {"correlation": corr}
        return e

    node = "autograd::engine::evaluate_function: AttentionFunctionBackward"
    events = [event("step", "user_annotation", 0, 1000),
              event("aten::empty", "cpu_op", 10, 5), event("cudaLaunchKernel", "cuda_runtime", 20, 5, corr=1),
              event(node, "cpu_op", 100, 300, tid=2), event("cudaLaunchKernel", "cuda_runtime", 150, 5, tid=2, corr=2),
              event("flash_attn_triton_fwd", "kernel", 30, 40, tid=7, corr=1),
              event("flash_attn_triton_bwd_recompute", "kernel", 160, 80, tid=7, corr=2)]
    path = tmp_path / "ours.json"
    path.write_text(json.dumps({"traceEvents": events}))
    step = analyze(path)["model_step"]
    (row,) = step["layers"]
    assert step["implementations"] == ["fused kernel (Triton (attnprof flash_attn_triton))"]
    assert row["forward_us"] == 40 and row["backward_us"] == 80
