"""`attnprof lint` and targets, on attention modules attnprof has never seen (tests/fixtures/user_models)."""

from __future__ import annotations

import ast
import json
import subprocess
import sys
from pathlib import Path

import pytest

from attnprof.findings.source import check_function
from attnprof.fix.target import TargetError, load_target
from support import FIXTURES, assert_one_line_error

MODELS = FIXTURES / "user_models"
GPT = MODELS / "gpt_attention.py"


def line_of(path: Path, text: str) -> int:
    return next(i for i, line in enumerate(path.read_text().splitlines(), 1) if text in line)


@pytest.fixture(scope="module")
def gpt_lint() -> dict:
    command = [sys.executable, "-m", "attnprof", "lint", f"{GPT}:make", "--json", "--device", "cpu"]
    proc = subprocess.run(command, capture_output=True, text=True, timeout=300)
    assert proc.returncode == 0, proc.stderr
    return json.loads(proc.stdout)


def test_lint_names_the_masked_fill_line_as_hidden_copy(gpt_lint):
    assert gpt_lint["schema"] == "attnprof.lint/1" and gpt_lint["target"] == f"{GPT}:make"
    assert gpt_lint["per_forward"]["copies"] >= 1
    for f in gpt_lint["findings"]:
        assert set(f) >= {"id", "severity", "message", "file", "line", "code", "fix"}
    copies = [f for f in gpt_lint["findings"] if f["id"] == "hidden-copy"]
    [fill] = [f for f in copies if Path(f["file"]) == GPT]
    assert fill["line"] == line_of(GPT, "att = att.masked_fill(")
    assert fill["code"].startswith("att = att.masked_fill(self.bias")
    assert "masked_fill_" in fill["fix"] and fill["cost_us"] > 0


def test_lint_source_checks_see_hand_written_attention(gpt_lint):
    [hand] = [f for f in gpt_lint["findings"] if f["id"] == "hand-written-attention"]
    assert Path(hand["file"]) == GPT and hand["line"] == line_of(GPT, "att = (q @ k.transpose")
    assert "scaled_dot_product_attention" in hand["fix"]


def _checks(source: str) -> dict[int, str]:
    fn = ast.parse(source).body[0]
    return {line: what[0] for line, what in check_function(fn).items()}


def test_source_checks_mask_in_forward_and_fp32_upcast():
    found = _checks(
        "def forward(self, q, k, v):\n"
        "    mask = torch.tril(torch.ones(8, 8))\n"
        "    q = q.float()\n"
        "    k = k.to(torch.float32)\n"
        "    p = torch.softmax(q, -1, dtype=torch.float32)\n"
        "    v = v.to(q.dtype)\n"
        "    return self.ones(q)\n")
    assert found == {2: "mask-in-forward", 3: "fp32-upcast", 4: "fp32-upcast", 5: "fp32-upcast"}


def test_source_checks_leave_fused_attention_alone():
    fused = "def forward(q, k, v):\n    return F.scaled_dot_product_attention(q, k, v, is_causal=True)\n"
    assert _checks(fused) == {}


def test_targets_take_kwargs_and_module_paths(monkeypatch):
    target = load_target(f"{MODELS / 'raw_scores_reused.py'}:make_kwargs")
    assert isinstance(target.inputs, dict) and target()[0].shape == (2, 16, 32)
    monkeypatch.syspath_prepend(str(MODELS))
    assert load_target("gpt_attention:make").file == GPT


BAD_TARGETS = [
    ("missing.py:make", ["missing.py", "no such file"]),
    (f"{MODELS / 'raw_scores_reused.py'}:nothing", ["has no function", "nothing"]),
    (f"{MODELS / 'raw_scores_reused.py'}:not_a_pair", ["(module_or_callable, example_inputs)"]),
    ("no_such_pkg.mod:make", ["no_such_pkg.mod"]),
    ("gpt_attention.py", ["expected path/to/file.py:factory"]),
]


