"""Compile every configuration of attnprof's Triton attention for sm_90 without a GPU and print what
ptxas made of it: registers, spill stack, shared memory, warps, setmaxnreg (warp specialisation) and
HGMMA (wgmma) instruction counts. Needs only triton (its bundled ptxas and cuobjdump).

    python benchmarks/kernel/triton_compile_check.py [--head-dim 128] [--causal 1] [--dtype bf16] [--single-pass]
        [--gluon-backward] [--two-pass]

--single-pass compiles the single-pass backward (_backward_atomic_kernels.py) instead, at the
configurations benchmarks/kernel/triton_backward.py sweeps, with its dQ share sent by TMA reduce-add and by
element-wise atomics, and counts the atomic instructions in the PTX. --gluon-backward compiles the Gluon
single pass (_backward_hopper.py) instead. --two-pass compiles the default backward's passes
(_backward_kernels.py) at _backward.CONFIGS, their strides and head offsets 16-divisible as Triton
specialises them at a launch on [B, H, S, D] or [B, S, H, D] memory, and counts the 128-bit global loads;
--kv-stride-shared 0 compiles the dQ pass for K and V of different row strides; --masked the masked
backward's passes (_masked_backward_kernels.py, masked_backward.CONFIGS) instead.

Shared memory over 232448 bytes (227 KiB) cannot launch on an H100/H200; a spill stack means local
memory traffic. _launch.TUNED lists the configurations that fit.
"""

from __future__ import annotations

import argparse
import importlib.util
import re
import subprocess
import sys
import tempfile
from pathlib import Path

import triton
from triton.backends.compiler import GPUTarget
from triton.compiler import ASTSource

PACKAGE = (Path(__file__).resolve().parents[2] / "src" / "attnprof" / "kernels" / "flash_attn_triton" / "torch-ext"
           / "flash_attn_triton")
KERNEL = PACKAGE / "forward" / "_forward.py"
CUOBJDUMP = Path(triton.__file__).parent / "backends" / "nvidia" / "bin" / "cuobjdump"
SHARED_LIMIT = 232448


def load_forward():
    spec = importlib.util.spec_from_file_location("flash_attn_triton_forward", KERNEL)
    module = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(module)
    return module


def cubin_resources(kernel) -> tuple[int, int, str]:
    """(registers, stack bytes, SASS) of a compiled kernel, read from its cubin by cuobjdump."""
    with tempfile.NamedTemporaryFile(suffix=".cubin") as cubin:
        cubin.write(kernel.asm["cubin"])
        cubin.flush()
        usage = subprocess.run([CUOBJDUMP, "--dump-resource-usage", cubin.name], capture_output=True, text=True)
        sass = subprocess.run([CUOBJDUMP, "--dump-sass", cubin.name], capture_output=True, text=True).stdout
    regs, stack = re.search(r"REG:(\d+) STACK:(\d+)", usage.stdout).groups()
    return int(regs), int(stack), sass


def compile_one(fn, head_dim: int, causal: bool, dtype: str, ws: bool, persistent: bool, block_n: int,
                stages: int, block_m: int = 128, warps: int = 8) -> dict:
    constants = {"GROUP": 1, "HEAD_DIM": head_dim, "BLOCK_M": block_m, "BLOCK_N": block_n, "CAUSAL": causal,
                 "EVEN_N": True, "FUSED_LOOP": ws, "WARP_SPECIALIZE": ws, "PERSISTENT": persistent,
                 "HEAD_GROUP": 1}
    # the tensors, then every integer (lengths, heads, the matrix views' numbers: _tma_views.py)
    signature = {name: "i32" for name in fn.arg_names if name not in constants}
    signature |= {"Q": f"*{dtype}", "K": f"*{dtype}", "V": f"*{dtype}", "Out": f"*{dtype}", "LSE": "*fp32",
                  "qk_scale": "fp32"}
    signature |= {name: "constexpr" for name in constants}
    kernel = triton.compile(ASTSource(fn=fn, signature=signature, constexprs=constants),
                            target=GPUTarget("cuda", 90, 32), options={"num_warps": 4 if ws else warps,
                                                                        "num_stages": stages})
    regs, stack, sass = cubin_resources(kernel)
    return {"regs": regs, "stack": stack, "shared": kernel.metadata.shared,
            "warps": kernel.metadata.num_warps, "setmaxnreg": kernel.asm["ptx"].count("setmaxnreg"),
            "hgmma": sass.count("HGMMA")}


