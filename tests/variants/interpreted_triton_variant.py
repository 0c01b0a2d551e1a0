"""Builds the `triton` variant under Triton's interpreter for a few problems and prints, as JSON, what
supports() says and each output's max abs error against attnprof's float64 reference.

A script run by test_triton_variant.py in a fresh process: the interpreter must be on before triton
is first imported.
"""

from __future__ import annotations

import json
import os

assert os.environ.get("TRITON_INTERPRET") == "1", "run with TRITON_INTERPRET=1"

from attnprof import variants  # noqa: E402
from attnprof.problem import Problem, make_inputs, reference_output  # noqa: E402
from attnprof.variants.base import BuildOptions  # noqa: E402

PROBLEMS = {
    "forward": Problem(batch=2, heads=2, seq=40, head_dim=64, dtype="fp16"),
    "gqa_no_mask": Problem(batch=1, heads=4, kv_heads=2, seq=40, head_dim=128, dtype="fp16", mask="none"),
    "decode": Problem(batch=1, heads=2, seq=40, head_dim=64, dtype="fp16", mode="decode", q_len=8),
    "decode_gqa_window": Problem(batch=2, heads=4, kv_heads=1, seq=70, head_dim=64, dtype="fp16", mode="decode",
                                 q_len=3, mask="window=20"),
    "window": Problem(batch=1, heads=4, kv_heads=2, seq=50, head_dim=64, dtype="fp16", mask="window=12"),
    "documents": Problem(batch=2, heads=2, seq=50, head_dim=64, dtype="fp16", mask="document=16"),
}


def case(problem: Problem) -> dict:
    variant = variants.get("triton")
    reason = variant.supports(problem, "cpu")
    if reason:
        return {"supported": False, "reason": reason}
    q, k, v = make_inputs(problem, "cpu")
    out = variant.build(problem, "cpu", BuildOptions())(q, k, v)
    error = (out.double() - reference_output(q, k, v, problem)).abs().max().item()
    return {"supported": True, "error": error, "shape": list(out.shape) == list(q.shape)}


if __name__ == "__main__":
    print(json.dumps({name: case(problem) for name, problem in PROBLEMS.items()}))
