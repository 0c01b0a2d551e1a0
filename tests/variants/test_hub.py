"""The hub variant: a local kernel loaded through the real `kernels` package, and the one-line
reasons it gives instead of tracebacks when it cannot load (no package, no hub, offline, no build)."""

from __future__ import annotations

import importlib
import importlib.util
import os
import sys
from types import SimpleNamespace

import pytest

from attnprof.problem import Problem, make_inputs
from attnprof.variants import BuildOptions, VariantUnavailable, get, hub
from support import FIXTURES

LOCAL_KERNEL = FIXTURES / "local_kernel"
SMALL = dict(batch=2, heads=3, seq=33, head_dim=16)
BOGUS = "attnprof-test/no-such-kernel"


def _kernels():
    """The kernels package; its tests skip without it, except in CI, which installs .[dev,hub]."""
    if os.environ.get("CI"):
        return importlib.import_module("kernels")  # a CI that lost the extra must fail, not skip
    return pytest.importorskip("kernels")


@pytest.fixture
def isolated_hub(monkeypatch, tmp_path):
    """No LOCAL_KERNELS, an empty kernel cache, online mode, and a hub that refuses at once (loopback)."""
    _kernels()
    from huggingface_hub import constants

    monkeypatch.delenv("LOCAL_KERNELS", raising=False)
    monkeypatch.setenv("KERNELS_CACHE", str(tmp_path))
    monkeypatch.setattr(constants, "HF_HUB_OFFLINE", False)
    monkeypatch.setattr(constants, "ENDPOINT", "http://127.0.0.1:9")
    return constants


def _run_against_sdpa(kernel: str | None, dtype: str, device: str = "cpu") -> None:
    import torch.nn.functional as F

    problem = Problem(**SMALL, dtype=dtype)
    forward = get("hub").build(problem, device, BuildOptions(kernel=kernel))
    q, k, v = make_inputs(problem, device)  # [B, H, S, D]
    out = forward(*(t.transpose(1, 2).contiguous() for t in (q, k, v)))  # the variant takes [B, S, H, D]
    assert out.shape == (problem.batch, problem.seq, problem.heads, problem.head_dim)
    expected = F.scaled_dot_product_attention(q.float(), k.float(), v.float(), is_causal=True)
    tol = 1e-5 if dtype == "fp32" else 2e-2
    assert (out.transpose(1, 2).float() - expected).abs().max().item() < tol


def _reason(kernel: str | None, dtype: str = "bf16", device: str = "cpu") -> str:
    with pytest.raises(VariantUnavailable) as info:
        get("hub").build(Problem(**SMALL, dtype=dtype), device, BuildOptions(kernel=kernel))
    reason = str(info.value)
    assert reason and "\n" not in reason and "Traceback" not in reason
    return reason


def test_registered_with_flash_attn_layout():
    variant = get("hub")
    assert variant.layout == "BSHD" and variant.family == "hub"


@pytest.mark.parametrize(
    ("kernel", "repo", "version", "revision"),
    [
        (None, "kernels-community/flash-attn2", 2, None),
        ("kernels-community/flash-attn3", "kernels-community/flash-attn3", 1, None),
        ("org/kern@3", "org/kern", 3, None),
        ("org/kern@main", "org/kern", None, "main"),
        ("org/kern", "org/kern", 1, None),
    ],
)
def test_parse_hub_ids(kernel, repo, version, revision):
    spec = hub.parse_kernel(kernel)
    assert (spec.repo_id, spec.version, spec.revision, spec.path) == (repo, version, revision, None)
    assert spec.explicit == (kernel is not None)  # only a repo the user named is allowlisted


def test_parse_local_directory():
    assert hub.parse_kernel(str(LOCAL_KERNEL)).path == LOCAL_KERNEL.resolve()


@pytest.mark.parametrize("dtype", ["fp32", "bf16"])
def test_local_kernel_matches_sdpa(dtype):
    _kernels()
    _run_against_sdpa(str(LOCAL_KERNEL), dtype)


