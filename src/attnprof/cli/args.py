"""Argument types and the option groups several subcommands share."""

from __future__ import annotations

import argparse

from attnprof.harness import defaults

EXIT_USAGE = 2


class Parser(argparse.ArgumentParser):
    def error(self, message: str):  # one line, not argparse's usage block
        self.exit(EXIT_USAGE, f"{self.prog}: error: {message}\n")


def positive_int(text: str) -> int:
    try:
        value = int(text)
    except ValueError:
        raise argparse.ArgumentTypeError(f"expected a positive integer, got {text!r}") from None
    if value <= 0:
        raise argparse.ArgumentTypeError(f"must be a positive integer, got {value}")
    return value


def int_list(text: str) -> list[int]:
    """`512,1024,2048` -> [512, 1024, 2048], each a positive integer."""
    parts = [p.strip() for p in text.split(",")]
    if not all(parts):
        raise argparse.ArgumentTypeError(f"expected a comma-separated list of integers, got {text!r}")
    return [positive_int(p) for p in parts]


def schedule(text: str) -> tuple[int, int, int]:
    """`1,1,3` -> (wait, warmup, active); active must be at least 1."""
    parts = text.split(",")
    if len(parts) != 3:
        raise argparse.ArgumentTypeError(f"expected WAIT,WARMUP,ACTIVE, got {text!r}")
    try:
        wait, warm, active = (int(p) for p in parts)
    except ValueError:
        raise argparse.ArgumentTypeError(f"expected three integers, got {text!r}") from None
    if min(wait, warm) < 0 or active < 1:
        raise argparse.ArgumentTypeError(f"wait and warmup must be >= 0 and active >= 1, got {text!r}")
    return wait, warm, active


def name_list(text: str) -> list[str]:
    names = [p.strip() for p in text.split(",") if p.strip()]
    if not names:
        raise argparse.ArgumentTypeError("expected a comma-separated list of names")
    return names


def add_device(p: argparse.ArgumentParser) -> None:
    p.add_argument("--device", default="auto", choices=("auto", "cuda", "cpu"))


def add_workload_args(p: argparse.ArgumentParser, as_lists: bool = False) -> None:
    """What is run: a forward, a training step or a decode call, GQA/MQA and the mask (lists in a sweep)."""
    lists = " (comma-separated)" if as_lists else ""
    p.add_argument("--mode", type=name_list if as_lists else str, default=None,
                   help="fwd (a forward), train (forward + backward, timed as one step) or decode (q-len new "
                        f"queries against a KV cache of --seq tokens); default fwd{lists}")
    p.add_argument("--kv-heads", type=int_list if as_lists else positive_int, default=None,
                   help=f"K/V heads for GQA (1: MQA); must divide --heads; default: --heads{lists}")
    p.add_argument("--mask", type=name_list if as_lists else str, default=None,
                   help=f"causal (default), none, window=W (the last W keys) or document=N (causal inside "
                        f"documents of N tokens){lists}")
    p.add_argument("--dense-mask", action="store_true",
                   help="give the mask as a materialized boolean [Sq, Sk] tensor (SDPA's attn_mask), to see its cost")
    p.add_argument("--q-len", type=positive_int, default=None,
                   help="decode: new queries per call (default 1); --seq is then the cache length")


def add_problem_args(p: argparse.ArgumentParser, as_lists: bool = False) -> None:
    """The problem, the variants and how to time them: shared by `run` and `sweep` (lists there)."""
    kind = int_list if as_lists else positive_int
    for flag in ("--batch", "--heads", "--seq", "--head-dim"):
        p.add_argument(flag, type=kind, default=None, help="default: the article's problem on GPU, smaller on CPU")
    p.add_argument("--dtype", default="bf16", type=name_list if as_lists else str,
                   help="bf16, fp16 or fp32" + (" (comma-separated)" if as_lists else ""))
    add_workload_args(p, as_lists)
    add_device(p)
    p.add_argument("--variants", type=name_list, default=None, help="comma-separated; default: all")
    p.add_argument("--compile", action="store_true", help="wrap each variant in torch.compile (<name>+compile)")
    p.add_argument("--kernel", default=None, help="hub variant: a hub repo id or a local kernel directory")
    p.add_argument("--out", default=defaults.OUT_DIR, help="results go to a new folder under this one")
    p.add_argument("--repeats", type=positive_int, default=defaults.REPEATS,
                   help=f"timed blocks per variant, at least (more while the spread is wide; "
                        f"default {defaults.REPEATS})")
    p.add_argument("--threads", type=positive_int, default=defaults.CPU_THREADS,
                   help="torch intra-op threads on the CPU, recorded with the results "
                        f"(default {defaults.CPU_THREADS}, as torch.utils.benchmark times)")
    p.add_argument("--no-graph", action="store_true", help="time device work back to back, not by graph replay")
    p.add_argument("--rotate-inputs", type=positive_int, default=1, metavar="N",
                   help="time N copies of q, k, v in turn so inputs are not L2-resident (1: off)")
