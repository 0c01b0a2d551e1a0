"""The copies of a forward, each with the chain of host ops that made it, for the rules that sort them
(hidden-copy, layout-copy) and for lint, which explains every copy it counts.

A copy is a `Memcpy DtoD` or a kernel launched under `aten::copy_` on a GPU, an `aten::copy_` op on the
CPU. Its chain (outermost first) says who asked for it: the user (`x.clone()`, `.contiguous()`,
`.to()`), an out-of-place op cloning its input for its in-place twin (`masked_fill` → clone →
`masked_fill_`), a matmul or reshape laying out a non-contiguous operand, or a conversion.
"""

from __future__ import annotations

from collections.abc import Callable, Iterator, Sequence
from dataclasses import dataclass
from itertools import chain as chain_from

import numpy as np

from attnprof.analysis import launches
from attnprof.analysis import queries as q
from attnprof.analysis.activities import KINDS, GpuColumns
from attnprof.analysis.attribution import Analysis, Forward
from attnprof.analysis.columns import distinct
from attnprof.analysis.ops import EXPLICIT_COPY_OPS, SDPA_BACKEND_OPS, SDPA_OP, input_bytes, is_scalar, tensor_bytes
from attnprof.analysis.phases import BACKWARD_OP
from attnprof.analysis.rows import OpRows, args_at, names_at, take
from attnprof.gpu import kernel_names as kn
from attnprof.trace.reader import Event

DUPLICATE_OPS = ("aten::clone", "aten::contiguous")
# ops that copy a non-contiguous operand into the layout they compute on (reshape of a strided view,
# the batch flattening of matmul); `flatten` and `view_as` reach reshape's copy as well
LAYOUT_OPS = frozenset({"aten::matmul", "aten::reshape", "aten::flatten", "aten::einsum", "aten::bmm",
                        "aten::tensordot", "aten::linear", "aten::_unsafe_view"})
TOP = 5  # chains a finding lists; the rest are counted
ATEN = "aten::"


@dataclass(frozen=True, slots=True)
class ChainNames:
    """What the names of a chain say, sorted once and shared by the copies of that chain."""
    names: tuple[str, ...]  # outermost first
    asked_by: str  # `kind` of the chain
    copy_at: int | None  # where its innermost copy_ is in it (None: none)
    top_index: int | None  # where its outermost aten op is in it (None: no aten op)
    aten: tuple[str, ...]  # its aten ops' names (the rows' key)


@dataclass(frozen=True, slots=True)
class Copy:
    ops: Sequence[Event]  # the host ops its chain is found among (a forward's cpu_ops, the analysis's)
    at: tuple[int, ...]  # where the aten and user ops enclosing the copy are in `ops`, outermost first
    tail: str  # the GPU activity's short name ("" on the CPU)
    dur: float  # µs: GPU time of the copy, or host time of the op that made it
    nbytes: int | None
    to: str | None  # target dtype of a conversion, where the kernel name says
    sorted: ChainNames  # its chain's names and who asked for it (three rules and lint ask)
    forward: int = 0  # which of the analysis's forwards it is in: a cost is the median over them

    @property
    def asked_by(self) -> str:
        return self.sorted.asked_by

    @property
    def names(self) -> list[str]:
        """The chain's names (read from the name codes when the copy was found: no event made)."""
        return list(self.sorted.names)

    @property
    def chain(self) -> list[Event]:
        """The chain's ops, outermost first (made when asked: most copies are sorted by their names)."""
        return take(self.ops, list(self.at))

    @property
    def top(self) -> Event:
        """The outermost aten op of the chain."""
        return self.ops[self.top_at]

    @property
    def top_at(self) -> int:
        """Where `top` is in `ops`."""
        if self.sorted.top_index is None:
            raise ValueError(f"a chain of no aten op has no top: {self.sorted.names}")
        return self.at[self.sorted.top_index]


