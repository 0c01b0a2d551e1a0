"""The rewrite to SDPA: hand-written attention read from the source (`chain`, the real projects' forms in
`forms`), its run-time facts (`facts`), module state proved unchanged in the whole file (`invariant`), the
mask's meaning (`mask`), the scale (`scale`), the written call (`text`); the four steps each wing has
(fix.rewrite): the plan (`plan`), the check against the original (`checked`), `--verify` (`verify`) and the
run-time form (`runtime`); and lint's advice (`advice`)."""
