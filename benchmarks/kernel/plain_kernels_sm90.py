"""The plain (non-Gluon) Triton kernels compiled for sm_90 without a GPU, with Triton's own ptxas: the dense forward
at its shipped configurations (`_launch.SM90_CONFIGS`), the masked forward, the split-KV decode and its combine,
the two-pass backward, the single pass and the masked backward.

    python benchmarks/kernel/plain_kernels_sm90.py same 24abd2c   # head dims 64, 128: PTX at that commit and here
    python benchmarks/kernel/plain_kernels_sm90.py same HEAD --wide  # also 256 and 192/128 (a commit that has them)
    python benchmarks/kernel/plain_kernels_sm90.py new            # head dims 256, 192/128: registers, spills, shared

`same` compares the PTX of every kernel at head dims 64 and 128 between a commit and the working tree, as
hopper_same_ptx.py does for the Gluon kernels (no `.loc`/`.file` lines, module names made equal, shared memory and
warps too, and without the `$L__tmp` labels only debug sections refer to): head-dim work that must not move the
machine code of the existing paths. Prints one line per
difference and a summary; exits 1 on any difference. `new` compiles the kernels at the head dims 64/128 lack,
at the configurations the launches pick, and prints what ptxas made of each (a spill stack means local memory
traffic; shared memory over 232448 bytes cannot launch); exits 1 when one does not fit.
"""

from __future__ import annotations

import argparse
import multiprocessing
import re
import sys
from concurrent.futures import ProcessPoolExecutor
from pathlib import Path

import triton
from triton.backends.compiler import GPUTarget
from triton.compiler import ASTSource

ROOT = Path(__file__).resolve().parents[2]
sys.path[:0] = [str(ROOT / "src"), str(Path(__file__).resolve().parent)]

from hopper_same_ptx import _normalised, compiled_at, report_same  # noqa: E402
from triton_compile_check import SHARED_LIMIT, cubin_resources  # noqa: E402

from attnprof.kernels import FLASH_ATTN_TRITON, import_from_folder  # noqa: E402

TENSORS = {"Q", "K", "V", "Out", "dO", "dOut", "dQ", "dK", "dV"}  # in the inputs' dtype
FLOATS = {"LSE", "Delta", "PartO", "PartLSE", "Sink", "dQacc"}  # float32
INTS = {"CuQ", "CuK", "SeqLens", "Count", "BlockTable"}  # int32
WIDE_PAIRS = ((256, 256), (192, 128))  # (q/k, v) head dims past 128
# the masked dK/dV pass as the two-pass backward launches it (its single-pass arguments left at their defaults)
TWO_PASS = {"dQacc": None, "ATOMIC_DQ": False, "DQ_TMA": False}


def _signature(fn, constants: dict) -> tuple[dict, dict]:
    """(signature, attributes) of a kernel as a launch on [B, H, S, D] bf16 memory specialises it: pointers and
    strides 16-divisible."""
    signature, attrs = {}, {}
    for i, arg in enumerate(fn.arg_names):
        kind = ("constexpr" if arg in constants else "*bf16" if arg in TENSORS else "*fp32" if arg in FLOATS
                else "*i32" if arg in INTS else "fp32" if arg.endswith("scale") else "i32")
        signature[arg] = kind
        if kind.startswith("*") or "stride" in arg or arg.endswith("col_h"):
            attrs[(i,)] = [["tt.divisibility", 16]]
    return signature, attrs


def _build(fn, constants: dict, warps: int, stages: int):
    constants = {name: value for name, value in constants.items() if name in fn.arg_names}  # an older kernel's
    signature, attrs = _signature(fn, constants)
    return triton.compile(ASTSource(fn=fn, signature=signature, constexprs=constants, attrs=attrs),
                          target=GPUTarget("cuda", 90, 32), options={"num_warps": warps, "num_stages": stages})


def _forward_builds(pkg, dims: dict) -> dict:
    launch, masks = pkg["_launch"], pkg["masks"]
    # by q/k's head dim since session 22 (192 has its own); before, by the tile width HEAD_DIM
    config = launch.SM90_CONFIGS.get(dims["HEAD_DIM_QK"]) or launch.SM90_CONFIGS[dims["HEAD_DIM"]]
    builds = {f"forward causal={c}": (pkg["forward._forward"].flash_attn_triton_fwd, {
        **dims, **config.kwargs, "GROUP": 1, "CAUSAL": c, "EVEN_N": True, "HEAD_GROUP": 1},
        config.num_warps, config.num_stages) for c in (False, True)}
    wide = dims["HEAD_DIM"] > 128
    for block_m, block_n, warps, stages, tiles in ((masks.WIDE_CONFIG,) if wide else (
            masks.GPU_CONFIG, masks.SHORT_WINDOW_CONFIG)):
        for extras in (False, True):  # softcap and a sink, or neither
            builds[f"masked forward {block_m}x{block_n} tiles={tiles} softcap+sink={extras}"] = (
                masks.flash_attn_triton_fwd_masked, {**dims, "GROUP": 1, "BLOCK_M": block_m, "BLOCK_N": block_n,
                                                     "BOTTOM_RIGHT": True, "TILES": tiles, "SOFTCAP": extras,
                                                     "HAS_SINK": extras}, warps, stages)
    return builds


