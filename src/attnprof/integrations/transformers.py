"""`AttnprofCallback`: transformers' Trainer profiles a window of its own training steps and attnprof says
what to change in their attention. Needs transformers (the `models` extra).

The window is torch.profiler's schedule (`wait`, `warmup`, `active`, `repeat`), counted in optimizer steps.
Each recorded step is one `attnprof.train_step` annotation from `on_step_begin` to `on_step_end`: all its
gradient-accumulation micro-batches and the optimizer step, and none of the evaluation, logging or saving
that the Trainer does after it (those are in the trace, outside the region). Traces and their analyses
are `attnprof.on_trace_ready`'s (one log line per trace, the history on rank 0). Outside the window the
callback does nothing but count: the profiler is stopped once the window is over.

The analysis runs in another process beside the training, which shares the machine with it: on two
shared CPU cores the steps beside it ran about twice as slow for its second or so (none after it; tests/
integrations/test_transformers.py); `defer_analysis=True` starts it at the end of training instead.

With `profile_memory` (default) the window records allocations too, and each trace's line adds the step's
memory peak above its start and the ops holding it (analysis.memory_peak).

What to change comes once the window's analyses are in (checked at each later step, without waiting):
for a model on `attn_implementation="eager"` the switch to SDPA, else the top finding's fix. With
`verify=True` the switch is measured at the end of training (api.verify_attention on one captured batch,
rank 0 only), where no training step waits for it.
"""

from __future__ import annotations

from pathlib import Path

from transformers import TrainerCallback

from attnprof.integrations.exit_watch import ExitWatch, caller_named
from attnprof.integrations.profiler import TraceHandler, logger, rank_prefix

REGION = "attnprof.train_step"


