"""Queries the rules share over an Analysis: per-analysis caching and per-forward arithmetic, kernels by name,
the names passing a test, a forward's ops as columns and its op tree, where an op is (the ops enclosing a
launch and the GPU work a host op launched: analysis/launches.py). Each answer is built once per forward (or
analysis) and cached on the Analysis; on a whole-model trace a forward has thousands of ops, so the builds are
array operations.
"""

from __future__ import annotations

import statistics
from collections.abc import Callable, Sequence

import numpy as np

from attnprof.analysis.activities import KINDS, GpuColumns, NamedGroups, named_groups
from attnprof.analysis.attribution import Analysis, Forward, all_gpu
from attnprof.analysis.columns import Spans, distinct, spans_at, spans_of, thread_codes
from attnprof.analysis.name_tests import BLOB, Among, Starting, made_afresh, may_hold, name_tests, passing
from attnprof.analysis.nesting import OpTree
from attnprof.analysis.noise import quartiles
from attnprof.analysis.rows import OpRows
from attnprof.gpu import kernel_names as kn
from attnprof.trace.names import Names
from attnprof.trace.reader import Args, Event


def per(a: Analysis, kind: str, owner: object, build: Callable):
    """`build(owner)`, made once per analysis and `owner` (a forward, a launch, a name, the analysis),
    kept in the analysis's own cache so that it dies with it. Keyed by identity; an entry counts only
    while it holds that very owner, since ids get reused."""
    store = a.caches.setdefault(kind, {})
    if owner is a:  # one value per kind (holding `a` itself here would make a cycle)
        if None not in store:
            store[None] = build(a)
        return store[None]
    found = store.get(id(owner))
    if found is None or found[0] is not owner:
        found = store[id(owner)] = (owner, build(owner))
    return found[1]


def n_forwards(a: Analysis) -> int:
    return max(len(a.forwards), 1)


def per_fwd(total: float, a: Analysis) -> float:
    """A total over all forwards, as an average per forward (counts and bytes; a time is `median_over`)."""
    x = round(total / n_forwards(a), 3)
    return int(x) if x.is_integer() and abs(x) >= 1024 else x  # byte counts read better as integers


def median_over(each: Sequence[float]) -> float:
    """The median over the forwards of a time taken per forward (`each`: one value per forward, 0 where a
    forward has none): every time a report shows per forward (the forward's own, an attention call's, a
    finding's cost) is this statistic of the same forwards, so that a part never exceeds its whole (each
    forward's part is at most its whole, and the order statistics keep that order); a mean would let one slow
    forward of three give a call more time than the median forward it is in."""
    return round(float(statistics.median(each)), 3) if len(each) else 0.0


def each_forward(a: Analysis, at: np.ndarray) -> list[float]:
    """The GPU time of the activities at `at` (positions in `all_gpu(a)`, forward after forward) summed per
    forward: what `median_over` takes."""
    n = len(a.forwards)
    edges = np.cumsum([len(f.gpu.dur) for f in a.forwards])  # where each forward's activities end
    gpu = all_gpu(a)
    if len(at) == 0:
        return [0.0] * n
    if len(gpu.dur) != int(edges[-1]):  # not laid out forward after forward: each forward its mean share
        return [float(np.sum(gpu.dur[at])) / n] * n
    which = np.searchsorted(edges, at, side="right")
    return np.bincount(which, weights=gpu.dur[at], minlength=len(a.forwards)).tolist()


def spread_over(each: Sequence[float]) -> dict:
    """`median_over` with its spread over the forwards: {"median", "p25", "p75", "n"}."""
    if not len(each):
        return {"median": 0.0, "p25": 0.0, "p75": 0.0, "n": 0}
    lo, mid, hi = quartiles([float(x) for x in each])
    return {"median": round(mid, 3), "p25": round(lo, 3), "p75": round(hi, 3), "n": len(each)}


def kernels_by_name(a: Analysis) -> NamedGroups:
    """Every forward's kernels grouped by name, first seen first: where they are in `all_gpu(a)`, in order
    (`.items()`: (name, positions)); built once per analysis."""
    return per(a, "kernels by name", a, _kernels_by_name)


def _kernels_by_name(a: Analysis) -> NamedGroups:
    gpu = all_gpu(a)
    kernels = np.flatnonzero(gpu.kind == KINDS.index("kernel"))
    return named_groups(gpu.names, gpu.name[kernels], kernels)


def kernels_named(a: Analysis, test: Callable[[str], bool], could: int = 0) -> dict[str, np.ndarray]:
    """`kernels_by_name(a)`'s groups whose name passes `test` ({name: positions}, first seen first); `could`
    as `gpu_named`'s: no str made for a name the prefilter drops."""
    groups, passing = kernels_by_name(a), _passing(a, test, could)
    keep, bounds = np.flatnonzero(passing[groups.codes]), groups.bounds
    return {groups.names[code]: groups.positions[bounds[g]:bounds[g + 1]]
            for g, code in zip(keep.tolist(), groups.codes[keep].tolist(), strict=True)}


