"""drop_params' shortcuts against the plain walk over every character that it stands for."""

from __future__ import annotations

import random

from attnprof.gpu.kernel_info import drop_params


def walked(s: str) -> str:
    """The name up to its first `(` outside every `<...>` (past position 0), a `>` never closing below 0."""
    depth = 0
    for i, ch in enumerate(s):
        if ch == "<":
            depth += 1
        elif ch == ">":
            depth = max(0, depth - 1)
        elif ch == "(" and depth == 0 and i > 0:
            return s[:i]
    return s


def test_drop_params_is_the_walk_on_every_short_string_of_brackets():
    rng = random.Random(0)
    strings = ["", "(", "a(", "(a)(b)", "f<(x)>(y)", "a>b(c)", "f<a<b>>(c)<d>(e)", "operator>>(x)"]
    strings += ["".join(rng.choice("<>()a") for _ in range(rng.randint(0, 10))) for _ in range(20000)]
    assert [drop_params(s) for s in strings] == [walked(s) for s in strings]
