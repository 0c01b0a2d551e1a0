"""The integrations clean up on every exit path: a frame left by an exception runs the watch's clean-up in its
own thread (where torch's profiler must be stopped), and a Trainer that raises inside its profiled window
leaves no profiler running: `attnprof.expect` works after it."""

from __future__ import annotations

import sys

import pytest

from attnprof.integrations.exit_watch import ExitWatch


def _watched(calls: list[str], fail: BaseException | None) -> None:
    watch = ExitWatch(sys._getframe(), lambda: calls.append("cleaned"))
    calls.append(f"tracing {sys.gettrace() is not None}")
    if fail is not None:
        raise fail
    watch.close()


@pytest.mark.parametrize("fail", [RuntimeError("boom"), KeyboardInterrupt()])
def test_a_frame_left_by_an_exception_runs_the_clean_up_though_the_traceback_is_kept(fail):
    before, calls = sys.gettrace(), []
    with pytest.raises(type(fail)) as kept:  # the traceback (and the frame) stays alive here
        _watched(calls, fail)
    assert kept.value is fail
    assert calls == ["tracing True", "cleaned"]
    assert sys.gettrace() is before  # the thread's tracer as it was


def test_a_closed_watch_never_runs_the_clean_up():
    calls = []
    _watched(calls, None)
    assert calls == ["tracing True"]


@pytest.mark.slow  # a Trainer run: ~10 s on two cores
def test_a_trainer_that_raises_inside_its_window_leaves_no_profiler_running(tmp_path):
    torch = pytest.importorskip("torch")
    transformers = pytest.importorskip("transformers")
    pytest.importorskip("accelerate")
    from torch.utils.data import Dataset

    import attnprof
    from attnprof.integrations.transformers import AttnprofCallback

    class Tokens(Dataset):
        def __len__(self):
            return 16

        def __getitem__(self, i):
            ids = torch.randint(0, 64, (16,), generator=torch.Generator().manual_seed(i))
            return {"input_ids": ids, "labels": ids}

    class Fails(transformers.TrainerCallback):
        def on_step_begin(self, args, state, control, **kwargs):
            if state.global_step == 2:  # inside the window (wait 1, warmup 1, active 2)
                raise RuntimeError("a data error inside the profiled window")

    config = transformers.LlamaConfig(vocab_size=64, hidden_size=32, intermediate_size=64, num_hidden_layers=1,
                                      num_attention_heads=2, num_key_value_heads=2, max_position_embeddings=32)
    model = transformers.LlamaForCausalLM(config)
    args = transformers.TrainingArguments(str(tmp_path / "out"), max_steps=6, per_device_train_batch_size=2,
                                          report_to=[], use_cpu=True, save_strategy="no", logging_strategy="no")
    callback = AttnprofCallback(tmp_path / "traces", history=False, verify=False)
    trainer = transformers.Trainer(model=model, args=args, train_dataset=Tokens(), callbacks=[callback, Fails()])
    with pytest.raises(RuntimeError, match="data error"):
        trainer.train()
    assert not torch.autograd.profiler._is_profiler_enabled
    callback.handler.wait()

    q = torch.randn(1, 2, 16, 8)
    with attnprof.expect(max_aten_ops=1000):  # refused while another profiler runs in the process
        torch.nn.functional.scaled_dot_product_attention(q, q, q, is_causal=True)
