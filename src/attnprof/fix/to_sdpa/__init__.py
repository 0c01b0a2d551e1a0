"""The rewrite to SDPA: hand-written attention read from the source (`chain`), its run-time facts
(`facts`), the mask's meaning (`mask`), the written call (`text`), the plan (`rewrite`), the run-time
form (`runtime`) and `--verify` (`verify`)."""
