"""dense-mask: scaled_dot_product_attention given a materialized [.., Sq, Sk] mask.

A mask tensor is what SDPA's fused backends do worst with: flash refuses any attn_mask, and cuDNN and
the memory-efficient kernel read it tile by tile and compute every tile, masked or not, where
is_causal (or flex_attention's block mask, for windows and documents) lets them skip the tiles the
mask empties. Found from the SDPA op's recorded input shapes (record_shapes): its fourth input has the
scores' last two dims. A run knows the mask itself and adds the share of tiles it empties (and what
computing them costs); a trace cannot see the mask's values.
"""

from __future__ import annotations

from attnprof.analysis import attention_calls as at
from attnprof.analysis.attribution import Analysis
from attnprof.findings import _common as c
from attnprof.units import count, mib, us

MASK_ARG = 3  # scaled_dot_product_attention(query, key, value, attn_mask, ...)
EXCLUDES = {"flash": "refuses any attn_mask",
            "cudnn": "reads the mask and computes every tile, masked or not",
            "efficient": "reads the mask and computes every tile, masked or not"}
FIX = ("is_causal=True for a causal mask; for a sliding window or documents, flex_attention with a block mask "
       "(create_block_mask once, outside the forward): the kernel skips the tiles the mask empties")


def _dense(call: at.Call) -> list[int] | None:
    """The mask's dims when the call was given one as large as its scores."""
    op = call.ops[0]
    q, k, mask = at.dims(op, 0), at.dims(op, 1), at.dims(op, MASK_ARG)
    if not (q and k and mask) or len(mask) < 2:
        return None
    return mask if mask[-2:] == [q[-2], k[-2]] and q[-2] > 1 else None  # one query row: nothing to skip


def check(a: Analysis, facts: c.RunFacts = c.BARE) -> list[dict]:
    n, backends, shape, nbytes = 0, {}, None, None
    times = [0.0] * len(a.forwards)  # per forward: the cost is their median, as the forward's time is
    for i, fwd in enumerate(a.forwards):
        for call in at.calls(a, fwd):
            mask = _dense(call) if call.implementation == "sdpa" else None
            if mask is None:
                continue
            n += 1
            times[i] += call.time_us(a.has_gpu)
            backends[call.backend] = backends.get(call.backend, 0) + 1
            shape, nbytes = mask, c.tensor_bytes(call.ops[0], MASK_ARG)
    if not n:
        return []
    backend = max(backends, key=backends.get)
    evidence = {"calls_per_forward": c.per_fwd(n, a), "mask_dims": shape, "mask_bytes": nbytes,
                "backend": backend, "excludes": EXCLUDES, "time_us_per_forward": c.median_over(times),
                "masked_tile_share": None, "unit": c.run_unit(a, facts)}
    message = (f"scaled_dot_product_attention is given a dense {shape} mask ({mib(nbytes)}), "
               f"{count(evidence['calls_per_forward'])} call(s) per {evidence['unit']} on the {backend} backend, "
               f"{us(evidence['time_us_per_forward'])}: the CUDA flash kernel refuses a mask, cuDNN and efficient "
               "compute every tile")
    share = facts.masked_tile_share  # a run knows its mask; a trace does not see the mask's values
    if share is None:
        return [c.finding("dense-mask", "warn", message, evidence, FIX, 0.0)]
    evidence["masked_tile_share"] = round(share, 4)
    cost = round(evidence["time_us_per_forward"] * share, 3)
    if share:
        message += f"; the mask empties {share:.0%} of the 128x128 score tiles, computed for nothing (~{us(cost)})"
    return [c.finding("dense-mask", "warn", message, evidence, FIX, cost)]


RULE = c.Rule("dense-mask", scope="local", waste=True, check=check, walks_op_trees=True)
