"""pytest hooks for running flash-attention's hopper/test_flash_attn.py through the shim (probe/fa_shim).

FA_SHIM_PROFILE=quick (default) deselects, at collection, all but a subset of the parametrization grid
that fits an 8-minute GPU budget (see QUICK below); FA_SHIM_PROFILE=full keeps the whole grid that the
FLASH_ATTENTION_DISABLE_* variables leave.
FA_SHIM_CPU_COLLECT=1 on a machine without CUDA answers the test module's import-time
torch.cuda.get_device_capability("cuda") with (9, 0), so that `pytest --collect-only` works on a CPU.
FA_SHIM_CPU=1 (with TRITON_INTERPRET=1) runs the tests on the CPU under Triton's interpreter: the test module is
loaded with its tests' one `device = "cuda"` line reading "cpu" (nothing else of it changed; the count replaced is
printed), and FA_SHIM_PROFILE=cpu keeps the float16 cases of the output and varlen parts at CPU_HEAD_DIMS on a few
short lengths (the interpreter refuses bfloat16, which it multiplies as raw bits).
"""

import os
import sys
import types
from pathlib import Path

import torch

if "1" in (os.environ.get("FA_SHIM_CPU_COLLECT"), os.environ.get("FA_SHIM_CPU")) and not torch.cuda.is_available():
    torch.cuda.get_device_capability = lambda *args, **kwargs: (9, 0)


def _load_on_cpu(name: str) -> None:
    """Import the fetched test module `name` with its tests' device "cuda" read as "cpu"."""
    path = Path(__file__).with_name(f"{name}.py")
    if not path.exists():
        return
    source = path.read_text()
    count = source.count('device = "cuda"')
    print(f"fa_shim cpu: {name}.py loaded with {count} 'device = \"cuda\"' lines read as \"cpu\"", file=sys.stderr)
    module = types.ModuleType(name)
    module.__file__ = str(path)
    sys.modules[name] = module  # pytest's import finds it there, at the same path
    exec(compile(source.replace('device = "cuda"', 'device = "cpu"'), str(path), "exec"), module.__dict__)


if os.environ.get("FA_SHIM_CPU") == "1":
    _load_on_cpu("test_flash_attn")

OUTPUT_SEQLENS = {(1, 1), (64, 128), (239, 1), (113, 203), (108, 256), (384, 256), (1023, 1024), (4224, 4224)}
VARLEN_SEQLENS = {(1, 3), (3, 513), (113, 203), (307, 256), (1024, 1023)}
KVCACHE_SEQLENS = {(1, 128), (64, 800), (16, 20000), (2048, 3577)}
# paged caches: FA3's page sizes 1 and 4 are below the decode's 64-key block (the shim skips them), and its test
# skips a seqlen_k that is no multiple of the page size, so page 128 runs on these
PAGED_SEQLENS = {(1, 128), (3, 1024), (64, 2048)}


# the wide head dims (192 with v 128, 256) on fewer lengths: odd ones and one long
WIDE_SEQLENS = {(113, 203), (239, 1), (1023, 1024), (1024, 1023)}


def _lengths(p, lengths):
    seqlens = (p["seqlen_q"], p["seqlen_k"])
    return seqlens in lengths and (p["d"] <= 128 or seqlens in WIDE_SEQLENS)


def _output(p):
    return (not p["has_qv"] and _lengths(p, OUTPUT_SEQLENS)
            and (p["dtype"] == torch.bfloat16 or p["mha_type"] == "mha"))


def _varlen(p):
    return not p["has_qv"] and p["dtype"] == torch.bfloat16 and _lengths(p, VARLEN_SEQLENS)


def _kvcache(p):
    return (not p["rotary_interleaved"]  # no rotary here (flash_attn.layers.rotary absent): a duplicate
            and p["has_leftpad"] == p["has_batch_idx"] and p["mha_type"] in ("mha", "gqa")
            and (p["new_kv"] or p["seqlen_new_eq_seqlen_q"])  # seqlen_new is unused without new_kv
            and (p["seqlen_q"], p["seqlen_k"]) in (KVCACHE_SEQLENS if p["page_size"] is None else
                                                   PAGED_SEQLENS if p["page_size"] == 128 else ()))


# the race check (dK, dV the same bits and dQ within rounding over 1000 runs, batch 60, under a 70 GiB dummy
# allocation): the Gluon backward's lengths and a ragged one (the two-pass backward), at the head dims it has
RACE_SEQLENS = {(200, 200), (1024, 1024), (2048, 2048)}


def _race(p):
    return p["d"] in (64, 128) and (p["seqlen_q"], p["seqlen_k"]) in RACE_SEQLENS


QUICK = {"test_flash_attn_output": _output, "test_flash_attn_varlen_output": _varlen,
         "test_flash_attn_kvcache": _kvcache, "test_flash_attn_race_condition": _race}

# the interpreter's share: float16 at the head dims given (192 with v 128: its two-part tiles), odd short lengths.
# Not (239, 1): with one key dQ and dK are 0 in exact arithmetic, and the test's tolerance there is 0 (twice the
# reference's own rounding, none); the interpreter's products (NumPy) and sums round apart by 1e-6, so dS is not
# exactly 0 (the kernel before the two-part tiles the same: 5.7e-6). It passed on the H100 (docs/kernel.md).
CPU_HEAD_DIMS = tuple(int(d) for d in os.environ.get("FA_SHIM_CPU_HEAD_DIMS", "192").split(","))
CPU_SEQLENS = {(799, 3), (113, 203)}


def _cpu(p):
    return (not p["has_qv"] and p["dtype"] == torch.float16 and p["d"] in CPU_HEAD_DIMS
            and (p["seqlen_q"], p["seqlen_k"]) in CPU_SEQLENS)


CPU = {"test_flash_attn_output": _cpu, "test_flash_attn_varlen_output": _cpu}
# profile: (a rule per test function, whether the functions without one are kept)
PROFILES = {"quick": (QUICK, True), "cpu": (CPU, False)}


def pytest_collection_modifyitems(config, items):
    profile = PROFILES.get(os.environ.get("FA_SHIM_PROFILE", "quick"))
    if profile is None:  # full: the whole grid
        return
    rules, keep_unruled = profile
    keep, drop = [], []
    for item in items:
        rule = rules.get(getattr(item, "originalname", item.name))
        params = getattr(getattr(item, "callspec", None), "params", {})
        (keep if (keep_unruled if rule is None else rule(params)) else drop).append(item)
    if drop:
        config.hook.pytest_deselected(items=drop)
        items[:] = keep