class AttnprofCallback(TrainerCallback):
    """Profile `wait`/`warmup`/`active` (x `repeat`) optimizer steps and say what to change in attention."""

    def __init__(self, out_dir: str | Path = "attnprof_traces", wait: int = 1, warmup: int = 1, active: int = 2,
                 repeat: int = 1, record_shapes: bool = True, use_gzip: bool = False, history: bool = True,
                 db: str | Path | None = None, verify: bool = True, defer_analysis: bool = False,
                 profile_memory: bool = True):
        if min(wait, warmup, active, repeat) < 0 or active < 1 or repeat < 1:
            raise ValueError("AttnprofCallback: wait, warmup >= 0 and active, repeat >= 1")
        self.out_dir, self.use_gzip, self.history, self.db = Path(out_dir), use_gzip, history, db
        self.window = (wait, warmup, active, repeat)
        self.record_shapes, self.verify, self.defer_analysis = record_shapes, verify, defer_analysis
        self.profile_memory = profile_memory  # each trace's line adds the step's memory peak and what holds it
        self.handler: TraceHandler | None = None
        self.advice: str | None = None  # what to change, once the window's analyses are in
        self.measured: dict | None = None  # api.verify_attention's result, when the switch was measured
        self._prof = self._schedule = self._region = self._hook = self._inputs = self._watch = None
        self._traces = 0  # traces the window will write (repeat), to know when all are analysed

    def on_train_begin(self, args, state, control, model=None, **kwargs):
        import torch

        wait, warmup, active, repeat = self.window
        cuda = torch.cuda.is_available() and args.device.type == "cuda"
        memory = ("cuda" if cuda else "cpu") if self.profile_memory else None
        self.handler = TraceHandler(self.out_dir, use_gzip=self.use_gzip, region=REGION, name=_name(model),
                                    history=self.history, db=self.db, attn_implementation=_implementation(model),
                                    defer=self.defer_analysis, memory=memory)
        activities = [torch.profiler.ProfilerActivity.CPU]
        if cuda:
            activities.append(torch.profiler.ProfilerActivity.CUDA)
        self._schedule = torch.profiler.schedule(wait=wait, warmup=warmup, active=active, repeat=repeat)
        self._prof = torch.profiler.profile(activities=activities, schedule=self._schedule,
                                            on_trace_ready=self.handler, record_shapes=self.record_shapes,
                                            profile_memory=self.profile_memory)
        self._traces = repeat
        self._dtype = "bf16" if args.bf16 else "fp16" if args.fp16 else None  # what autocast trains in
        self._prof.start()
        loop = caller_named("_inner_training_loop", "transformers/trainer.py")  # the frame an exception leaves
        self._watch = ExitWatch(loop, self._abandoned) if loop is not None else None
        if self.verify and state.is_world_process_zero and _implementation(model) == "eager":
            self._hook = model.register_forward_pre_hook(self._capture, with_kwargs=True)

    def on_step_begin(self, args, state, control, **kwargs):
        if self._prof is not None and self._recording():
            import torch

            self._region = torch.profiler.record_function(REGION)
            self._region.__enter__()

    def on_step_end(self, args, state, control, **kwargs):
        if self._region is not None:
            self._region.__exit__(None, None, None)
            self._region = None
        if self._prof is not None:
            self._prof.step()
            if self._prof.step_num >= sum(self.window[:3]) * self.window[3]:
                self._stop()
        elif self.advice is None and len(self.handler.results) + len(self.handler.failures) >= self._traces:
            self._advise()

    def on_train_end(self, args, state, control, model=None, **kwargs):
        if self.handler is None:  # training never began
            return
        if self._prof is not None:
            self._stop()
        self.handler.wait()  # training is over: no step waits for this
        if self.advice is None:
            self._advise()
        if self._inputs is not None and self.advice is not None and state.is_world_process_zero:
            self._measure(model)

    def _recording(self) -> bool:
        from torch.profiler import ProfilerAction

        return self._schedule(self._prof.step_num) != ProfilerAction.NONE

    def _stop(self) -> None:
        if self._watch is not None:
            self._watch.close()
        self._prof.stop()
        self._prof = None
        if self._hook is not None:
            self._hook.remove()
            self._hook = None

    def _abandoned(self) -> None:
        """Training left its loop by an exception (or KeyboardInterrupt) inside the window: the step's region
        closed and the profiler stopped here, in the training thread, so nothing after it is recorded."""
        self._watch = None
        if self._prof is None:
            return
        if self._region is not None:
            self._region.__exit__(None, None, None)
            self._region = None
        try:
            self._stop()
        finally:
            logger().warning(f"{rank_prefix()}attnprof: training raised inside the profiled window: the profiler "
                             "is stopped; the steps it recorded are analysed")

    def _capture(self, module, args, kwargs):
        """Keep the first batch a recorded step ran (its region is open): the switch is measured on it."""
        if self._inputs is None and self._region is not None:
            # without labels: the outputs compared are then the 16-bit logits, which verify holds against an fp32
            # run when rounding makes them differ, not the loss the model computes in fp32
            self._inputs = (args, {k: v for k, v in kwargs.items() if k != "labels"})

    def _advise(self) -> None:
        if self.handler.results:
            self.advice = self.handler.results[-1]["advice"]
            logger().info(rank_prefix() + self.advice)

    def _measure(self, model) -> None:
        from attnprof.api import verify_attention

        args, kwargs = self._inputs
        try:
            self.measured = verify_attention(model, kwargs if kwargs else args, "sdpa", dtype=self._dtype)
        except Exception as e:  # noqa: BLE001 - a failed measurement costs its line, not the training run
            logger().warning(f"attnprof: the switch to SDPA could not be measured ({type(e).__name__}: {e})")
            return
        logger().info(self.measured["line"])


def _implementation(model) -> str | None:
    config = getattr(model, "config", None)
    return getattr(config, "_attn_implementation", None)


def _name(model) -> str:
    impl = _implementation(model)
    return f"{type(model).__name__} ({impl})" if impl else type(model).__name__

