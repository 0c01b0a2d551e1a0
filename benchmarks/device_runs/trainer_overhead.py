"""What AttnprofCallback costs the steps outside its window: the tiny Llama of trainer_attention.py trained
20 steps by the Trainer without the callback, with it (the analysis beside the training), with it and the
analysis deferred to the end, and without it again; the median step (begin to next begin) of the steps
outside the window, and of the steps that began before and after the analysis had come back. From the
repository root (CPU):

    PYTHONPATH=src python3 benchmarks/device_runs/trainer_overhead.py
"""

from __future__ import annotations

import statistics
import sys
import tempfile
import time
from pathlib import Path

import torch
from transformers import Trainer, TrainerCallback, TrainingArguments

from attnprof.integrations.transformers import AttnprofCallback

sys.path.insert(0, str(Path(__file__).resolve().parent))
from trainer_attention import PRESETS, VOCAB, Tokens, model_for  # noqa: E402

STEPS, WAIT, WARMUP, ACTIVE = 20, 2, 2, 2


class StepClock(TrainerCallback):
    """Each step's begin, and whether the analysis had come back by then."""

    def __init__(self, callback: AttnprofCallback | None):
        self.callback, self.begins, self.analysed = callback, [], []

    def on_step_begin(self, args, state, control, **kwargs):
        self.begins.append(time.perf_counter())
        self.analysed.append(bool(self.callback and self.callback.handler.results))

    def on_train_end(self, args, state, control, **kwargs):
        self.begins.append(time.perf_counter())


def train(out: Path, callback: AttnprofCallback | None) -> StepClock:
    seq, batch = PRESETS["tiny"][5:]
    args = TrainingArguments(str(out), max_steps=STEPS, per_device_train_batch_size=batch,
                             gradient_accumulation_steps=2, report_to=[], save_strategy="no", use_cpu=True,
                             disable_tqdm=True, logging_steps=STEPS)
    clock = StepClock(callback)
    Trainer(model=model_for("tiny", "eager"), args=args, train_dataset=Tokens(STEPS * 2 * batch, seq, VOCAB),
            callbacks=[clock] + ([callback] if callback else [])).train()
    return clock


def main() -> None:
    torch.set_num_threads(1)
    outside = [i for i in range(STEPS) if not WAIT <= i <= WAIT + WARMUP + ACTIVE]
    with tempfile.TemporaryDirectory() as tmp:
        runs = {"without": train(Path(tmp, "a"), None)}
        for name, defer in (("beside", False), ("deferred", True)):
            callback = AttnprofCallback(Path(tmp, name), wait=WAIT, warmup=WARMUP, active=ACTIVE, verify=False,
                                        history=False, defer_analysis=defer)
            runs[name] = train(Path(tmp, name + "_out"), callback)
        runs["without, again"] = train(Path(tmp, "b"), None)
    for name, clock in runs.items():
        steps = [(b - a) * 1000 for a, b in zip(clock.begins, clock.begins[1:], strict=False)]
        mine = [steps[i] for i in outside]
        split = [[steps[i] for i in outside if clock.analysed[i] == done] for done in (False, True)]
        after = (f"; before the analysis came back {_median(split[0])}, after {_median(split[1])}"
                 if name == "beside" else "")
        print(f"{name}: median step outside the window {_median(mine)}{after}")


def _median(values: list[float]) -> str:
    return f"{statistics.median(values):.1f} ms (n={len(values)})" if values else "- (n=0)"


if __name__ == "__main__":
    main()
