"""What test_transformers.py trains with: a 2-layer Llama built from a config (no weights) in transformers' real
Trainer, a clock on its steps, and the callback with its own hooks timed. A module of its own, imported by the
test's fixture: transformers and its Trainer take ~5 s to import, which every pytest-xdist worker paid while
collecting when they were imported at the test module's top, though only one worker runs these tests."""

from __future__ import annotations

import time

import torch
from torch.utils.data import Dataset
from transformers import LlamaConfig, LlamaForCausalLM, Trainer, TrainerCallback, TrainingArguments

from attnprof.integrations.transformers import AttnprofCallback


class Tokens(Dataset):
    def __init__(self, n: int, seq: int):
        self.n, self.seq = n, seq

    def __len__(self) -> int:
        return self.n

    def __getitem__(self, i: int) -> dict:
        ids = torch.randint(0, 128, (self.seq,), generator=torch.Generator().manual_seed(i))
        return {"input_ids": ids, "labels": ids}


class StepClock(TrainerCallback):
    """Wall time from each step's begin to the next one's: the step and every callback and evaluation after it."""

    def __init__(self):
        self.begins: list[float] = []

    def on_step_begin(self, args, state, control, **kwargs):
        self.begins.append(time.perf_counter())

    def on_train_end(self, args, state, control, **kwargs):
        self.begins.append(time.perf_counter())

    @property
    def steps_s(self) -> list[float]:
        return [b - a for a, b in zip(self.begins, self.begins[1:], strict=False)]


def train(tmp_path, *callbacks, steps: int, accum: int, seq: int) -> StepClock:
    torch.manual_seed(0)
    config = LlamaConfig(vocab_size=128, hidden_size=64, intermediate_size=128, num_hidden_layers=2,
                         num_attention_heads=4, num_key_value_heads=2, max_position_embeddings=seq,
                         attn_implementation="eager")
    args = TrainingArguments(str(tmp_path / "trainer"), max_steps=steps, per_device_train_batch_size=2,
                             gradient_accumulation_steps=accum, eval_strategy="steps", eval_steps=7,
                             per_device_eval_batch_size=2, report_to=[], save_strategy="no", use_cpu=True,
                             disable_tqdm=True, logging_steps=steps)
    clock = StepClock()
    Trainer(model=LlamaForCausalLM(config), args=args, train_dataset=Tokens(steps * accum * 2, seq),
            eval_dataset=Tokens(4, seq), callbacks=[clock, *callbacks]).train()
    return clock


class TimedCallback(AttnprofCallback):
    """The callback with its own hooks timed per step, and the profiler's state seen at each step's begin:
    what the callback costs a step is measured directly, not as a difference of wall times between two runs
    that another process on the machine can skew either way."""

    def __init__(self, *args, **kwargs):
        super().__init__(*args, **kwargs)
        self.hook_s: dict[int, float] = {}
        self.profiler_on: dict[int, bool] = {}
        self.model_hooks: dict[int, int] = {}

    def _timed(self, step: int, hook, *args, **kwargs):
        start = time.perf_counter()
        hook(*args, **kwargs)
        self.hook_s[step] = self.hook_s.get(step, 0.0) + time.perf_counter() - start

    def on_step_begin(self, args, state, control, **kwargs):
        step = state.global_step
        self.profiler_on[step] = torch.autograd._profiler_enabled()
        self.model_hooks[step] = len(kwargs["model"]._forward_pre_hooks)
        self._timed(step, super().on_step_begin, args, state, control, **kwargs)

    def on_step_end(self, args, state, control, **kwargs):
        self._timed(state.global_step - 1, super().on_step_end, args, state, control, **kwargs)