@pytest.mark.cuda
def test_local_kernel_on_cuda():
    _kernels()
    _run_against_sdpa(str(LOCAL_KERNEL), "bf16", device="cuda")


@pytest.mark.parametrize("repo", ["attnprof-test/toy-flash-attn", hub.DEFAULT_REPO])
def test_local_kernels_env_maps_a_repo_to_a_directory(isolated_hub, monkeypatch, repo):
    monkeypatch.setenv("LOCAL_KERNELS", f"{repo}={LOCAL_KERNEL}")
    _run_against_sdpa(repo, "bf16")  # the default repo too: the mapping lifts its GPU-only refusal


def test_unreachable_hub_is_a_reason(isolated_hub):
    assert "cannot reach the Hugging Face Hub" in _reason(BOGUS)


def test_offline_is_a_reason(isolated_hub):
    isolated_hub.HF_HUB_OFFLINE = True  # what HF_HUB_OFFLINE=1 sets when huggingface_hub is imported
    reason = _reason(BOGUS)
    assert "HF_HUB_OFFLINE" in reason and BOGUS in reason


def test_flash_attn_repos_refuse_cpu_and_fp32_without_the_network(isolated_hub, monkeypatch):
    kernels = _kernels()

    def no_network(*args, **kwargs):
        raise AssertionError("the refusal must come before any load")

    monkeypatch.setattr(kernels, "get_kernel", no_network)
    assert "GPU builds only" in _reason(None)
    assert "bf16 or fp16" in _reason("kernels-community/flash-attn3", dtype="fp32", device="cuda")


def test_local_directory_without_a_build_is_a_reason(tmp_path):
    _kernels()
    (tmp_path / "build").mkdir()
    assert "has no build for this system" in _reason(str(tmp_path))


def test_bad_kernel_options_are_reasons(tmp_path):
    assert "no kernel directory" in _reason(str(tmp_path / "missing"))
    assert "neither an existing directory nor a hub repo id" in _reason("not a repo id")


def test_missing_package_is_a_reason(monkeypatch):
    monkeypatch.setitem(sys.modules, "kernels", None)  # makes `import kernels` raise ImportError
    reason = get("hub").supports(Problem(**SMALL), "cuda")
    assert reason is not None and "not installed" in reason and "attnprof[hub]" in reason
    assert "not installed" in _reason(None, device="cuda")


def test_too_old_package_is_a_reason(monkeypatch):
    monkeypatch.setitem(sys.modules, "kernels", SimpleNamespace(__version__="0.10.0"))
    assert "too old" in get("hub").supports(Problem(**SMALL), "cuda")


def test_supports_needs_no_network(monkeypatch):
    _kernels()
    monkeypatch.setattr(hub, "load_module", None)  # supports() must not load anything
    assert get("hub").supports(Problem(**SMALL), "cpu") is None
    assert "cpu and cuda" in get("hub").supports(Problem(**SMALL), "mps")


def test_fixture_variants_are_the_same_kernel():
    build = LOCAL_KERNEL / "build"
    assert (build / "torch-cpu/__init__.py").read_text() == (build / "torch-cuda/__init__.py").read_text()


def test_runner_runs_a_local_kernel_and_records_a_refusal(tmp_path):
    import attnprof

    small = dict(batch=1, heads=2, seq=32, head_dim=16, device="cpu", repeats=2, out=tmp_path)
    if importlib.util.find_spec("kernels") or os.environ.get("CI"):
        (ok,) = attnprof.run(["hub"], kernel=str(LOCAL_KERNEL), **small)["variants"]
        assert ok["status"] == "ok" and ok["layout"] == "BSHD" and ok["max_abs_error"] < 2e-2
    (refused,) = attnprof.run(["hub"], **small)["variants"]  # flash-attn2 on CPU, or no package
    assert refused["status"] == "unsupported" and refused["reason"]
