"""What attnprof writes for other tools to read, in one place: the schema ids, a typed record per result
with one `to_payload()` (the JSON object, its schema id first, its keys in the order they always had), the
file names of a run and a sweep folder, and the readers of those files. report/ and history/ read result
files through here; the torch side (harness/) writes them. Imports no torch.

A result field is one field of its record here and the line that fills it."""

from __future__ import annotations

import json
from dataclasses import asdict, dataclass, field, fields
from itertools import product
from pathlib import Path
from typing import Any, ClassVar

from attnprof.options import AXES, RunOptions
from attnprof.problem import ARTICLE, Mask, Problem, default_problem

RUN = "attnprof.run/1"  # a run's results.json (runner)
SWEEP = "attnprof.sweep/1"  # a sweep's sweep.json and each line of its results.jsonl
CP_RUN = "attnprof.cp-run/1"  # a `run --nproc N` run's results.json (rank 0)
ANALYSIS = "attnprof.analysis/1"  # one trace analysed (analyze --json; each variant's fields of a run)
RANKS = "attnprof.ranks/1"  # several ranks' traces analysed together
DIFF = "attnprof.diff/1"
LINT = "attnprof.lint/1"
HISTORY = "attnprof.history/1"
COMPARE = "attnprof.compare/1"

RESULTS = "results.json"  # a run folder's results (RUN or CP_RUN)
SWEEP_SPEC, SWEEP_LINES = "sweep.json", "results.jsonl"  # a sweep folder's spec and its (point, variant) lines


def omit_empty() -> Any:
    """A record field left out of the payload when empty (a section only some results have)."""
    return field(default=None, metadata={"omit_empty": True})


@dataclass
class Result:
    """A result's top-level fields, in their payload's order; `to_payload()` puts its SCHEMA first."""

    SCHEMA: ClassVar[str]

    def to_payload(self) -> dict:
        return {"schema": self.SCHEMA, **{f.name: getattr(self, f.name) for f in fields(self)
                                          if getattr(self, f.name) or not f.metadata.get("omit_empty")}}


@dataclass
class RunResult(Result):
    """A run (`attnprof run`): the device, the problem, the options given and resolved, a record per variant."""

    SCHEMA: ClassVar[str] = RUN
    device: dict
    problem: dict
    config: dict
    variants: list = field(default_factory=list)


@dataclass
class SweepLine(Result):
    """One (point, variant) of a sweep, a line of its results.jsonl: the point, the variant's measured fields
    as its run's record has them (MEASURED), and its run folder and trace relative to the sweep folder."""

    SCHEMA: ClassVar[str] = SWEEP
    key: str
    point: dict
    variant: str
    status: Any = None
    reason: Any = None
    device_us: Any = None
    latency_us: Any = None
    host_us: Any = None
    cpu_bound: Any = None
    peak_memory_bytes: Any = None
    roofline: Any = None
    per_forward: Any = None
    max_abs_error: Any = None
    first_call_s: Any = None
    first_call_includes_compile: Any = None
    backend: Any = None
    pin_overhead_us: Any = None
    threads: Any = None
    gpu_busy_us: Any = None
    gpu_idle_share: Any = None
    profiler: Any = None
    unit: Any = None
    phases: Any = None
    run_dir: str | None = None
    trace: str | None = None


# what a line copies from its variant's record: every field but where it is and where it came from
MEASURED = tuple(f.name for f in fields(SweepLine) if f.name not in ("key", "point", "variant", "run_dir", "trace"))


@dataclass
class CPRunResult(RunResult):
    """A multi-rank run (`attnprof run --nproc N`): a record per (variant, mode), and where rank 0 wrote it."""

    SCHEMA: ClassVar[str] = CP_RUN
    run_dir: str = ""


@dataclass
class SweepResult(Result):
    """A sweep's sweep.json: its spec (SweepSpec.as_dict) and the device."""

    SCHEMA: ClassVar[str] = SWEEP
    spec: dict
    device: dict


@dataclass
class AnalysisResult(Result):
    """One trace analysed: per forward (per step when `unit` is "step"), phases, kernels, attention calls,
    findings (ranked), the model step, what was not attributed and the trace's warnings."""

    SCHEMA: ClassVar[str] = ANALYSIS
    source: str
    region: str | None
    forwards: int
    unit: str
    per_forward: dict
    phases: dict
    kernels: list
    kernels_not_listed: dict | None = omit_empty()  # a table of a name per launch, cut
    forward_spread: dict = field(default_factory=dict)  # the profiled forwards' times: median, quartiles, verdict
    attention_calls: dict | None = None
    findings: list = field(default_factory=list)
    model_step: dict | None = None
    unattributed: dict | None = None
    timeline: dict | None = None  # per GPU stream: busy by kind, idle by cause; launch delays
    device: dict | None = None
    warnings: list = field(default_factory=list)


@dataclass
class RanksResult(Result):
    """Several ranks' traces: each rank's summary, what only all of them show, the warnings."""

    SCHEMA: ClassVar[str] = RANKS
    world_size: int
    region: str | None
    ranks: list
    distributed: dict
    warnings: list
    unread: list = field(default_factory=list)  # the ranks whose trace could not be read, each with its reason


