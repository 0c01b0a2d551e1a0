"""The in-place rewrite: `x.masked_fill(...)` becomes `x.masked_fill_(...)` where that is proved safe. The
four steps each wing has (fix.rewrite): the plan in the user's source (`plan`, proved by `safety` and the
running forward), the check against the original (`checked`), `--verify` (`verify`) and the rewrite at run
time (`runtime`)."""