def compile_single(head_dim: int, causal: bool, dtype: str, block_m: int, block_n: int, warps: int, stages: int,
                   dq_tma: bool) -> dict:
    spec = importlib.util.spec_from_file_location("flash_attn_triton_single", PACKAGE / "backward"
                                                  / "_backward_atomic_kernels.py")
    module = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(module)
    signature = {name: f"*{dtype}" for name in ("Q", "K", "V", "dO", "dK", "dV")}
    signature |= {"LSE": "*fp32", "Delta": "*fp32", "dQacc": "*fp32", "sm_scale": "fp32", "qk_scale": "fp32",
                  "SQ": "i32", "SK": "i32", "causal_off": "i32", "ROWS": "i32"}
    constants = {"GROUP": 1, "HEAD_DIM": head_dim, "BLOCK_M": block_m, "BLOCK_N": block_n, "CAUSAL": causal,
                 "EVEN_M": True, "DQ_TMA": dq_tma}
    signature |= {name: "constexpr" for name in constants}
    kernel = triton.compile(ASTSource(fn=module.flash_attn_triton_bwd_single, signature=signature,
                                      constexprs=constants),
                            target=GPUTarget("cuda", 90, 32), options={"num_warps": warps, "num_stages": stages})
    regs, stack, _ = cubin_resources(kernel)
    ptx = kernel.asm["ptx"]
    atomics = sorted(set(re.findall(r"(atom\.global[\w.]*|red\.global[\w.]*|cp\.reduce\.async\.bulk\.tensor[\w.:]*)",
                                    ptx)))
    wgmma = re.findall(r"wgmma\.mma_async\S* \{[^}]*\}, (\{|%rd)", ptx)  # A from registers, or by descriptor
    return {"regs": regs, "stack": stack, "shared": kernel.metadata.shared, "atomics": atomics,
            "wgmma_a_shared": wgmma.count("%rd"), "wgmma_a_registers": wgmma.count("{")}


def single_pass(args) -> None:
    configs = {128: [(64, 64, 8, 3), (64, 64, 8, 2), (64, 128, 8, 2), (64, 128, 8, 1), (32, 128, 8, 2)],
               64: [(64, 128, 8, 2), (64, 128, 8, 3), (64, 64, 4, 3), (32, 128, 4, 2), (64, 64, 8, 3)]}
    print(f"{'block_m, block_n, warps, stages':<32} {'dQ':>8} {'regs':>5} {'stack':>5} {'shared B':>9} "
          f"{'wgmma A smem/regs':>17}  atomics")
    for config in configs[args.head_dim]:
        for dq_tma in (True, False):
            r = compile_single(args.head_dim, bool(args.causal), args.dtype, *config, dq_tma)
            wgmma = f"{r['wgmma_a_shared']}/{r['wgmma_a_registers']}"
            print(f"{str(config):<32} {'TMA' if dq_tma else 'atomics':>8} {r['regs']:>5} {r['stack']:>5} "
                  f"{r['shared']:>9} {wgmma:>17}  {' '.join(r['atomics'])}", flush=True)


def gluon_backward(args) -> None:
    sys.path.insert(0, str(PACKAGE.parent))
    from flash_attn_triton.backward._backward_hopper_launch import compile_for_sm90

    kernel = compile_for_sm90(args.head_dim, bool(args.causal), args.dtype)
    regs, stack, _ = cubin_resources(kernel)
    reduces = kernel.asm["ptx"].count("cp.reduce.async.bulk.tensor")
    print(f"triton {triton.__version__}, sm_90, Gluon backward, head_dim {args.head_dim}, causal {bool(args.causal)}: "
          f"regs {regs}, stack {stack}, shared {kernel.metadata.shared} B, warps {kernel.metadata.num_warps}, "
          f"TMA reduces {reduces}")


def masked_passes(args) -> dict:
    """The masked backward's two passes at masked_backward.CONFIGS (a top-left mask; its ranges are runtime
    values)."""
    from flash_attn_triton.backward import _masked_backward_kernels as kernels
    from flash_attn_triton.backward import masked_backward

    c = masked_backward.CONFIGS[args.head_dim]
    shared = {"GROUP": 1, "HEAD_DIM": args.head_dim, "BOTTOM_RIGHT": False}
    return {"dq": (kernels.flash_attn_triton_bwd_dq_masked, {**shared, "BLOCK_M": c.dq_m, "BLOCK_N": c.dq_n,
                                                              "KV_STRIDE_SHARED": args.kv_stride_shared},
                   c.dq_warps, c.dq_stages),
            "dkdv": (kernels.flash_attn_triton_bwd_dkdv_masked, {**shared, "BLOCK_M": c.dkdv_m, "BLOCK_N": c.dkdv_n},
                     c.dkdv_warps, c.dkdv_stages)}


