"""Run options, spelled once: one field each, with its default, its help text and how the command line
gives it. `attnprof run` and `attnprof sweep` build their flags from these fields (cli.args.add_options),
`attnprof.run(...)` takes them as keywords, and the runner, the sweep and the multi-rank launcher read the
same object. A new option is one field here and the line that uses it.

A field's metadata: `help`; `parse` (text -> value; a ValueError is the user's one-line error); `least` for
a whole number (the API checks it too); `axis`: a sweep takes a comma-separated list of it (the grid);
`commands`: which subcommands offer it; `flag` when the flag is not `--field-name` (a True default is
switched off by `--no-...`); `group` and `metavar` for --help.
"""

from __future__ import annotations

from dataclasses import Field, dataclass, field, fields

from attnprof.problem import Mask

# The defaults of a run, defined once: the flags below, the Python API and the harness read them here.
REGION = "attn_fwd"  # the record_function name around each forward (the article's)
STEP_REGION = "attn_step"  # ... and around each training step (--mode train)
REPEATS = 30  # timed blocks per measurement, at least (measure.autorange takes more while the spread is wide)
MIN_TIME_S = 0.1  # timed work per measurement, at least
CPU_THREADS = 1  # torch's intra-op threads for a CPU run (as torch.utils.benchmark times), recorded with it
WARMUP = 3  # untimed calls before any timing
SCHEDULE = (1, 1, 3)  # torch.profiler wait, warmup, active steps (the article's)
OUT_DIR = "attnprof-out"  # each run makes a new folder under this one

RUN, SWEEP = "run", "sweep"
BOTH = (RUN, SWEEP)
RANKS = "several GPUs (context parallelism)"  # the --help group of the multi-rank options
DEVICES = ("auto", "cuda", "cpu")
PROBLEM_HELP = "default: the article's problem on GPU, smaller on CPU"


def whole_number(least: int):
    """A parser of whole numbers >= least (1: a positive integer)."""

    wanted = "a positive integer" if least == 1 else f"a whole number >= {least}"

    def parse(text: str) -> int:
        try:
            value = int(text)
        except ValueError:
            raise ValueError(f"expected {wanted}, got {text!r}") from None
        if value < least:
            raise ValueError(f"must be {wanted}, got {value}")
        return value

    return parse


def names(text: str) -> tuple[str, ...]:
    """`a, b` -> ("a", "b")."""
    found = tuple(p.strip() for p in text.split(",") if p.strip())
    if not found:
        raise ValueError("expected a comma-separated list of names")
    return found


def schedule(text: str) -> tuple[int, int, int]:
    """`1,1,3` -> (wait, warmup, active); active must be at least 1."""
    parts = text.split(",")
    if len(parts) != 3:
        raise ValueError(f"expected WAIT,WARMUP,ACTIVE, got {text!r}")
    try:
        wait, warm, active = (int(p) for p in parts)
    except ValueError:
        raise ValueError(f"expected three integers, got {text!r}") from None
    if min(wait, warm) < 0 or active < 1:
        raise ValueError(f"wait and warmup must be >= 0 and active >= 1, got {text!r}")
    return wait, warm, active


def option(default, help: str, *, parse=None, least: int | None = None, axis: bool = False,
           commands: tuple[str, ...] = BOTH, flag: str | None = None, group: str | None = None,
           metavar: str | None = None, choices: tuple[str, ...] | None = None):
    """A field of RunOptions with what the command line needs to offer it."""
    if least is not None:
        parse = whole_number(least)
    meta = {"help": help, "parse": parse, "least": least, "axis": axis, "commands": commands, "flag": flag,
            "group": group, "metavar": metavar, "choices": choices}
    return field(default=default, metadata=meta)