def sort_chain(names: tuple[str, ...]) -> ChainNames:
    """What a chain of these names says (`ChainNames`)."""
    copy_at = next((j for j in range(len(names) - 1, -1, -1) if names[j] == "aten::copy_"), None)
    top_index = next((j for j, n in enumerate(names) if n.startswith(ATEN)), None)
    return ChainNames(names, kind(list(names)), copy_at, top_index, tuple(n for n in names if n.startswith(ATEN)))


# what each kind of copy is, for lint, which explains every copy it counts
WHY = {
    "explicit": "the code asks for it ({top})",
    "sdpa": "inside SDPA's math path (its own layouts and upcasts: sdpa-dispatch and fp32-gemm explain them)",
    "conversion": "{top} converts its input to another dtype in a new tensor",
    "scalar": "a Python scalar made a 0-dim tensor for {top} (a few bytes)",
    "layout": "{top} copies a non-contiguous operand into the layout it computes on (layout-copy)",
    "duplicate": "{top} copies its input first",
    "hidden": "{top} copies its input before running its in-place twin (hidden-copy)",
    "in-op": "{top} fills its own output with copy_ as part of its work (addmm writes the bias first)",
    "backward": "{top} inside the backward: autograd's own work for the forward's op, not a line to change",
}


def kind(chain: list[str]) -> str:
    """Who asked for a copy, from the names of its chain: backward | explicit | sdpa | conversion | layout |
    duplicate | in-op."""
    if any(n.startswith(BACKWARD_OP) for n in chain):
        return "backward"  # a backward node's copy: the fix of the forward op (in place, layout) is not its
    names = [n for n in chain if n.startswith(ATEN)]
    if not names or names[0] in EXPLICIT_COPY_OPS:
        return "explicit"
    if SDPA_OP in names or any(n in SDPA_BACKEND_OPS for n in names):
        return "sdpa"  # SDPA math's own upcasts and layouts are sdpa-dispatch's and fp32-gemm's evidence
    if "aten::_to_copy" in names:
        return "conversion"
    maker = next((i for i, n in enumerate(names) if n in DUPLICATE_OPS), None)
    if maker is None:
        return "in-op"
    return "layout" if any(n in LAYOUT_OPS for n in names[:maker]) else "duplicate"


def gpu_copies(a: Analysis) -> list[Copy]:
    """Every forward's GPU copies (made once per analysis: three rules and lint sort the same copies)."""
    return q.per(a, "gpu copies", a, lambda x: list(_gpu_copies(x)))


def cpu_copies(a: Analysis) -> list[Copy]:
    return q.per(a, "cpu copies", a, lambda x: list(_cpu_copies(x)))


def _gpu_copies(a: Analysis) -> Iterator[Copy]:
    for i, fwd in enumerate(a.forwards):
        gpu = fwd.gpu
        memcpy = np.flatnonzero(gpu.kind == KINDS.index("memcpy"))  # only their names tested, once each
        codes, each = np.unique(gpu.name[memcpy], return_inverse=True)
        dtod = memcpy[np.array([_dtod(gpu.names[c]) for c in codes.tolist()], np.bool_)[each.reshape(-1)]]
        at = sorted({*dtod.tolist(), *launches.under_named(a, fwd, "aten::copy_")})  # or a copy_ in their chain
        yield from _copies_at(gpu, at, *launches.launch_chain_positions(a, fwd, at), i)


