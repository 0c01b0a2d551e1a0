"""What a run knows that a bare trace does not, as the facts its findings are given (findings.run_facts.RunFacts):
the device's measured copy ceiling (memory-bound: the share of it a call reached, and the time above the
floor), the mask itself (dense-mask: the share of score tiles it empties, which a kernel given is_causal or
a block mask would skip), the unit the region is (a training step or a forward) and the timing measured
outside the profiler (the profiler's inflation, host-bound). The rules decide their findings from them;
nothing here changes a finding."""

from __future__ import annotations

from attnprof.findings.run_facts import RunFacts
from attnprof.problem import Problem

TIMING = ("device_us", "host_us", "cpu_bound")  # what the record's measurement holds that the rules read


def needs_shapes(problem: Problem) -> bool:
    """Whether the profiler must record input shapes: the findings of decode, GQA and masks read the
    attention op's tensors from them; the article's forward keeps host time undisturbed."""
    return problem.mode == "decode" or problem.groups > 1 or problem.mask.kind != "causal" or problem.dense_mask


def run_facts(problem: Problem, ceilings: dict | None, record: dict) -> RunFacts:
    """The facts of one variant's run: its problem, the device's ceilings and the variant's measured timing."""
    copy_tbps = (ceilings or {}).get("copy_tbps")
    return RunFacts(copy_bytes_per_s=copy_tbps * 1e12 if copy_tbps else None,
                    masked_tile_share=problem.masked_tile_share() if problem.dense_mask else None,
                    unit="step" if problem.mode == "train" else "forward",
                    timing={k: record.get(k) for k in TIMING})
