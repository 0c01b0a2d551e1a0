"""hidden-copy: an out-of-place op that copies its input before doing its work.

`scores.masked_fill(mask, v)` is `clone` + `masked_fill_`: the clone is a full copy of the scores
(a `Memcpy DtoD` on a GPU) that the user never wrote. It shows as a copy under a user-visible op
that is not itself a copy op. Two kinds: a duplicate (`aten::clone`/`contiguous` inside the op:
masked_fill, reshape of a transposed view) and a conversion (`aten::_to_copy` inside the op:
softmax(dtype=float32) on 16-bit scores). What the user asked for (`x.clone()`, `x.to(...)`) is
not hidden; SDPA math's own upcasts are fp32-gemm's evidence. On CPU a conversion counts only
when shapes prove it is not a 0-dim scalar (every `x * 0.125` converts its Python scalar).
"""

from __future__ import annotations

from collections.abc import Iterator

from attnprof.analysis.attribution import Analysis
from attnprof.findings import _common as c
from attnprof.gpu import kernel_names as kn
from attnprof.trace.reader import Event
from attnprof.units import count, mib, us

DUPLICATE_OPS = ("aten::clone", "aten::contiguous")
TOP = 5  # chains listed; the rest are counted


def classify(chain: list[Event]) -> str | None:
    """'duplicate' or 'conversion' for a copy made under `chain`; None when it is not hidden."""
    names = [e.name for e in c.aten_only(chain)]
    if not names or names[0] in c.EXPLICIT_COPY_OPS:
        return None
    if "aten::_to_copy" in names:
        return None if c.SDPA_OP in names or any(n in c.SDPA_BACKEND_OPS for n in names) else "conversion"
    return "duplicate" if any(n in DUPLICATE_OPS for n in names) else None


def _gpu_copies(a: Analysis) -> Iterator[tuple]:
    """(chain, activity name, kind, time, bytes, target dtype) per copy activity."""
    for fwd in a.forwards:
        copies = c.ops_named(a, fwd, "aten::copy_")
        copied = {id(x) for x in c.kernels_under(a, fwd, copies)}  # an aten::copy_ in their chain
        for act in fwd.activities:
            dtod = act.kind == "memcpy" and "DtoD" in act.event.name
            if not dtod and id(act) not in copied:
                continue  # neither a device copy nor launched by a copy_: nothing to report
            chain = c.launch_chain(a, act, fwd)
            kind = classify(chain) if dtod or act.kind == "kernel" else None
            copy_op = next((e for e in reversed(chain) if e.name == "aten::copy_"), None)
            if kind and (dtod or copy_op is not None):
                nbytes = act.event.args.bytes if dtod and act.event.args else c.tensor_bytes(copy_op)
                to = kn.decode(act.event.name).cast_to if kind == "conversion" else None
                yield chain, kn.short_name(act.event.name), kind, act.event.dur, nbytes, to


def _cpu_copies(a: Analysis) -> Iterator[tuple]:
    for fwd in a.forwards:
        tree = c.op_tree(a, fwd)
        for op in fwd.ops_named("aten::copy_"):
            chain = tree.chain(op) + [op]
            kind, scalar = classify(chain), c.is_scalar(op)
            if kind and not scalar and (kind == "duplicate" or scalar is False):
                maker = next(e for e in reversed(chain) if e.name in DUPLICATE_OPS + ("aten::_to_copy",))
                yield chain, "", kind, maker.dur, c.tensor_bytes(op), None  # maker: allocation + copy


def _in_place_form(a: Analysis, top: Event) -> str | None:
    """`aten::masked_fill_` when the out-of-place op ran its own in-place form inside (clone + op_)."""
    fwd = next((f for f in a.forwards if any(op is top for op in f.ops_named(top.name))), None)
    if fwd is None:  # the op encloses the region itself: its children are not in view
        return None
    kids = {k.name for k in c.op_tree(a, fwd).children(top)}
    return top.name + "_" if top.name + "_" in kids else None


def _rows(a: Analysis, copies: Iterator[tuple]) -> list[dict]:
    groups: dict[tuple, dict] = {}
    for chain, tail, kind, dur, nbytes, to in copies:
        visible = c.aten_only(chain)
        g = groups.setdefault((tuple(e.name for e in visible), tail),
                              {"kind": kind, "to": to, "n": 0, "us": 0.0, "bytes": 0, "top": visible[0]})
        g["n"], g["us"] = g["n"] + 1, g["us"] + dur
        g["bytes"] = None if g["bytes"] is None or nbytes is None else g["bytes"] + nbytes
    return [{"chain": list(names) + ([tail] if tail else []), "kind": g["kind"], "to_dtype": g["to"],
             "per_forward": c.per_fwd(g["n"], a), "time_us_per_forward": c.per_fwd(g["us"], a),
             "bytes_per_forward": None if g["bytes"] is None else c.per_fwd(g["bytes"], a),
             "in_place_form": _in_place_form(a, g["top"]) if g["kind"] == "duplicate" else None}
            for (names, tail), g in sorted(groups.items(), key=lambda kv: -kv[1]["us"])]


def check(a: Analysis) -> list[dict]:
    rows = _rows(a, _gpu_copies(a) if a.has_gpu else _cpu_copies(a))
    if not rows:
        return []
    cost = round(sum(r["time_us_per_forward"] for r in rows), 3)
    sizes = [r["bytes_per_forward"] for r in rows]
    evidence = {"copies": rows[:TOP], "more_chains": max(len(rows) - TOP, 0), "time_us_per_forward": cost,
                "bytes_per_forward": None if None in sizes else sum(sizes),
                "time_basis": "GPU time of the copies" if a.has_gpu else "host time of the copying op"}
    return [c.finding("hidden-copy", c.severity(cost, a), _message(rows, cost), evidence, _fix(rows), cost)]


def _message(rows: list[dict], cost: float) -> str:
    r = rows[0]
    what = "copies its input" if r["kind"] == "duplicate" else (
        f"converts its input to {r['to_dtype'] or 'another type'} in a new tensor")
    more = f"; {len(rows) - 1} more chain(s), {us(cost)} per forward in all" if len(rows) > 1 else ""
    chain = " → ".join(r["chain"][1:])
    return (f"hidden copy: {r['chain'][0]} {what} ({chain}): {count(r['per_forward'])} per forward, "
            f"{mib(r['bytes_per_forward'], 'size unknown')}, {us(r['time_us_per_forward'])}{more}")


def _fix(rows: list[dict]) -> str | None:
    ops = list(dict.fromkeys(r["in_place_form"] for r in rows[:TOP] if r["in_place_form"]))
    text = [f"use the in-place form `{op.removeprefix('aten::')}` instead of {op[:-1]}: it writes into its "
            "input instead of copying it first (safe when autograd is off, e.g. under torch.no_grad(), or "
            "when the input is not needed again)" for op in ops]
    if any(r["kind"] == "conversion" for r in rows[:TOP]):
        text.append("for a conversion, let a kernel that reads 16-bit inputs and accumulates in fp32 do the "
                    "work (fused attention via scaled_dot_product_attention; softmax without dtype=)")
    return "; ".join(text) or None


RULE = c.Rule("hidden-copy", scope="local", waste=True, check=check)