def _decode_builds(pkg, dims: dict) -> dict:
    decode, combine = pkg["decode"], pkg["_decode_combine"]
    block_n, stages = decode.GPU_CONFIG[:2]
    # the K/V reads' switch, where the kernel has it (since the pointer loads came in): TMA, the default
    reads = {"TMA": True} if "TMA" in decode.flash_attn_triton_decode_split.arg_names else {}
    # the fused combine's load widths at 16 splits, where the kernel has them (decode.combine_loads, since its loads
    # took several splits)
    widths = getattr(decode, "combine_loads", None)
    builds = {}
    for block_m, warps, partial, fused in ((16, 4, False, False), (16, 4, True, False), (16, 4, True, True),
                                           (64, 8, False, False), (64, 8, True, True)):
        loads = widths(decode.Tiles(block_m, 1, block_n, stages, warps, 16 if partial else 1, fused, True),
                       dims["HEAD_DIM_V"]) if widths else {}
        for paged in (False, True):
            builds[f"decode split rows={block_m} partial={partial} fused={fused} paged={paged}"] = (
                decode.flash_attn_triton_decode_split, {
                    **dims, "GROUP": 8, "BLOCK_M": block_m, "BLOCK_N": block_n, "PARTIAL": partial, "FUSED": fused,
                    "SOFTCAP": False, "HAS_SINK": False, "PAGED": paged, "PDL": False, **reads, **loads}, warps,
                stages)
    for sink in (False, True):  # PDL: off, as shipped (_build drops it for a commit whose kernels lack it)
        builds[f"decode combine sink={sink}"] = (combine.flash_attn_triton_decode_combine, {
            "HEAD_DIM": dims["HEAD_DIM_V"], "SPLITS_P2": 4, "HAS_SINK": sink, "PDL": False}, 4, 3)
    return builds


def _backward_builds(pkg, dims: dict) -> dict:
    two_pass, kernels = pkg["backward._backward"], pkg["backward._backward_kernels"]
    c = two_pass.CONFIGS[dims["HEAD_DIM_QK"]]
    builds = {"backward preprocess": (kernels.flash_attn_triton_bwd_preprocess, {
        "HEAD_DIM": dims["HEAD_DIM_V"], "BLOCK_M": two_pass.PREPROCESS_BLOCK}, 4, 3)}
    for causal in (False, True):
        shared = {**dims, "GROUP": 1, "CAUSAL": causal}
        for even in (False, True):
            builds[f"backward dkdv causal={causal} even_m={even}"] = (kernels.flash_attn_triton_bwd_dkdv, {
                **shared, "BLOCK_M": c.dkdv_m, "BLOCK_N": c.dkdv_n, "EVEN_M": even}, c.warps, c.stages)
        for kv_shared in (False, True):
            builds[f"backward dq causal={causal} kv_stride_shared={kv_shared}"] = (kernels.flash_attn_triton_bwd_dq, {
                **shared, "BLOCK_M": c.dq_m, "BLOCK_N": c.dq_n, "KV_STRIDE_SHARED": kv_shared}, c.warps, c.stages)
    masked, masked_kernels = pkg["backward.masked_backward"], pkg["backward._masked_backward_kernels"]
    m = masked.CONFIGS[dims["HEAD_DIM_QK"]]
    for softcap in (False, True):
        shared = {**dims, "GROUP": 1, "BOTTOM_RIGHT": True, "SOFTCAP": softcap}
        builds[f"masked backward dq softcap={softcap}"] = (masked_kernels.flash_attn_triton_bwd_dq_masked, {
            **shared, "BLOCK_M": m.dq_m, "BLOCK_N": m.dq_n, "KV_STRIDE_SHARED": True}, m.dq_warps, m.dq_stages)
        builds[f"masked backward dkdv softcap={softcap}"] = (masked_kernels.flash_attn_triton_bwd_dkdv_masked, {
            **shared, "BLOCK_M": m.dkdv_m, "BLOCK_N": m.dkdv_n, **TWO_PASS}, m.dkdv_warps, m.dkdv_stages)
        if "ATOMIC_DQ" in masked_kernels.flash_attn_triton_bwd_dkdv_masked.arg_names:  # since session 24
            tiles = pkg["backward._backward_single"].CONFIGS[dims["HEAD_DIM_QK"]]  # what masked_backward picks
            builds[f"masked single pass softcap={softcap}"] = (masked_kernels.flash_attn_triton_bwd_dkdv_masked, {
                **shared, "BLOCK_M": tiles.block_m, "BLOCK_N": tiles.block_n, "ATOMIC_DQ": True, "DQ_TMA": True},
                tiles.warps, tiles.stages)
    return builds


