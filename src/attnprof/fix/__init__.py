"""The user's own code: load a target, lint it, patch it (source or run time), verify, budgets.

Two rewrites, each in its wing: `inplace/` (out-of-place masked_fill made in place, in the source or
at run time) and `to_sdpa/` (hand-written attention made one SDPA call). Beside them what both
share: the target, the source files' bytes (`source_io`), edits at AST positions (`edits`), the
dataflow questions over a function's AST (`dataflow`), the check of every rewrite against the original
(`differential`, run on a plan by `checked`: decided in `float64` on the `cases` a factory never makes,
in the `modes` (train, MC dropout, flags flipped), with the `autodiff` beyond first order and the 16-bit
`quality`), lint and the before/after `verify`.
"""