def two_pass(args) -> None:
    sys.path.insert(0, str(PACKAGE.parent))
    from flash_attn_triton.backward import _backward, _backward_kernels

    config = _backward.CONFIGS[args.head_dim]
    shared = {"GROUP": 1, "HEAD_DIM": args.head_dim, "CAUSAL": bool(args.causal)}
    passes = masked_passes(args) if args.masked else {"preprocess": (_backward_kernels.flash_attn_triton_bwd_preprocess,
                             {"HEAD_DIM": args.head_dim, "BLOCK_M": _backward.PREPROCESS_BLOCK}, 4, 3),
              "dkdv": (_backward_kernels.flash_attn_triton_bwd_dkdv, {
                  **shared, "BLOCK_M": config.dkdv_m, "BLOCK_N": config.dkdv_n, "EVEN_M": True},
                  config.warps, config.stages),
              "dq": (_backward_kernels.flash_attn_triton_bwd_dq, {
                  **shared, "BLOCK_M": config.dq_m, "BLOCK_N": config.dq_n, "KV_STRIDE_SHARED": args.kv_stride_shared},
                  config.warps, config.stages)}
    print(f"triton {triton.__version__}, sm_90, {'masked' if args.masked else 'two-pass'} backward, head_dim "
          f"{args.head_dim}, causal {bool(args.causal)}, {args.dtype}")
    for name, (fn, constants, warps, stages) in passes.items():
        signature, attrs = {}, {}
        for i, arg in enumerate(fn.arg_names):
            kind = ("constexpr" if arg in constants else "*fp32" if arg in ("LSE", "Delta")
                    else "*i32" if arg in ("CuQ", "CuK")
                    else f"*{args.dtype}" if arg in ("Q", "K", "V", "Out", "dO", "dOut", "dQ", "dK", "dV")
                    else "fp32" if arg.endswith("scale") else "i32")
            signature[arg] = kind
            if kind.startswith("*") or arg.endswith(("stride", "col_h")) or arg in ("SQ", "SK"):
                attrs[(i,)] = [["tt.divisibility", 16]]
        kernel = triton.compile(ASTSource(fn=fn, signature=signature, constexprs=constants, attrs=attrs),
                                target=GPUTarget("cuda", 90, 32), options={"num_warps": warps, "num_stages": stages})
        regs, stack, sass = cubin_resources(kernel)
        print(f"  {name:<10} regs {regs:>3}, stack {stack:>3}, shared {kernel.metadata.shared:>6} B, "
              f"128-bit loads {sass.count('LDG.E.128')} of {sass.count('LDG')}, HGMMA {sass.count('HGMMA')}, "
              f"cp.async {sass.count('LDGSTS')}",
              flush=True)


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--head-dim", type=int, default=128)
    parser.add_argument("--causal", type=int, default=1)
    parser.add_argument("--dtype", default="bf16", choices=["bf16", "fp16"])
    parser.add_argument("--single-pass", action="store_true")
    parser.add_argument("--gluon-backward", action="store_true")
    parser.add_argument("--two-pass", action="store_true")
    parser.add_argument("--kv-stride-shared", type=int, default=1, help="--two-pass: K's and V's row strides equal")
    parser.add_argument("--masked", action="store_true", help="--two-pass: the masked backward's passes instead")
    args = parser.parse_args()
    if args.two_pass:
        return two_pass(args)
    if args.single_pass:
        return single_pass(args)
    if args.gluon_backward:
        return gluon_backward(args)
    fn = load_forward().flash_attn_triton_fwd
    print(f"triton {triton.__version__}, sm_90, head_dim {args.head_dim}, causal {bool(args.causal)}, {args.dtype}")
    print(f"{'form':<18} {'BLOCK_N':>7} {'stages':>6} {'regs':>5} {'stack':>5} {'shared B':>9} {'warps':>5} "
          f"{'setmaxnreg':>10} {'HGMMA':>5}  fits")
    for persistent in (False, True):
        for ws in (True, False):
            for block_n in (64, 128):
                for stages in (2, 3) if ws else (2, 3, 4):
                    r = compile_one(fn, args.head_dim, bool(args.causal), args.dtype, ws, persistent, block_n, stages)
                    form = ("ws" if ws else "plain") + ("+persistent" if persistent else "")
                    fits = "yes" if r["shared"] <= SHARED_LIMIT and r["stack"] == 0 else (
                        "no: shared memory" if r["shared"] > SHARED_LIMIT else "spills")
                    print(f"{form:<18} {block_n:>7} {stages:>6} {r['regs']:>5} {r['stack']:>5} {r['shared']:>9} "
                          f"{r['warps']:>5} {r['setmaxnreg']:>10} {r['hgmma']:>5}  {fits}", flush=True)


if __name__ == "__main__":
    sys.exit(main())