def _single_pass_builds(pkg, dims: dict) -> dict:
    """The single pass (FLASH_ATTN_TRITON_ATOMIC_DQ=1) at the head dims it has tiles for (64 and 128; 256 and
    192/128 since session 24)."""
    single, kernels = pkg["backward._backward_single"], pkg["backward._backward_atomic_kernels"]
    c = single.CONFIGS.get(dims["HEAD_DIM_QK"])
    if c is None:
        return {}
    rows = {**dims, "BLOCK": single.ROW_BLOCK}
    return {"single delta_zero": (kernels.flash_attn_triton_bwd_delta_zero, rows, 4, 3),
            "single dq_convert": (kernels.flash_attn_triton_bwd_dq_convert, rows, 4, 3),
            **{f"single causal={causal}": (kernels.flash_attn_triton_bwd_single, {
                **dims, "GROUP": 1, "BLOCK_M": c.block_m, "BLOCK_N": c.block_n, "CAUSAL": causal, "EVEN_M": True,
                "DQ_TMA": True}, c.warps, c.stages) for causal in (False, True)}}


def builds(kernel_dir: Path, module: str, pairs: tuple[tuple[int, int], ...]) -> dict:
    """Every kernel to compile, by a name that says what it is: (kernel, constexprs, warps, stages)."""
    name = import_from_folder(kernel_dir, module).__name__
    pkg = {sub: sys.modules[f"{name}.{sub}"] for sub in (
        "_launch", "masks", "decode", "_decode_combine", "forward._forward", "backward._backward",
        "backward._backward_kernels", "backward.masked_backward", "backward._masked_backward_kernels",
        "backward._backward_single", "backward._backward_atomic_kernels")}
    found = {}
    for qk, v in pairs:
        dims = {"HEAD_DIM": triton.next_power_of_2(qk), "HEAD_DIM_QK": qk, "HEAD_DIM_V": v}
        for kind in (_forward_builds, _decode_builds, _backward_builds, _single_pass_builds):
            found |= {f"d{qk}/{v} {key}": build for key, build in kind(pkg, dims).items()}
    return found


# labels that only the debug sections refer to (an inlined function's scope): a helper such as
# _head_tiles.tile_mask adds some and renumbers the rest, with the instructions unchanged
DEBUG_LABEL = re.compile(r"^\$L__tmp\d+:$", re.M)
_BUILDS: dict = {}  # the builds of the current run, read by the forked workers


def _ptx(key: str) -> str:
    fn, constants, warps, stages = _BUILDS[key]
    try:
        kernel = _build(fn, constants, warps, stages)
    except Exception as e:  # noqa: BLE001 - a configuration that cannot compile: the same on both sides
        return f"does not compile: {type(e).__name__}"
    return f"shared={kernel.metadata.shared} warps={kernel.metadata.num_warps}\n" + _normalised(
        DEBUG_LABEL.sub("", kernel.asm["ptx"]), _BUILDS["module"])


def _resources(key: str) -> dict:
    fn, constants, warps, stages = _BUILDS[key]
    kernel = _build(fn, constants, warps, stages)
    regs, stack, _ = cubin_resources(kernel)
    return {"regs": regs, "stack": stack, "shared": kernel.metadata.shared, "warps": warps, "stages": stages}


def _run_all(found: dict, module: str, work) -> dict:
    _BUILDS.clear()
    _BUILDS.update(found, module=module)
    keys = list(found)
    with ProcessPoolExecutor(mp_context=multiprocessing.get_context("fork")) as pool:
        return dict(zip(keys, pool.map(work, keys), strict=True))


def same(rev: str, wide: bool = False) -> int:
    pairs = ((64, 64), (128, 128)) + (WIDE_PAIRS if wide else ())
    before = compiled_at(rev, lambda folder: _run_all(builds(folder, "_plain_before", pairs), "_plain_before", _ptx))
    after = _run_all(builds(FLASH_ATTN_TRITON, "_plain_after", pairs), "_plain_after", _ptx)
    return report_same(before, after, "kernels")


def new() -> int:
    found = builds(FLASH_ATTN_TRITON, "_plain_new", WIDE_PAIRS)
    results = _run_all(found, "_plain_new", _resources)
    print(f"triton {triton.__version__}, sm_90, bf16")
    print(f"{'kernel':<62} {'warps':>5} {'stages':>6} {'regs':>5} {'spill B':>7} {'shared B':>8}  fits")
    misfits = 0
    for key, r in results.items():
        fits = "yes" if r["shared"] <= SHARED_LIMIT and r["stack"] == 0 else (
            "NO: shared memory" if r["shared"] > SHARED_LIMIT else "spills")
        misfits += r["shared"] > SHARED_LIMIT
        print(f"{key:<62} {r['warps']:>5} {r['stages']:>6} {r['regs']:>5} {r['stack']:>7} {r['shared']:>8}  {fits}")
    return 1 if misfits else 0


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("mode", choices=["same", "new"])
    parser.add_argument("rev", nargs="?", default="HEAD", help="same: the commit to compare the working tree with")
    parser.add_argument("--wide", action="store_true", help="same: also head dims 256 and 192/128")
    args = parser.parse_args()
    return same(args.rev, args.wide) if args.mode == "same" else new()


if __name__ == "__main__":
    sys.exit(main())
