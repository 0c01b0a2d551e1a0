"""`ExitWatch`: run a clean-up when a frame of the calling thread is left, by a return or by an exception
(KeyboardInterrupt included), in that thread.

A Trainer callback is told when training ends well (`on_train_end`), never when it raises: an exception
inside the profiled window would leave torch's profiler recording every later op in the process (2.4x
slower, memory growing, and the next profiler refused). The profiler can only be stopped from the thread
that started it (a stop from another thread finds "no active profiling session" and the recording goes
on: tried on torch 2.13), and an object kept in the training loop's frame dies only when the traceback
does (`pytest.raises` and IPython keep it). So the watch traces the one frame that runs the training
loop: its local trace function hears the frame's `return` event, which an exception leaving it makes
too. Python delivers a frame's events only while a trace function is set for the thread: the watch sets
one that traces no other frame (and hands every event to a tracer already set: a debugger, coverage),
for as long as the watch is open (the profiled window), and restores the one there was on `close`.
"""

from __future__ import annotations

import sys
from collections.abc import Callable
from types import FrameType
from typing import Any

Tracer = Callable[[FrameType, str, Any], Any]


class ExitWatch:
    def __init__(self, frame: FrameType, on_exit: Callable[[], None]):
        self._frame, self._on_exit = frame, on_exit
        self._global: Tracer | None = sys.gettrace()  # a debugger's or coverage's: every event still goes to it
        self._local: Tracer | None = frame.f_trace
        self._lines = frame.f_trace_lines
        frame.f_trace_lines = False  # the frame's `return`, not its every line
        frame.f_trace = self._event
        self._tracer = self._call  # one bound method: `close` knows it by identity
        sys.settrace(self._tracer)
        self.open = True

    def _call(self, frame: FrameType, event: str, arg: Any) -> Tracer | None:
        """A new frame: traced only by the tracer there was (None traces nothing)."""
        return self._global(frame, event, arg) if self._global is not None else None

    def _event(self, frame: FrameType, event: str, arg: Any) -> Tracer | None:
        local = self._local(frame, event, arg) if self._local is not None else None
        if event == "return" and self.open:
            self.close()
            self._on_exit()
            return local
        return self._event if self.open else local

    def close(self) -> None:
        """Stop watching; the thread's trace function is the one there was (unless another replaced ours)."""
        if not self.open:
            return
        self.open = False
        self._frame.f_trace, self._frame.f_trace_lines = self._local, self._lines
        if sys.gettrace() is self._tracer:
            sys.settrace(self._global)
        self._frame = None  # type: ignore[assignment]


def caller_named(name: str, module_part: str) -> FrameType | None:
    """The innermost frame of the calling thread's stack that runs a function `name` of a module whose file
    path holds `module_part` (transformers' `trainer.py` `train`), or None."""
    frame = sys._getframe(1)
    while frame is not None:
        if frame.f_code.co_name == name and module_part in frame.f_code.co_filename.replace("\\", "/"):
            return frame
        frame = frame.f_back
    return None
