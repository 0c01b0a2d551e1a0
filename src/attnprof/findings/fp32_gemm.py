"""fp32-gemm: GEMMs running in fp32 on CUDA cores in a forward that works on 16-bit tensors.

SDPA's math backend casts bf16/fp16 inputs to fp32 and multiplies them with cuBLAS's fp32 SIMT
kernels (`sm80_xmma_gemm_f32f32_..._ffma`): no tensor cores, several times the time of a bf16
GEMM. The evidence is the GEMM kernels (by name: `ffma`, `sgemm`, `simt`, `f32f32` and no
tensor-core signature) and the casts inside the op that encloses them.

GPU traces only: a CPU trace names no kernel, so it cannot show which GEMMs ran in fp32 or on
which units (and a CPU has no CUDA cores to fall back to); casts alone prove no fp32 GEMM.
"""

from __future__ import annotations

import numpy as np

from attnprof.analysis import queries as q
from attnprof.analysis.activities import KINDS, take_activities
from attnprof.analysis.attribution import Activity, Analysis, Forward
from attnprof.findings import _common as c
from attnprof.gpu import kernel_names as kn
from attnprof.trace.reader import Event
from attnprof.units import count, us

# Ops that only wrap a GEMM: the op that decided on fp32 is the first one above these.
GEMM_WRAPPERS = frozenset({"aten::matmul", "aten::bmm", "aten::mm", "aten::addmm", "aten::baddbmm",
                           "aten::linear", "aten::einsum", "aten::_unsafe_view"})
MATH = "aten::_scaled_dot_product_attention_math"


FP32_CUDA_CORE_GEMM = q.IS_GEMM | q.FP32 | q.CUDA_CORES  # decode's is_gemm, dtype fp32, tensor_cores False


def fp32_cuda_core_gemms(a: Analysis, fwd: Forward) -> list[Activity]:
    """The forward's kernels that are fp32 GEMMs on CUDA cores (by name), made from the GPU columns."""
    gemm = c.kernel_bits(a, fwd.gpu) & FP32_CUDA_CORE_GEMM == FP32_CUDA_CORE_GEMM
    at = np.flatnonzero((fwd.gpu.kind == KINDS.index("kernel")) & gemm)
    return take_activities(fwd.activities, at.tolist())


def _scope(chain: list[Event]) -> Event | None:
    """The innermost op above the GEMM wrappers: the op that chose to multiply in fp32."""
    return next((e for e in reversed(c.aten_only(chain)) if e.name not in GEMM_WRAPPERS), None)


def _casts(a: Analysis, fwd: Forward, scope: Event) -> list[Activity]:
    return [act for act in c.kernels_under(a, fwd, [scope])
            if any(e.name == "aten::_to_copy" for e in c.launch_chain(a, act, fwd))]


def _table(a: Analysis, acts: list[Activity], key) -> list[dict]:
    rows: dict[tuple, list[float]] = {}
    for act in acts:
        rows.setdefault(key(act), []).append(act.event.dur)
    out = [{**{name: list(v) if isinstance(v, tuple) else v for name, v in k},
            "per_forward": c.per_fwd(len(d), a), "time_us_per_forward": c.per_fwd(sum(d), a)}
           for k, d in rows.items()]
    return sorted(out, key=lambda r: -r["time_us_per_forward"])


def check(a: Analysis, facts: c.RunFacts = c.BARE) -> list[dict]:
    if not a.has_gpu or not c.works_in_16bit(a):
        return []
    gemms, casts, scopes = [], [], []
    each_g, each_k = [0.0] * len(a.forwards), [0.0] * len(a.forwards)  # per forward: medians, as the forward's
    for i, fwd in enumerate(a.forwards):
        seen: set[int] = set()
        for act in fp32_cuda_core_gemms(a, fwd):
            gemms.append(act)
            each_g[i] += act.event.dur
            scope = _scope(c.launch_chain(a, act, fwd))
            if scope is not None and id(scope) not in seen:
                seen.add(id(scope))
                scopes.append(scope.name)
                found = _casts(a, fwd, scope)
                casts.extend(found)
                each_k[i] += sum(x.event.dur for x in found)
    if not gemms:
        return []
    kernel_rows = _table(a, gemms, lambda x: (("name", x.event.name), ("short", kn.short_name(x.event.name)),
                                              ("tile", kn.decode(x.event.name).tile)))
    cast_rows = _table(a, casts, lambda x: (("to_dtype", kn.decode(x.event.name).cast_to),
                                            ("chain", tuple(e.name for e in c.launch_chain(a, x)))))
    g_us, k_us = c.median_over(each_g), c.median_over(each_k)
    cost = c.median_over([g + k for g, k in zip(each_g, each_k, strict=True)])
    where = list(dict.fromkeys(scopes))
    evidence = {"kernels": kernel_rows, "casts": cast_rows, "enclosing_ops": where,
                "gemm_time_us_per_forward": round(g_us, 3), "cast_time_us_per_forward": round(k_us, 3)}
    message = _message(kernel_rows, cast_rows, where, g_us, k_us, c.per_unit(a, facts))
    return [c.finding("fp32-gemm", c.severity(cost, a), message, evidence, _fix(where), cost)]


def _message(kernels: list[dict], casts: list[dict], where: list[str], g_us: float, k_us: float, each: str) -> str:
    n = sum(r["per_forward"] for r in kernels)
    text = (f"{count(n)} GEMM(s) {each} run in fp32 on CUDA cores, no tensor cores "
            f"({kernels[0]['short']}): {us(g_us)} {each}")
    if where:
        text += f", inside {', '.join(where)}"
    if casts:
        ups = sum(r["per_forward"] for r in casts if r["to_dtype"] == "fp32")
        downs = sum(r["per_forward"] for r in casts if r["to_dtype"] in kn.SIXTEEN_BIT)
        text += f"; around them {count(ups)} cast(s) to fp32, {count(downs)} to 16-bit ({us(k_us)})"
    return text


def _fix(where: list[str]) -> str:
    if MATH in where:
        return ("let SDPA use a fused backend (flash, efficient or cuDNN: 16-bit on tensor cores) instead of "
                "pinning SDPBackend.MATH; if math must run, "
                "torch.backends.cuda.allow_fp16_bf16_reduction_math_sdp(True) lets it keep 16-bit inputs")
    return ("if fp32 precision is not needed here, multiply 16-bit operands so cuBLAS picks a tensor-core "
            "kernel; for fp32 operands, torch.backends.cuda.matmul.allow_tf32 = True allows TF32 tensor "
            "cores")


RULE = c.Rule("fp32-gemm", scope="local", waste=True, check=check, walks_op_trees=True)