@pytest.mark.parametrize("spec,words", BAD_TARGETS)
def test_bad_targets_raise_target_errors(spec, words):
    with pytest.raises(TargetError) as caught:
        load_target(spec)
    assert all(w in str(caught.value) for w in words)


@pytest.mark.parametrize("command", ["lint", "patch"])
def test_bad_targets_are_one_line_errors_on_the_cli(command):
    for spec, words in (BAD_TARGETS[0], BAD_TARGETS[2]):
        proc = subprocess.run([sys.executable, "-m", "attnprof", command, spec],
                              capture_output=True, text=True, timeout=120)
        assert_one_line_error(proc, *words)


def test_run_profiles_a_target_like_a_variant(tmp_path):
    import attnprof

    results = attnprof.run(device="cpu", repeats=2, out=tmp_path, target=f"{GPT}:make")
    [record] = results["variants"]
    assert record["name"] == "gpt_attention.make" and record["status"] == "ok", record["reason"]
    # its own output against a float64 run of itself (the variants' float64 reference is another problem's)
    assert record["family"] == "target" and 0 <= record["max_abs_error"] < 1e-4
    assert record["error_against"].startswith("a float64 run of itself")
    assert record["per_forward"]["copies"] >= 1 and results["config"]["targets"] == [f"{GPT}:make"]


@pytest.fixture(scope="module")
def llama_lints() -> dict[str, dict]:
    pytest.importorskip("transformers")
    import attnprof

    return {mode: attnprof.lint(f"{MODELS / 'tiny_llama.py'}:make_{mode}", device="cpu")
            for mode in ("eager", "sdpa")}


def test_llama_lints_in_eager_and_sdpa(llama_lints):
    for report in llama_lints.values():
        assert report["per_forward"]["aten_ops"] > 0 and report["findings"]
        assert all(Path(f["file"]).exists() for f in report["findings"])
        assert any(f["line"] for f in report["findings"])


def test_llama_eager_attention_costs_are_named(llama_lints):
    eager = {(f["id"], Path(f["file"]).name): f for f in llama_lints["eager"]["findings"]}
    hand = eager[("hand-written-attention", "modeling_llama.py")]
    assert "matmul" in hand["code"]
    upcasts = [f["code"] for f in llama_lints["eager"]["findings"] if f["id"] == "fp32-upcast"]
    assert any("softmax" in code for code in upcasts), "the fp32 softmax of eager attention is named"
    sdpa_ids = {f["id"] for f in llama_lints["sdpa"]["findings"]}
    assert "hand-written-attention" not in sdpa_ids and "sdpa-dispatch" in sdpa_ids


@pytest.mark.cuda
def test_lint_on_gpu_puts_the_memcpy_on_the_masked_fill_line():
    import attnprof

    report = attnprof.lint(f"{GPT}:make", device="cuda")
    assert report["per_forward"]["memcpy"] == 1
    [fill] = [f for f in report["findings"] if f["id"] == "hidden-copy" and Path(f["file"]) == GPT]
    assert fill["line"] == line_of(GPT, "att = att.masked_fill(") and "Memcpy" in fill["message"]


def test_whole_forward_rules_are_not_repeated_per_line():
    """cpu-bound, occupancy, launch-api and tensor-cores describe the forward, not one line:
    each appears once, on no line, instead of once per source line."""
    from attnprof.fix.lint import lint_target

    report = lint_target(load_target(str(FIXTURES / "user_models" / "gpt_attention.py") + ":make"))
    ids = [f["id"] for f in report["findings"]]
    for fid in ("cpu-bound", "occupancy", "launch-api", "tensor-cores"):
        assert ids.count(fid) <= 1
    assert all(f["line"] is None for f in report["findings"] if f["id"] in ("cpu-bound", "launch-api"))


