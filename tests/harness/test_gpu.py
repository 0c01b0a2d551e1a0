"""GPU paths, run on a real GPU (the `cuda` marker skips them elsewhere)."""

from __future__ import annotations

import pytest

import attnprof

pytestmark = pytest.mark.cuda

SMALL = dict(batch=2, heads=4, seq=256, head_dim=64, device="cuda", repeats=10)


@pytest.fixture(scope="module")
def gpu_run(tmp_path_factory):
    names = ["naive", "inplace", "sdpa-math", "sdpa-flash", "sdpa-efficient", "sdpa-cudnn", "sdpa-auto"]
    return {v["name"]: v for v in attnprof.run(names, out=tmp_path_factory.mktemp("gpu"), **SMALL)["variants"]}


def test_inplace_drops_exactly_the_memcpy(gpu_run):
    naive, inplace = gpu_run["naive"]["per_forward"], gpu_run["inplace"]["per_forward"]
    assert naive["memcpy"] == 1 and inplace["memcpy"] == 0
    assert naive["gpu_ops"] == inplace["gpu_ops"] + 1


def test_fused_backends_launch_one_attention_kernel(gpu_run):
    for name in ("sdpa-flash", "sdpa-efficient"):
        assert gpu_run[name]["status"] == "ok", gpu_run[name]["reason"]
        assert gpu_run[name]["per_forward"]["kernels"] == 1


def test_math_backend_launches_many_kernels(gpu_run):
    assert gpu_run["sdpa-math"]["per_forward"]["kernels"] > 5 * gpu_run["sdpa-flash"]["per_forward"]["kernels"]


def test_timing_fields_are_consistent(gpu_run):
    for v in gpu_run.values():
        if v["status"] != "ok":
            continue
        dev, lat = v["device_us"], v["latency_us"]
        assert dev["p25"] <= dev["median"] <= dev["p75"]
        assert dev["method"] in ("cuda-graph", "back-to-back")
        # one call between its own events also waits for the host: never shorter than device time
        assert lat["median"] >= 0.9 * dev["median"], v["name"]
        assert v["peak_memory_bytes"] > 0, v["name"]
        assert v["max_abs_error"] < 0.05


def test_sdpa_auto_records_the_backend_it_ran(gpu_run):
    assert gpu_run["sdpa-auto"]["backend"] in {"cudnn", "flash", "efficient", "math"}


def test_flash_rejects_fp32_with_torchs_reason(tmp_path):
    result = attnprof.run(["sdpa-flash", "sdpa-math"], out=tmp_path, **{**SMALL, "head_dim": 64}, dtype="fp32")
    runs = {v["name"]: v for v in result["variants"]}
    assert runs["sdpa-flash"]["status"] == "unsupported" and runs["sdpa-flash"]["reason"]
    assert runs["sdpa-math"]["status"] == "ok"


def test_oom_in_one_variant_leaves_the_others(tmp_path):
    # naive needs B*H*S*S scores: 1*64*65536^2*2 bytes = 512 GiB does not fit; flash needs ~100 MiB
    result = attnprof.run(["naive", "sdpa-flash"], out=tmp_path, batch=1, heads=64, seq=65536, head_dim=64,
                          device="cuda", repeats=3)
    runs = {v["name"]: v for v in result["variants"]}
    assert runs["naive"]["status"] == "oom" and "GiB" in runs["naive"]["reason"]
    assert runs["sdpa-flash"]["status"] == "ok"
