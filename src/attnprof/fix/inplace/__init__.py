"""The in-place rewrite: `x.masked_fill(...)` becomes `x.masked_fill_(...)` where that is proved safe,
in the user's source (`source`, proved by `safety` and the running forward) or at run time (`runtime`)."""