def gpu_named(a: Analysis, gpu: GpuColumns, test: Callable[[str], bool], could: int = 0) -> np.ndarray:
    """Per activity of `gpu` (`all_gpu(a)` or a forward's `gpu`): whether its name passes `test`, each
    distinct name of the analysis's GPU work tested once per analysis. `could` (kernel_names.GEMM or
    ATTENTION): `test` passes only names that could be such a kernel's, so only those are tested, found
    for all names at once (`kernel_names.could_be_each`)."""
    if gpu.names is not all_gpu(a).names:  # a forward made from events codes its own names
        return gpu.named(lambda name: bool(kn.could_be(name) & could or not could) and test(name))
    return gpu.named(test, _passing(a, test, could))


def _passing(a: Analysis, test: Callable[[str], bool], could: int) -> np.ndarray:
    """Per name code of `all_gpu(a)`: whether the name passes `test`, made once per analysis and test (a
    prefix or set test on the trace's own names: `name_tests`', on the names' bytes)."""
    if isinstance(test, Starting | Among) and all_gpu(a).names is a.trace.columns.names:
        return name_tests(a, test)
    return per(a, ("gpu names passing", test), a, lambda _: _name_tests(a, all_gpu(a), test, could))


def _name_tests(a: Analysis, gpu: GpuColumns, test: Callable[[str], bool], could: int) -> np.ndarray:
    codes = per(a, "gpu name codes", a, lambda _: distinct(gpu.name))
    table = np.zeros(len(gpu.names), np.bool_)
    if could:  # only the names that could pass, each made for this test
        codes = codes[per(a, "gpu names could be", a, lambda _: _could_be(gpu, codes)) & could != 0]
        table[codes] = list(map(test, map(gpu.names.__getitem__, codes.tolist())))
    else:  # every name: made once for all such tests
        table[codes] = list(map(test, per(a, "gpu names", a, lambda _: list(map(gpu.names.__getitem__, codes)))))
    return table


def _could_be(gpu: GpuColumns, codes: np.ndarray) -> np.ndarray:
    """kernel_names.could_be of the name of each of `codes`: from a blob of them at a time where the names
    are the trace's (`Names`; BLOB names a blob: its three copies, joined, without the anonymous namespace
    and lowered, stay a few MB), else name by name."""
    if isinstance(gpu.names, Names):
        return np.concatenate([np.zeros(0, np.uint8), *(kn.could_be_each(*gpu.names.joined(codes[i:i + BLOB]))
                                                        for i in range(0, len(codes), BLOB))])
    return np.fromiter(map(kn.could_be, map(gpu.names.__getitem__, codes.tolist())), np.uint8, len(codes))


# What the rules read of kernel_names.decode, per name that could be a GEMM's or an attention kernel's: bits
IS_GEMM, IS_ATTENTION, TENSOR_CORES, CUDA_CORES, FP32 = 1, 2, 4, 8, 16


def decoded_bits(name: str) -> int:
    """What kernel_names.decode says of `name` that the rules test, as bits (CUDA_CORES: tensor_cores is False;
    FP32: dtype "fp32"). Decoded afresh, not through decode's cache, which would keep every name's KernelInfo
    and str: a trace of unique names has thousands of GEMMs (~5 MB on unique64), each asked for once here."""
    info = kn.decode.__wrapped__(name)
    return (IS_GEMM * info.is_gemm | IS_ATTENTION * info.is_attention | TENSOR_CORES * (info.tensor_cores is True)
            | CUDA_CORES * (info.tensor_cores is False) | FP32 * (info.dtype == "fp32"))


def kernel_bits(a: Analysis, gpu: GpuColumns) -> np.ndarray:
    """Per activity of `gpu` (`all_gpu(a)` or a forward's `gpu`): `decoded_bits` of its name (uint8), 0 for a
    name that could be neither a GEMM's nor an attention kernel's (not decoded); each distinct name of the
    analysis's GPU work decoded once per analysis, with no str kept."""
    if gpu.names is not all_gpu(a).names:  # a forward made from events codes its own names
        table = np.array([decoded_bits(n) if kn.could_be(n) else 0 for n in gpu.names], np.uint8)
    else:
        table = per(a, "kernel bits", a, lambda _: _kernel_bits(a, all_gpu(a)))
    return table[gpu.name] if len(gpu.name) else np.zeros(0, np.uint8)


def _kernel_bits(a: Analysis, gpu: GpuColumns) -> np.ndarray:
    codes = per(a, "gpu name codes", a, lambda _: distinct(gpu.name))
    codes = codes[per(a, "gpu names could be", a, lambda _: _could_be(gpu, codes)) != 0]
    table = np.zeros(len(gpu.names), np.uint8)
    table[codes] = list(map(decoded_bits, made_afresh(gpu.names, codes.tolist())))
    return table


def op_columns(a: Analysis, fwd: Forward, at: list[int] | np.ndarray | None = None) -> Spans:
    """The forward's cpu_ops as columns (`at`: only those at these positions): cut from the trace's at each
    call (a few gathers of what is asked, not kept: 28 bytes an op), or made from the ops once per forward
    where it has no rows."""
    if fwd.rows is None:
        every = per(a, "op columns", fwd, lambda f: spans_of(f.cpu_ops))
        return every if at is None else every.take(at)
    return spans_at(a.trace.columns, fwd.rows if at is None else fwd.rows[at], threads(a))