def _copies_at(gpu: GpuColumns, at: list[int], ops: Sequence[Event], chains: list[list[int]],
               forward: int) -> Iterator[Copy]:
    """The copies of the GPU work at `at`, their chains at `chains` among `ops`: the chains' names read in
    one gather, each distinct chain of names sorted once, each distinct kernel name decoded once, the args
    read only where a copy's size is its innermost copy_'s input."""
    names = names_at(ops, list(chain_from.from_iterable(chains)))
    sorted_chains: dict[tuple[str, ...], ChainNames] = {}
    codes = gpu.name[at]
    kernels = {code: _kernel(gpu.names[code]) for code in distinct(codes).tolist()}
    device = gpu.kind[at] == KINDS.index("memcpy")
    device[device] = [kernels[code][2] for code in codes[device].tolist()]
    gargs = gpu.args[at].tolist()
    found, by_args, sized_at, start = [], [], [], 0
    for chain, on_device, garg in zip(chains, device.tolist(), gargs, strict=True):
        end, start = start, start + len(chain)
        key = tuple(names[end:start])
        sort = sorted_chains.get(key) or sorted_chains.setdefault(key, sort_chain(key))
        found.append(sort)
        by_args.append(on_device and gpu.arg_sets[garg])
        if not by_args[-1] and sort.copy_at is not None:
            sized_at.append(chain[sort.copy_at])
    sizes = iter(map(input_bytes, args_at(ops, sized_at)))
    for chain, sort, code, device_args, dur in zip(chains, found, codes.tolist(), by_args, gpu.dur[at].tolist(),
                                                  strict=True):
        short, to, _ = kernels[code]
        nbytes = device_args.bytes if device_args else (None if sort.copy_at is None else next(sizes))
        yield Copy(ops, tuple(chain), short, dur, nbytes, to, sort, forward)


def _kernel(name: str) -> tuple[str, str | None, bool]:
    """A copy's GPU activity name: its short name, the dtype it casts to, whether it is a device copy."""
    return kn.short_name(name), kn.decode(name).cast_to, _dtod(name)


def _dtod(name: str) -> bool:
    return "DtoD" in name


def _cpu_copies(a: Analysis) -> Iterator[Copy]:
    for f, fwd in enumerate(a.forwards):
        tree = q.op_tree(a, fwd)
        spans = q.op_columns(a, fwd)
        for i in fwd.positions_named("aten::copy_"):
            chain = [*tree.chain_positions(i), i]
            names = fwd.names_at(chain)
            maker = next((p for p, n in zip(reversed(chain), reversed(names), strict=True)
                          if n in DUPLICATE_OPS + ("aten::_to_copy",)), i)
            yield Copy(fwd.cpu_ops, tuple(chain), "", float(spans.dur[maker]), tensor_bytes(fwd.cpu_ops[i]),
                       None, sort_chain(tuple(names)), f)  # maker: allocation + copy


def copies(a: Analysis) -> list[Copy]:
    return gpu_copies(a) if a.has_gpu else cpu_copies(a)


def in_place_form(a: Analysis, top: Event) -> str | None:
    """`aten::masked_fill_` when the out-of-place op ran its own in-place form inside (clone + op_)."""
    return _in_place_form(a, q.where_is(a, top), top.name)


def _in_place_form(a: Analysis, found: tuple[Forward, int] | None, name: str) -> str | None:
    """`in_place_form` of the op called `name` at `found` (its forward and place there)."""
    if found is None:  # the op encloses the region itself: its children are not in view
        return None
    fwd, at = found
    kids = set(fwd.names_at(q.op_tree(a, fwd).kid_positions(at)))
    return name + "_" if name + "_" in kids else None


def explained_kind(a: Analysis, copy: Copy) -> str:
    """`kind`, with a duplicate whose op ran its in-place twin as `hidden` and a CPU scalar conversion
    as `scalar`: a key of WHY. Those of all the analysis's copies are worked out together at the first ask."""
    every = q.per(a, "explained kinds", a, lambda x: dict(zip(map(id, copies(x)), explained_kinds(x, copies(x)),
                                                              strict=True)))
    found = every.get(id(copy))
    return found if found is not None else explained_kinds(a, [copy])[0]


def explained_kinds(a: Analysis, found: list[Copy]) -> list[str]:
    """`explained_kind` of each copy: the duplicates' top ops' children looked at all at once."""
    kinds = [cp.asked_by for cp in found]
    if not a.has_gpu:
        kinds = ["scalar" if k == "conversion" and scalar_conversion(cp) else k
                 for cp, k in zip(found, kinds, strict=True)]
    duplicates = [i for i, k in enumerate(kinds) if k == "duplicate"]
    for i, twin in zip(duplicates, _in_place_forms(a, [found[i] for i in duplicates]), strict=True):
        if twin:
            kinds[i] = "hidden"
    return kinds


