"""The user's own code: load a target, lint it, patch it (source or run time), verify, budgets."""
