"""`run --mode train` and `run --mode decode --kv-heads 1` on CPU: every variant ok, the training step with a
backward phase, the decode call against the cache; bad workloads are one line."""

from __future__ import annotations

import json

import pytest

from support import assert_one_line_error, attnprof

SMALL = ("--device", "cpu", "--batch", "1", "--heads", "4", "--seq", "32", "--head-dim", "16", "--repeats", "2",
         "--variants", "naive,sdpa-math", "--json", "--no-report", "--no-history")


@pytest.fixture(scope="module")
def train(tmp_path_factory):
    proc = attnprof("run", "--mode", "train", *SMALL, "--out", str(tmp_path_factory.mktemp("train")), timeout=300)
    assert proc.returncode == 0, proc.stderr
    return json.loads(proc.stdout)


def test_cli_train_runs_every_variant_with_a_backward_phase(train):
    assert train["problem"]["mode"] == "train" and train["problem"]["unit"] == "step"
    assert train["config"]["region"] == "attn_step"
    for v in train["variants"]:
        assert v["status"] == "ok", v["reason"]
        assert v["unit"] == "step" and v["phases"]["backward"]["aten_ops"] > 0
        assert v["device_us"]["median"] > 0 and v["max_abs_error"] < 0.05


def test_cli_decode_with_one_kv_head_runs_every_variant(tmp_path):
    proc = attnprof("run", "--mode", "decode", "--kv-heads", "1", *SMALL, "--out", str(tmp_path), timeout=300)
    assert proc.returncode == 0, proc.stderr
    d = json.loads(proc.stdout)
    assert (d["problem"]["q_len"], d["problem"]["kv_heads"], d["problem"]["unit"]) == (1, 1, "forward")
    for v in d["variants"]:
        assert v["status"] == "ok", v["reason"]
        assert v["unit"] == "forward" and v["phases"] is None
    assert any(f["id"] == "gqa-expanded" for f in d["variants"][0]["findings"])  # naive copies K/V out


@pytest.mark.parametrize("args,words", [
    (("--mode", "prefill"), "unknown mode"), (("--kv-heads", "3"), "divide"), (("--mask", "diagonal"), "unknown mask"),
    (("--q-len", "2"), "decode"),
])
def test_a_bad_workload_is_one_line(args, words, tmp_path):
    assert_one_line_error(attnprof("run", *SMALL, *args, "--out", str(tmp_path)), *words.split())