def test_a_nanogpt_block_fixed_the_articles_way_has_layout_copies_and_no_hidden_one():
    """After masked_fill -> masked_fill_, what copies remain are the matmuls' copies of the transposed
    q, k, v views: lint names them layout-copy on their lines and explains every copy it counts."""
    import attnprof

    block = MODELS / "nanogpt_inplace.py"
    report = attnprof.lint(f"{block}:make", device="cpu")
    ids = {f["id"] for f in report["findings"]}
    assert "hidden-copy" not in ids and "layout-copy" in ids
    [layout] = [f for f in report["findings"] if f["id"] == "layout-copy" and f["line"] == line_of(block, "q @ k")]
    assert "matmul" in layout["message"] and "scaled_dot_product_attention" in layout["fix"]
    explained = report["copies"]
    assert sum(c["per_forward"] for c in explained) == report["per_forward"]["copies"]
    assert all(c["why"] for c in explained) and "hidden" not in {c["kind"] for c in explained}
    assert {c["line"] for c in explained if c["kind"] == "layout"} == {line_of(block, "q @ k"),
                                                                      line_of(block, "y = att @ v")}


def test_a_package_module_target_is_found_in_the_current_folder_as_python_m_would(tmp_path):
    """The `attnprof` script's sys.path starts with its own folder, not the user's: emulated by dropping ''."""
    (tmp_path / "mypkg").mkdir()
    (tmp_path / "mypkg" / "__init__.py").write_text("")
    (tmp_path / "mypkg" / "block.py").write_text((MODELS / "nanogpt_inplace.py").read_text())
    code = ("import sys; del sys.path[0]; from attnprof.cli import main; "
            "sys.exit(main(['lint', 'mypkg.block:make', '--json', '--device', 'cpu', '--no-history']))")
    proc = subprocess.run([sys.executable, "-c", code], cwd=tmp_path, capture_output=True, text=True, timeout=300)
    assert proc.returncode == 0, proc.stderr
    assert json.loads(proc.stdout)["target"] == "mypkg.block:make"


def test_the_api_lints_a_module_and_its_inputs_without_a_factory_string():
    import torch

    import attnprof
    from attnprof.fix.target import TargetError

    sys.path.insert(0, str(MODELS))
    try:
        from nanogpt_inplace import make
    finally:
        sys.path.remove(str(MODELS))
    module, (x,) = make()
    with torch.no_grad():
        report = attnprof.lint(module, inputs=x, device="cpu")  # one tensor is the one argument
    assert report["target"] == "<Block>" and "layout-copy" in {f["id"] for f in report["findings"]}
    assert any(f["file"].endswith("nanogpt_inplace.py") and f["line"] for f in report["findings"])
    with pytest.raises(TargetError, match="example inputs"):
        attnprof.lint(module, device="cpu")


RAISING = '''import torch


class Broken(torch.nn.Module):
    def forward(self, x):
        weights = (x @ x.transpose(-1, -2)).softmax(-1) @ x
        return weights.transpose(1, 2).view(2, 32)  # a view of a transposed tensor: raises without attnprof too


def make():
    return Broken(), (torch.randn(2, 8, 4),)
'''


@pytest.mark.parametrize("args", [["lint"], ["patch", "--diff"], ["patch", "--to-sdpa", "--diff"]])
def test_a_forward_that_raises_on_its_own_inputs_is_the_users_error_in_one_line(tmp_path, args):
    """The model's own code failing (as it does without attnprof) is exit 2 naming the target and the error,
    not attnprof's internal error; the file is left as it was."""
    (tmp_path / "broken.py").write_text(RAISING)
    proc = subprocess.run([sys.executable, "-m", "attnprof", args[0], "broken.py:make", *args[1:], "--device", "cpu"],
                          capture_output=True, text=True, timeout=120, cwd=tmp_path)
    assert_one_line_error(proc, "broken.py:make", "raises on its own example inputs", "RuntimeError", "view")
    assert (tmp_path / "broken.py").read_text() == RAISING
