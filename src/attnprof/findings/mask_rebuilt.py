"""mask-rebuilt: a causal mask built inside every forward, and what applying it costs.

SDPA's math backend with is_causal=True builds the mask on every call: `aten::ones` → `tril`
(the bool triangle), `scalar_tensor`/`fill_` → `where` (to an additive -inf bias), then `add_`
onto the [B, H, S, S] scores. A mask built once outside the forward leaves no `tril`/`triu` in
it, so the triangle is the signature; the steps found around it (same parent op) are its
neighbours, up to the first op that applies the mask to the scores.
"""

from __future__ import annotations

from attnprof.analysis.attribution import Analysis, Forward
from attnprof.findings import _common as c
from attnprof.gpu import kernel_names as kn
from attnprof.trace.reader import Event
from attnprof.units import count, us

BUILDERS = ("aten::tril", "aten::triu", "aten::tril_", "aten::triu_")
CONSTRUCTORS = ("aten::ones", "aten::zeros", "aten::full", "aten::empty", "aten::ones_like", "aten::new_ones")
CONVERTERS = ("aten::scalar_tensor", "aten::where", "aten::logical_not", "aten::bitwise_not", "aten::fill_")
APPLIERS = ("aten::add_", "aten::add", "aten::masked_fill", "aten::masked_fill_")
LOOKAHEAD = 8  # siblings searched after the triangle for the op that applies it


def _steps(tree: c.OpTree, builder: Event) -> list[Event]:
    """The constructor right before the triangle, the triangle, and the steps after it."""
    parent = tree.parent(builder)
    siblings = tree.children(parent) if parent is not None else tree.roots
    i = next(k for k, e in enumerate(siblings) if e is builder)
    steps = [siblings[i - 1]] if i and siblings[i - 1].name in CONSTRUCTORS else []
    steps.append(builder)
    for e in siblings[i + 1 : i + 1 + LOOKAHEAD]:
        if e.name in BUILDERS:
            break
        if e.name in CONVERTERS + APPLIERS:
            steps.append(e)
        if e.name in APPLIERS:
            break
    return steps


def _measure(a: Analysis, fwd: Forward, steps: list[Event]) -> tuple[float, float, list]:
    """(build time, apply time, kernels) of the steps: GPU time when there is a GPU, else host."""
    build = apply = 0.0
    kernels = []
    for step in steps:
        acts = c.kernels_under(a, fwd, [step]) if a.has_gpu else []
        t = sum(x.event.dur for x in acts) if a.has_gpu else step.dur
        kernels.extend((x, step.name) for x in acts)
        if step.name in APPLIERS:
            apply += t
        else:
            build += t
    return build, apply, kernels


def check(a: Analysis, facts: c.RunFacts = c.BARE) -> list[dict]:
    builds, applies = [0.0] * len(a.forwards), [0.0] * len(a.forwards)  # per forward: medians, as the forward's
    chains: dict[tuple, int] = {}
    kernels: dict[tuple, list[float]] = {}
    parents: list[str] = []
    for i, fwd in enumerate(a.forwards):
        builders = fwd.ops_named(*BUILDERS)
        tree = c.op_tree(a, fwd) if builders else None
        for b in builders:
            steps = _steps(tree, b)
            t_build, t_apply, acts = _measure(a, fwd, steps)
            builds[i], applies[i] = builds[i] + t_build, applies[i] + t_apply
            key = tuple(s.name for s in steps)
            chains[key] = chains.get(key, 0) + 1
            parent = tree.parent(b)
            parents.append(parent.name if parent is not None else "(forward)")
            for act, op in acts:
                kernels.setdefault((kn.short_name(act.event.name), op), []).append(act.event.dur)
    if not chains:
        return []
    ops = list(max(chains, key=chains.get))
    rows = [{"kernel": k, "op": op, "per_forward": c.per_fwd(len(d), a),
             "time_us_per_forward": c.per_fwd(sum(d), a)}
            for (k, op), d in sorted(kernels.items(), key=lambda kv: -sum(kv[1]))]
    build, apply = c.median_over(builds), c.median_over(applies)
    where = max(set(parents), key=parents.count)
    evidence = {"ops": ops, "per_forward": c.per_fwd(sum(chains.values()), a), "enclosing_op": where,
                "kernels": rows, "build_time_us_per_forward": build, "apply_time_us_per_forward": apply,
                "time_basis": "GPU time of the kernels" if a.has_gpu else "host time of the ops"}
    cost = c.median_over([b + x for b, x in zip(builds, applies, strict=True)])
    message = _message(ops, where, rows, (build, apply, cost), a, c.per_unit(a, facts))
    return [c.finding("mask-rebuilt", c.severity(cost, a), message, evidence, _fix(where), cost)]


def _message(ops: list[str], where: str, rows: list[dict], times: tuple[float, float, float], a: Analysis,
             each: str) -> str:
    """`times`: building, applying and both, per forward (medians: both is the median of the sums)."""
    build, apply, both = times
    made = [o for o in ops if o not in APPLIERS]
    text = f"a causal mask is built inside every forward ({' → '.join(made)}, in {where})"
    applied = [o for o in ops if o in APPLIERS]
    if applied:
        text += f" and applied with {', '.join(applied)}"
    n = sum(r["per_forward"] for r in rows)
    launched = f"{count(n)} kernel(s), " if a.has_gpu else ""
    split = f"{us(build)} building, {us(apply)} applying"
    return f"{text}: {launched}{us(both)} {each} ({split})"


def _fix(where: str) -> str:
    if where in c.SDPA_BACKEND_OPS:
        return ("use a fused SDPA backend with is_causal=True (flash, efficient, cuDNN): the kernel masks "
                "inside its tiles and skips blocks above the diagonal; no mask tensor, no extra passes")
    return ("build the mask once outside the forward (a buffer sliced to the sequence length), or pass "
            "is_causal=True to scaled_dot_product_attention and let a fused kernel mask inside its tiles")


RULE = c.Rule("mask-rebuilt", scope="local", waste=True, check=check, walks_op_trees=True)
