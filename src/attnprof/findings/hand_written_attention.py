"""hand-written-attention: attention computed op by op, on any trace (a variant, a whole model's forward or
training step), not only in lint.

The chain is matmul/bmm -> (scale, mask, casts) -> softmax -> matmul/bmm among the ops user code called
(the outermost aten ops of the forward phase, on one thread); SDPA's math backend runs such a chain
inside `scaled_dot_product_attention`, which is not user code, so it does not count. Each call writes the
[.., Sq, Sk] scores to memory and reads them back several times; a fused kernel keeps them on chip and
launches once. Its cost is the GPU time of everything in the chain but the two GEMMs (on a CPU trace,
the host time of those ops), the part a fused kernel does not spend at all. The evidence also lists every
attention call of the region by implementation, with its share of the region's time.
"""

from __future__ import annotations

from attnprof.analysis import attention_calls as at
from attnprof.analysis import queries as q
from attnprof.analysis.activities import gathered
from attnprof.analysis.attribution import Analysis
from attnprof.analysis.ops import input_bytes
from attnprof.analysis.phases import unit
from attnprof.analysis.rows import args_each
from attnprof.findings import _common as c
from attnprof.units import count, mib, us

FIX = ("one torch.nn.functional.scaled_dot_product_attention call with the chain's own mask and scale "
       "(is_causal=True only for a top-left causal mask; enable_gqa=True for grouped K/V heads), or "
       "attn_implementation='sdpa' in transformers: one fused kernel, no scores in memory; `attnprof lint` "
       "names the exact call, or why none is equivalent")


def check(a: Analysis, facts: c.RunFacts = c.BARE) -> list[dict]:
    placed = [(i, call) for i, fwd in enumerate(a.forwards) for call in at.calls(a, fwd)
              if call.implementation == "hand-written"]
    if not placed:
        return []
    found = [call for _, call in placed]
    time, extra = [0.0] * len(a.forwards), [0.0] * len(a.forwards)  # per forward: medians, as the region's
    acts = 0
    for (i, call), (took, outside) in zip(placed, _times(a, found), strict=True):
        time[i] += took
        extra[i] += outside
        acts += len(call.activities)
    scores = _scores(found)
    region = c.median_over([at.region_time_us(a, f) for f in a.forwards])
    first = found[0]
    evidence = {
        "calls_per_forward": c.per_fwd(len(found), a), "time_us_per_forward": c.median_over(time),
        "share_of_region": round(c.median_over(time) / region, 4) if region else None,
        "removable_us_per_forward": c.median_over(extra),
        "gpu_activities_per_call": round(acts / len(found), 3) if a.has_gpu else None,
        "chain": list(first.names), "scores_dims": scores[0] if scores else None,
        "scores_bytes": scores[1] if scores else None, "unit": unit(a),
        "time_basis": "GPU time" if a.has_gpu else "host time", "attention_calls": at.summary(a),
    }
    cost = evidence["removable_us_per_forward"]
    return [c.finding("hand-written-attention", c.severity(cost, a), _message(evidence), evidence, FIX, cost)]


def _times(a: Analysis, calls: list[at.Call]) -> list[tuple[float, float]]:
    """Per call: its time, and the part of it outside the two GEMMs (the GPU time of its other kernels on a
    GPU trace, the host time of its other ops on a CPU trace); a GPU trace's read in one gather."""
    if not a.has_gpu:
        return [(call.host_us, sum(op.dur for op, name in zip(call.ops, call.names, strict=True)
                                   if name not in at.MATMULS)) for call in calls]
    each = [call.activities for call in calls]
    durs = gathered(each, lambda gpu, where: gpu.dur[where].tolist())
    gemms = gathered(each, lambda gpu, where: (q.kernel_bits(a, gpu)[where] & q.IS_GEMM != 0).tolist())
    return [(sum(d), sum(x for x, gemm in zip(d, g, strict=True) if not gemm)) for d, g in zip(durs, gemms,
                                                                                            strict=True)]


def _scores(calls: list[at.Call]) -> tuple[list[int], int] | None:
    """The softmax input's dims and bytes of the first call whose trace recorded them (shapes)."""
    softmaxes = [next(i for i, name in enumerate(call.names) if name in at.SOFTMAXES) for call in calls]
    for args in args_each([call.ops for call in calls], softmaxes):  # from the trace's table of args: no op made
        shape, nbytes = at.input_dims(args, 0), input_bytes(args, 0)
        if shape and nbytes:
            return shape, nbytes
    return None


def _message(ev: dict) -> str:
    chain = " → ".join(name.removeprefix("aten::") for name in ev["chain"])
    share = f" ({ev['share_of_region']:.0%} of the region)" if ev["share_of_region"] is not None else ""
    launches = (f", {count(ev['gpu_activities_per_call'])} GPU activities per call where a fused kernel launches one"
                if ev["gpu_activities_per_call"] is not None else "")
    scores = (f"; it writes the {ev['scores_dims']} scores ({mib(ev['scores_bytes'])}) and reads them back"
              if ev["scores_dims"] else "; it writes the [.., Sq, Sk] scores and reads them back")
    return (f"hand-written attention ({chain}): {count(ev['calls_per_forward'])} call(s) per {ev['unit']}, "
            f"{us(ev['time_us_per_forward'])}{share}{launches}{scores}; "
            f"{us(ev['removable_us_per_forward'])} of it is outside the two GEMMs")


RULE = c.Rule("hand-written-attention", scope="forward", waste=True, check=check, walks_op_trees=True)