def _in_place_forms(a: Analysis, found: list[Copy]) -> list[str | None]:
    """`in_place_form` of each copy's top op: where its ops are rows, by the op's row and the name codes of
    its children (no op made), for all of them at once."""
    out = [None if isinstance(cp.ops, OpRows) else in_place_form(a, cp.top) for cp in found]
    by_rows = [i for i, cp in enumerate(found) if isinstance(cp.ops, OpRows)]
    if not by_rows:
        return out
    cols = a.trace.columns
    rows = np.array([found[i].ops.rows[found[i].top_at] for i in by_rows], np.int64)
    top = cols.name[rows]
    twin = {c: cols.code("names", cols.names[c] + "_") for c in distinct(top).tolist()}
    wanted = np.array(list(map(twin.__getitem__, top.tolist())), np.int64)  # -1: no op has the name
    forward, at = q.where_are_rows(a, rows)
    ran = np.zeros(len(rows), np.bool_)
    for f in distinct(forward[(forward >= 0) & (wanted >= 0)]).tolist():
        mine = np.flatnonzero((forward == f) & (wanted >= 0))
        fwd = a.forwards[f]
        owner, kids = q.op_tree(a, fwd).kids_of(at[mine])
        ran[mine[owner[cols.name[fwd.rows[kids]] == wanted[mine][owner]]]] = True
    twin_names = {c: cols.names[c] + "_" for c in distinct(top[ran]).tolist()}
    for k, c in zip(np.flatnonzero(ran).tolist(), top[ran].tolist(), strict=True):
        out[by_rows[k]] = twin_names[c]
    return out


def scalar_conversion(copy: Copy) -> bool:
    """On the CPU every `x * 0.125` converts its Python scalar: a conversion counts only when shapes
    prove it is not a 0-dim scalar."""
    op = copy.ops[copy.at[-1]] if copy.at else None
    return op is not None and op.name == "aten::copy_" and is_scalar(op) is not False


def rows(a: Analysis, found: list[tuple[Copy, str]], extra: Callable[[Event, str], dict]) -> list[dict]:
    """One row per distinct chain of (copy, kind), costliest first; `extra(top op, kind)` adds fields."""
    groups: dict[tuple, dict] = {}
    for cp, k in found:
        key = (cp.sorted.aten, cp.tail, k)
        g = groups.get(key) or groups.setdefault(key, {"kind": k, "to": cp.to, "n": 0, "us": 0.0, "bytes": 0,
                                                       "top": cp.top})
        g["n"], g["us"] = g["n"] + 1, g["us"] + cp.dur
        g["bytes"] = None if g["bytes"] is None or cp.nbytes is None else g["bytes"] + cp.nbytes
    return [{"chain": list(names) + ([tail] if tail else []), "kind": g["kind"],
             "to_dtype": g["to"] if g["kind"] == "conversion" else None,
             "per_forward": q.per_fwd(g["n"], a), "time_us_per_forward": q.per_fwd(g["us"], a),
             "bytes_per_forward": None if g["bytes"] is None else q.per_fwd(g["bytes"], a),
             **extra(g["top"], g["kind"])}
            for (names, tail, _), g in sorted(groups.items(), key=lambda kv: -kv[1]["us"])]


def evidence(a: Analysis, rows_: list[dict], found: list[tuple[Copy, str]]) -> tuple[dict, float]:
    """The evidence of `rows_` (the chains of the copies `found`) and their cost: the median over the forwards
    of each forward's copies' time, as the forward's own time is (queries.median_over)."""
    each = [0.0] * len(a.forwards)
    for cp, _ in found:
        each[cp.forward] += cp.dur
    cost = q.median_over(each)
    sizes = [r["bytes_per_forward"] for r in rows_]
    return ({"copies": rows_[:TOP], "more_chains": max(len(rows_) - TOP, 0), "time_us_per_forward": cost,
             "bytes_per_forward": None if None in sizes else sum(sizes),
             "time_basis": "GPU time of the copies" if a.has_gpu else "host time of the copying op"}, cost)