def threads(a: Analysis) -> dict[tuple, int]:
    """The trace's threads' codes in its columns, once per analysis."""
    return per(a, "thread codes", a, lambda x: thread_codes(x.trace.columns))


def names_passing(a: Analysis, fwd: Forward, test: Callable[[str], bool]) -> np.ndarray:
    """Per cpu_op of the forward: whether its name passes `test` (each distinct name tested once per analysis;
    `starting`'s and `Among`'s on the names' bytes), gathered from the names' table at each call where the
    forward has rows (a few tens of calls: kept, a byte an op per test and forward)."""
    if fwd.rows is None:
        return per(a, ("names passing", test), fwd,
                   lambda f: np.fromiter([test(op.name) for op in f.cpu_ops], np.bool_, len(f.cpu_ops)))
    return passing(a, test, a.trace.columns.name[fwd.rows])


def names_may_hold(a: Analysis, fwd: Forward, at: np.ndarray, parts: tuple[str, ...]) -> np.ndarray:
    """Per cpu_op at `at`: whether its name, lowered, may hold one of `parts` (lower-case ASCII): each that
    does, and maybe others (`name_tests.may_hold`): a prefilter for a test of the names it keeps."""
    if fwd.rows is None or not isinstance(a.trace.columns.names, Names):
        low = [name.lower() for name in fwd.names_at(at.tolist())]
        return np.array([any(p in name for p in parts) for name in low], np.bool_)
    codes = a.trace.columns.name[fwd.rows[at]]
    found = distinct(codes)
    return may_hold(a.trace.columns.names, found, parts)[np.searchsorted(found, codes)]


def reads_input_of(a: Analysis, fwd: Forward, types: frozenset[str]) -> bool:
    """Whether any cpu_op of the forward has an input of one of `types` (record_shapes' Input type): each
    distinct set of args looked at once, from the trace's table of them."""
    def reads(args: Args | None) -> bool:
        return bool(args and args.input_type and types & set(map(str, args.input_type)))
    if fwd.rows is None:
        return any(reads(op.args) for op in fwd.cpu_ops)
    cols = a.trace.columns
    return any(reads(cols.arg_sets[code]) for code in distinct(cols.args[fwd.rows]).tolist() if code >= 0)


def where_is(a: Analysis, op: Event) -> tuple[Forward, int] | None:
    """The first forward whose cpu_ops hold `op`, and where it is there; None when none does. By row where
    the analysis makes its ops from rows (a table of every op's forward, made once), else by name."""
    ops = a.index.ops if a.index is not None else None
    row = ops.made.row_of(op) if isinstance(ops, OpRows) else None
    if row is None:
        return per(a, "where is", op.name, lambda name: _where_named(a, name)).get(id(op))
    return where_is_row(a, row)


def where_is_row(a: Analysis, row: int) -> tuple[Forward, int] | None:
    """`where_is` of the op at `row` of the trace's columns (a table of every op's forward, made once)."""
    forward, at = per(a, "forward of row", a, _forward_of_row)
    return (a.forwards[forward[row]], int(at[row])) if forward[row] >= 0 else None


def where_are_rows(a: Analysis, rows: np.ndarray) -> tuple[np.ndarray, np.ndarray]:
    """`where_is_row` of each of `rows`, as arrays: the forward's index in `a.forwards` (-1: none) and where
    the op is in its cpu_ops."""
    forward, at = per(a, "forward of row", a, _forward_of_row)
    return forward[rows], at[rows]


def _forward_of_row(a: Analysis) -> tuple[np.ndarray, np.ndarray]:
    """Per row of the trace: the first forward holding it (-1: none) and where it is in its cpu_ops."""
    forward = np.full(len(a.trace.columns), -1, np.int32)  # int32: 8 bytes a row of the trace in all
    at = np.zeros(len(a.trace.columns), np.int32)
    for i in range(len(a.forwards) - 1, -1, -1):  # the first forward holding a row has the last word
        rows = a.forwards[i].rows
        forward[rows], at[rows] = i, np.arange(len(rows))
    return forward, at


def _where_named(a: Analysis, name: str) -> dict[int, tuple[Forward, int]]:
    """{id(op): (the first forward holding it, where)} for the ops called `name`."""
    found: dict[int, tuple[Forward, int]] = {}
    for f in a.forwards:
        for op, at in zip(f.ops_named(name), f.positions_named(name), strict=True):
            found.setdefault(id(op), (f, at))
    return found


def op_tree(a: Analysis, fwd: Forward) -> OpTree:
    """The nesting of a forward's host ops, built once per forward: five rules walk it."""
    return per(a, "tree", fwd, lambda f: OpTree(f.cpu_ops, op_columns(a, f)))


def drop_op_trees(a: Analysis) -> bool:
    """Forget the op trees built so far (the largest thing the rules keep, 36 bytes an op); True if there
    were any (their pages are then worth handing back). What asks after this builds its own again."""
    return a.caches.pop("tree", None) is not None