@dataclass
class DiffResult(Result):
    """What changed from trace or run A to B, per forward: counts, activities removed and added, profiled
    times, findings; two run records also their measured device time, with its verdict."""

    SCHEMA: ClassVar[str] = DIFF
    sources: dict
    a: dict
    b: dict
    delta: dict
    gpu_time_us: float | None
    cpu_time_us: float | None
    removed: list
    added: list
    findings_removed: list
    findings_added: list
    backend: dict | None = omit_empty()  # which SDPA backend each side ran, when a side says
    profiled_change: dict = field(default_factory=dict)  # the profiled forwards' times: a verdict where both spread
    device_time: dict | None = omit_empty()
    summary: list = field(default_factory=list)  # one line per change, for reports


@dataclass
class LintResult(Result):
    """A target's forward profiled (`attnprof lint`): its counts per forward, each finding on its source line,
    and every copy explained by the line and chain that asked for it."""

    SCHEMA: ClassVar[str] = LINT
    target: str
    device: str
    per_forward: dict
    findings: list
    copies: list


@dataclass
class HistoryResult(Result):
    """The recorded runs, newest first, each with what changed since the one before."""

    SCHEMA: ClassVar[str] = HISTORY
    store: str
    runs: list


@dataclass
class CompareResult(Result):
    """Run B against run A per variant; `regressed` is the gate."""

    SCHEMA: ClassVar[str] = COMPARE
    a: int | None
    b: int
    before_a: int | None
    threshold: float
    environment_changes: dict
    variants: list
    only_in_a: list
    only_in_b: list
    regressed: bool


# an axis not given and not a size: its one value, Problem's default (kv_heads None: as many as the heads)
UNSET = {f.name: f.default for f in fields(Problem) if f.name in AXES and f.name not in ARTICLE}
# the order a sweep walks its grid (every axis of AXES once: a test checks): the problem's kind slowest, then
# the sizes, the sequence length fastest (its curves are drawn against it)
GRID_ORDER = ("dtype", "mode", "mask", "kv_heads", "batch", "heads", "head_dim", "seq")


@dataclass(frozen=True)
class SweepSpec:
    """The grid (every combination of the axes' values) and the run options every point runs with (its
    variants and device resolved). An axis the grid leaves out takes the device's default problem."""

    grid: dict[str, tuple]
    options: RunOptions

    def __post_init__(self) -> None:
        unknown = sorted(set(self.grid) - set(AXES))
        if unknown:
            raise ValueError(f"not a sweep axis: {', '.join(unknown)}; the axes are {', '.join(AXES)}")
        base, _ = default_problem(self.options.device, {})
        whole = {a: tuple(self.grid.get(a) or (getattr(base, a) if a in ARTICLE else UNSET[a],)) for a in AXES}
        object.__setattr__(self, "grid", whole)

    def points(self) -> list[Problem]:
        """Every problem of the grid, sequence length varying fastest; raises ValueError on a bad one."""
        o = self.options
        return [Problem(**axes, dense_mask=o.dense_mask, q_len=o.q_len if axes["mode"] == "decode" else None)
                for axes in (dict(zip(GRID_ORDER, values, strict=True))
                             for values in product(*(self.grid[a] for a in GRID_ORDER)))]

    def as_dict(self) -> dict:
        """sweep.json's spec: the options with each axis as its list of values."""
        return {**asdict(self.options), **{a: [str(x) if isinstance(x, Mask) else x for x in v]
                                           for a, v in self.grid.items()}}

    @classmethod
    def from_dict(cls, d: dict) -> SweepSpec:
        """From `as_dict` (or an older sweep.json's spec: the same keys, fewer options)."""
        known = {f.name for f in fields(RunOptions)}
        given = {k: tuple(v) if isinstance(v, list) else v for k, v in d.items() if k in known}
        return cls({a: given.pop(a) for a in AXES if a in given}, RunOptions(**given))


def read_json(path: str | Path) -> dict:
    """A result file (raises OSError or ValueError as json and the file system do)."""
    return json.loads(Path(path).read_text())


def load_spec(sweep_dir: Path) -> SweepSpec:
    """The spec of the sweep in `sweep_dir`; ValueError when its sweep.json cannot be read."""
    try:
        return SweepSpec.from_dict(read_json(Path(sweep_dir) / SWEEP_SPEC)["spec"])
    except (OSError, ValueError, KeyError, TypeError) as e:
        raise ValueError(f"{sweep_dir} is not a sweep folder (cannot read {SWEEP_SPEC}: {e})") from None


def read_lines(path: Path, repair: bool = False) -> list[dict]:
    """The complete lines of results.jsonl, the last one per (point, variant). With `repair`, an
    unterminated last line (the process was killed while writing it) is cut off, so appending
    starts on a fresh line."""
    try:
        raw = Path(path).read_bytes()
    except FileNotFoundError:
        return []
    if repair and raw and not raw.endswith(b"\n"):
        with open(path, "r+b") as f:
            f.truncate(raw.rfind(b"\n") + 1)
    latest: dict[tuple[str, str], dict] = {}
    for text in raw.splitlines(keepends=True):
        try:
            line = json.loads(text)
        except ValueError:
            continue
        if text.endswith(b"\n") and isinstance(line, dict) and "key" in line and "variant" in line:
            latest[(line["key"], line["variant"])] = line
    return list(latest.values())
