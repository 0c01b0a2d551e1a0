"""host-copy: a tensor made on the CPU and copied to the GPU inside the forward, on every call.

`torch.zeros(S, S).to("cuda")` or a mask built with `torch.ones(S, S).tril()` and moved with
`.to(x.device)` fills host memory, then a `Memcpy HtoD` crosses PCIe and the stream waits for it.
It shows as a `Memcpy HtoD` launched under `aten::to` / `aten::_to_copy` / `aten::copy_`. torch's own
anti-pattern matcher (torch.profiler._pattern_matcher.ExtraCUDACopyPattern) looks for the same thing
in a live profile (a fill_ or zero_ then aten::to); this rule reads it from any trace.
"""

from __future__ import annotations

from attnprof.analysis import copies
from attnprof.analysis.attribution import Analysis
from attnprof.findings import _common as c
from attnprof.units import count, mib, us

FIX = ("make the tensor on the GPU where it is used (`torch.zeros(..., device=x.device)`, "
       "`torch.ones(S, S, device=x.device).tril()`), or build it once and keep it on the module "
       "(`register_buffer`, which `.to(device)` moves with the weights)")


def check(a: Analysis, facts: c.RunFacts = c.BARE) -> list[dict]:
    if not a.has_gpu:
        return []
    found = [(cp, "host-to-device") for cp in copies.gpu_copies(a) if "HtoD" in cp.tail]
    rows = copies.rows(a, found, lambda top, kind: {"op": top.name})
    if not rows:
        return []
    evidence, cost = copies.evidence(a, rows, found)
    r = rows[0]
    each = c.per_unit(a, facts)
    more = f"; {len(rows) - 1} more chain(s), {us(cost)} {each} in all" if len(rows) > 1 else ""
    message = (f"host-to-device copy in the forward: {' → '.join(r['chain'])}: {count(r['per_forward'])} "
               f"{each}, {mib(r['bytes_per_forward'], 'size unknown')}, {us(r['time_us_per_forward'])}{more}")
    return [c.finding("host-copy", c.severity(cost, a), message, evidence, FIX, cost)]


RULE = c.Rule("host-copy", scope="local", waste=True, check=check, walks_op_trees=True)