@dataclass(frozen=True)
class RunOptions:
    """What a run is told. None for a problem size means the device's default problem."""

    batch: int | None = option(None, PROBLEM_HELP, least=1, axis=True)
    heads: int | None = option(None, PROBLEM_HELP, least=1, axis=True)
    seq: int | None = option(None, PROBLEM_HELP, least=1, axis=True)
    head_dim: int | None = option(None, PROBLEM_HELP, least=1, axis=True)
    dtype: str = option("bf16", "bf16, fp16 or fp32", axis=True)
    mode: str | None = option(None, "fwd (a forward), train (forward + backward, timed as one step) or decode "
                              "(q-len new queries against a KV cache of --seq tokens); default fwd", axis=True)
    kv_heads: int | None = option(None, "K/V heads for GQA (1: MQA); must divide --heads; default: --heads",
                                  least=1, axis=True)
    mask: Mask | None = option(None, "causal (default), none, window=W (the last W keys) or document=N (causal "
                              "inside documents of N tokens)", axis=True)
    dense_mask: bool = option(False, "give the mask as a materialized boolean [Sq, Sk] tensor (SDPA's attn_mask), "
                              "to see its cost")
    q_len: int | None = option(None, "decode: new queries per call (default 1); --seq is then the cache length",
                               least=1)
    device: str = option("auto", "where to run (auto: a CUDA GPU when torch sees one)",
                         choices=DEVICES)
    variants: tuple[str, ...] | None = option(None, "comma-separated; default: all", parse=names)
    compile: bool = option(False, "wrap each variant in torch.compile (<name>+compile)")
    kernel: str | None = option(None, "hub variant: a hub repo id or a local kernel directory")
    out: str = option(OUT_DIR, "results go to a new folder under this one")
    repeats: int = option(REPEATS, f"timed blocks per variant, at least (more while the spread is wide; "
                          f"default {REPEATS})", least=1)
    threads: int | None = option(CPU_THREADS, "torch intra-op threads on the CPU, recorded with the "
                                 f"results (default {CPU_THREADS}, as torch.utils.benchmark times)", least=1)
    graph: bool = option(True, "time device work back to back, not by graph replay", flag="--no-graph")
    rotate_inputs: int = option(1, "time N copies of q, k, v in turn so inputs are not L2-resident (1: off)",
                                least=1, metavar="N")
    remeasure_ceilings: bool = option(False, "measure this machine's matmul and copy ceilings again, adding to "
                                      "the distribution it keeps (the best of which a percentage is taken of)")
    profile: bool = option(False, "also profile each point (traces; slower)", commands=(SWEEP,))
    warmup: int = option(WARMUP, f"untimed calls before timing (default {WARMUP})", least=0,
                         commands=(RUN,))
    schedule: tuple[int, int, int] = option(
        SCHEDULE, "torch.profiler schedule in steps, one forward a step (default "
        f"{','.join(map(str, SCHEDULE))}, the article's)", parse=schedule, metavar="WAIT,WARMUP,ACTIVE",
        commands=(RUN,))
    region: str | None = option(None, f"record_function name around each call (default {REGION}; "
                                f"{STEP_REGION} in train mode)", commands=(RUN,))
    ncu: bool = option(False, "also profile each variant's kernels with Nsight Compute (ncu on PATH): achieved "
                       "occupancy, SM/DRAM throughput, tensor pipe, limiter", commands=(RUN,))
    nproc: int | None = option(None, "run on N local ranks under torch.distributed.run (NCCL on GPUs, gloo on "
                               "CPU); several nodes: torchrun --nnodes ... -m attnprof run ...", least=1,
                               metavar="N", commands=(RUN,), group=RANKS)
    cp_rotate: str = option("allgather", "how K/V blocks travel around the ring (default allgather, torch's)",
                            choices=("allgather", "alltoall"), commands=(RUN,), group=RANKS)
    load_balance: bool = option(True, "contiguous shards instead of head-tail", flag="--no-load-balance",
                                commands=(RUN,), group=RANKS)
    cp_modes: tuple[str, ...] = option(("fwd", "train"), "forward, training step (forward + backward), or both "
                                       "(default)", parse=names, metavar="fwd,train", commands=(RUN,), group=RANKS)
    single: bool = option(True, "skip the full problem on one GPU (no ideal)", flag="--no-single",
                          commands=(RUN,), group=RANKS)

    def __post_init__(self) -> None:
        if isinstance(self.mask, str):  # the one place a run's --mask (or mask= keyword) is parsed
            object.__setattr__(self, "mask", Mask.parse(self.mask))
        for f in fields(self):  # the API gets no argparse: its numbers are checked here, before any work
            value = getattr(self, f.name)
            least = f.metadata["least"]
            if least is not None and value is not None and (
                    isinstance(value, bool) or not isinstance(value, int) or value < least):
                raise ValueError(f"{f.name} must be a whole number >= {least}, got {value!r}")

    @property
    def problem_fields(self) -> dict:
        """The problem's fields that were given (None: the device's default)."""
        return {f: getattr(self, f) for f in PROBLEM if getattr(self, f) not in (None, False)}


PROBLEM = ("batch", "heads", "seq", "head_dim", "dtype", "mode", "kv_heads", "mask", "dense_mask", "q_len")
AXES = tuple(f.name for f in fields(RunOptions) if f.metadata["axis"])


def offered(command: str) -> list[Field]:
    """The fields `command` offers as flags, in --help order."""
    return [f for f in fields(RunOptions) if command in f.metadata["commands"]]


def flag_of(f: Field) -> str:
    return f.metadata["flag"] or "--" + f.name.replace("_", "-")
