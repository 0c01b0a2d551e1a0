"""memory-bound: attention calls whose cost is moving bytes, not FLOPs (decode against a KV cache).

From the recorded input shapes (record_shapes) of the attention op (SDPA's, or flex's Triton kernel op,
whose inputs include its output buffers): the bytes it must move at least (every tensor input read once,
SDPA's output written once) and its FLOPs (4 B Hq Sq Sk D, the mask unknown: an upper bound). Under
INTENSITY FLOP per byte no GPU this code runs on is compute-bound, so the call's speed is its bytes per
second. The evidence has the bytes, the rate reached and, where a run measured the device's copy
ceiling, that ceiling and the fraction of it (a bare trace cannot know it: null there).
"""

from __future__ import annotations

from attnprof.analysis import attention_calls as at
from attnprof.analysis.attribution import Analysis
from attnprof.findings import _common as c
from attnprof.units import mib, us

FAST_ENOUGH = 0.5  # a memory-bound call at half the copy ceiling or better is information, not a warning
INTENSITY = 50.0  # FLOP/byte: far below the ridge point of datacenter GPUs (~150 on A100, ~190 on H200)
FIX = ("a decode call is as fast as it reads the cache: keep K/V grouped (enable_gqa, no expansion), use the "
       "kernel that reaches the most bandwidth (cuDNN or flash's split-KV decode on Hopper), batch more sequences "
       "per call, or store the cache in fewer bytes (fp8/int8 KV cache)")


def moved(call: at.Call) -> tuple[int, float] | None:
    """(bytes, FLOPs) of a call from its op's input shapes; None without them."""
    op = call.ops[0] if call.ops else None
    if op is None or op.args is None or not op.args.input_dims:
        return None
    tensors = [i for i in range(len(op.args.input_dims)) if at.dims(op, i)]
    shapes = [at.dims(op, i) for i in tensors if len(at.dims(op, i)) == 4][:3]
    sizes = [c.tensor_bytes(op, i) for i in tensors]
    if len(shapes) < 3 or None in sizes:
        return None
    q, k = shapes[0], shapes[1]
    out = c.tensor_bytes(op, 0) if call.implementation == "sdpa" else 0  # flex passes its output buffer in
    flops = 4.0 * q[0] * q[1] * q[2] * k[2] * q[3]
    return sum(sizes) + out, flops


def check(a: Analysis, facts: c.RunFacts = c.BARE) -> list[dict]:
    if not a.has_gpu:
        return []
    rows: dict[str, dict] = {}
    for i, fwd in enumerate(a.forwards):
        for call in at.calls(a, fwd):
            found = moved(call)
            if found is None or not call.activities or found[1] / found[0] >= INTENSITY:
                continue
            row = rows.setdefault(call.label, {"implementation": call.label, "calls": 0, "bytes": 0, "flops": 0.0,
                                               "each_us": [0.0] * len(a.forwards)})
            row["calls"] += 1
            row["bytes"] += found[0]
            row["flops"] += found[1]
            row["each_us"][i] += call.gpu_us
    time = c.median_over([sum(each) for each in zip(*(r["each_us"] for r in rows.values()), strict=True)])
    if time <= 0:  # none, or the median forward ran none of these calls' GPU work: nothing to rate
        return []
    calls = [_per_forward(r, a) for r in rows.values()]
    nbytes = sum(r["bytes"] for r in calls)
    flops = sum(r["flops"] for r in rows.values())
    evidence = {"calls": calls, "bytes": nbytes, "time_us": round(time, 3),
                "achieved_bytes_per_s": nbytes / (time * 1e-6), "peak_bytes_per_s": None, "fraction": None,
                "intensity_flop_per_byte": round(flops / sum(r["bytes"] for r in rows.values()), 3),
                "unit": c.run_unit(a, facts)}
    message = (f"memory-bound: {', '.join(r['implementation'] for r in calls)} moves {mib(nbytes)} per "
               f"{evidence['unit']} at {evidence['intensity_flop_per_byte']:g} FLOP/byte, in {us(time)}: "
               f"{evidence['achieved_bytes_per_s'] / 1e12:.3g} TB/s")
    if not facts.copy_bytes_per_s:  # a bare trace cannot know the device's ceiling: information, no cost
        return [c.finding("memory-bound", "info", message, evidence, FIX, 0.0)]
    return [_against_copy(message, evidence, facts.copy_bytes_per_s)]


def _against_copy(message: str, ev: dict, peak: float) -> dict:
    """Rated against the device's measured copy bandwidth: the time above the floor it sets is the cost."""
    fraction, floor_us = ev["achieved_bytes_per_s"] / peak, ev["bytes"] / peak * 1e6
    ev |= {"peak_bytes_per_s": peak, "peak_basis": "measured device copy (read + write)",
           "fraction": round(fraction, 4), "floor_us": round(floor_us, 3)}
    cost = round(max(ev["time_us"] - floor_us, 0.0), 3)
    message += (f"; {fraction:.0%} of this device's measured copy bandwidth ({peak / 1e12:.3g} TB/s): "
                f"{us(cost)} above the {us(floor_us)} floor")
    return c.finding("memory-bound", "info" if fraction >= FAST_ENOUGH else "warn", message, ev, FIX, cost)


def _per_forward(r: dict, a: Analysis) -> dict:
    """An implementation's calls and bytes per forward, and its time: the median over the forwards, the
    statistic of every time shown per forward (analysis.queries.median_over)."""
    time_us = c.median_over(r["each_us"])
    bytes_per_forward = c.per_fwd(r["bytes"], a)
    return {"implementation": r["implementation"], "calls_per_forward": c.per_fwd(r["calls"], a),
            "bytes": bytes_per_forward, "time_us": time_us,
            "achieved_bytes_per_s": bytes_per_forward / (time_us * 1e-6) if time_us else None}


RULE = c.Rule("memory-bound", scope="forward", waste=False, check=check, walks_op_trees=True)
