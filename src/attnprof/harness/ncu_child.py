"""The program `attnprof run --ncu` runs under Nsight Compute, once per variant:

    python -m attnprof.harness.ncu_child SPEC.json

SPEC: {"variant", "problem" (Problem.as_dict), "kernel" (the hub option), "warmup", "rotate_inputs"}. It
builds the variant and its inputs as the run did (runner.variant_args: its layout, a training step's leaves;
the run's copies of the inputs in turn), calls it warmup + 1 times so that compiling and autotuning are done,
then makes one more call inside the NVTX range that ncu is told to profile.
"""

from __future__ import annotations

import json
import sys
from pathlib import Path


def main(argv: list[str]) -> int:
    """`argv`: the path of the spec the parent wrote (variant, problem, options)."""
    spec_path = argv[0]
    import torch

    from attnprof import variants
    from attnprof.harness.measure import RotatingCall
    from attnprof.harness.ncu import NVTX_RANGE
    from attnprof.harness.runner import variant_args
    from attnprof.harness.steps import training_step
    from attnprof.problem import Problem, make_inputs
    from attnprof.variants.base import BuildOptions

    spec = json.loads(Path(spec_path).read_text())
    problem = Problem.from_dict(spec["problem"])
    variant = variants.get(spec["variant"])
    args = variant_args(variant, problem, make_inputs(problem, "cuda"))
    forward = variant.build(problem, "cuda", BuildOptions(kernel=spec.get("kernel")))
    if problem.mode == "train":
        forward = (variant.train_step or training_step)(forward, args)
    call = RotatingCall(forward, args, spec.get("rotate_inputs", 1))
    with torch.no_grad() if problem.mode != "train" else torch.enable_grad():
        for _ in range(spec.get("warmup", 1) + 1):
            call()
        torch.cuda.synchronize()
        torch.cuda.nvtx.range_push(NVTX_RANGE)
        call()
        torch.cuda.synchronize()
        torch.cuda.nvtx.range_pop()
    return 0


if __name__ == "__main__":
    sys.exit(main(sys.argv[1:]))
