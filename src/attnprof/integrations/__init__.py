"""Thin adapters to other tools' hooks: torch.profiler's `on_trace_ready` (profiler.py) and transformers'
`TrainerCallback` (transformers.py, needs the `models` extra). They call the public API, never the stages."""

from attnprof.integrations.profiler import on_trace_ready

__all__ = ["on_trace_ready"]
