"""gemm-alignment: a 16-bit GEMM whose reduction (K) or output-column (N) dimension is not a multiple of 8.

Tensor-core GEMM kernels move 16-bit operands in 16-byte vectors along the contiguous dimensions: a K or N
that is not a multiple of 8 elements makes cuBLAS fall back to slower kernels (or pad). M, the rows (tokens:
141 in a prefill, 1 in decode), is not vectorised over and never flagged. torch's anti-pattern matcher
(torch.profiler._pattern_matcher.MatMulDimInFP16Pattern) flags the same ops in a live profile; this
rule reads them from a trace with input shapes (`record_shapes=True`, as `attnprof lint` records).
GPU traces only: the cost is the GPU time of the kernels those ops launched.
"""

from __future__ import annotations

from collections import defaultdict

from attnprof.analysis.attribution import Analysis
from attnprof.findings import _common as c
from attnprof.trace.reader import Args
from attnprof.units import count, us

GEMM_OPS = ("aten::mm", "aten::bmm", "aten::addmm", "aten::baddbmm")
MULTIPLE = 8


def misaligned(args: Args | None) -> list[list[int]] | None:
    """The operands' shapes when a 16-bit GEMM (its args) has a K or N that is not a multiple of 8: the last two
    matrix operands are A [.., M, K] and B [.., K, N] (addmm's and baddbmm's bias comes first)."""
    if args is None or not args.input_dims or not args.input_type:
        return None
    typed = [(d, t) for d, t in zip(args.input_dims, args.input_type, strict=False)
             if isinstance(d, list) and len(d) >= 2 and all(isinstance(x, int) for x in d)]
    if len(typed) < 2 or not all(str(t) in c.SIXTEEN_BIT_TYPES for _, t in typed):
        return None
    shapes = [d for d, _ in typed]
    k, n = shapes[-2][-1], shapes[-1][-1]
    return shapes if k % MULTIPLE or n % MULTIPLE else None


def check(a: Analysis, facts: c.RunFacts = c.BARE) -> list[dict]:
    if not a.has_gpu:
        return []
    groups: dict[tuple, dict] = defaultdict(lambda: {"n": 0, "us": 0.0})
    each = [0.0] * len(a.forwards)  # per forward: the cost is their median, as the forward's time is
    for i, fwd in enumerate(a.forwards):
        at = sorted(i for name in GEMM_OPS for i in fwd.positions_named(name))
        odd = [(i, shapes) for i, args in zip(at, fwd.args_at(at), strict=True) if (shapes := misaligned(args))]
        for op, (_, shapes) in zip(c.take(fwd.cpu_ops, [i for i, _ in odd]), odd, strict=True):  # only those made
            g = groups[(op.name, str(shapes))]
            g["n"] += 1
            took = sum(act.event.dur for act in c.kernels_under(a, fwd, [op]))
            g["us"] += took
            each[i] += took
    if not groups:
        return []
    rows = [{"op": name, "shapes": shapes, "per_forward": c.per_fwd(g["n"], a),
             "time_us_per_forward": c.per_fwd(g["us"], a)}
            for (name, shapes), g in sorted(groups.items(), key=lambda kv: -kv[1]["us"])]
    cost = c.median_over(each)
    r = rows[0]
    message = (f"16-bit GEMM with K or N not a multiple of {MULTIPLE}: {r['op']} on {r['shapes']}, "
               f"{count(r['per_forward'])} {c.per_unit(a, facts)}, {us(r['time_us_per_forward'])}")
    fix = (f"pad the GEMM's dimensions to multiples of {MULTIPLE} (head_dim, hidden size, vocabulary: "
           "e.g. 100 -> 104) so cuBLAS can use its tensor-core kernels")
    return [c.finding("gemm-alignment", c.severity(cost, a), message, {"gemms": rows[:5]}, fix, cost)]


RULE = c.Rule("gemm-alignment", scope="local", waste=True, check=check)
