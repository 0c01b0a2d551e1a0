"""The article's training step (B8 H16 S1024 D64 causal bf16) with the shipped Gluon forward against the same step
with the plain forward, beside cuDNN's, alternating rounds: latency per step (100 steps, one synchronisation)
and host per step (the same without it). On the GPU machine:

    PYTHONPATH=src python3 benchmarks/kernel/triton_step_forward_ab.py

Session 4 read the step at 0.80-0.92x cuDNN's latency with the Gluon forward although its GPU work and its
host time at a tiny shape are cuDNN's; session 3 read it at 0.977x with the plain forward (docs/kernel.md).
"""

import sys
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parent))
import triton_small as ts  # noqa: E402
from triton_kernel_path import load_flash_attn_triton  # noqa: E402

module, _ = load_flash_attn_triton()
q, k, v, dout = ts.inputs(8, 16, 1024, 64)
leaves = [t.detach().clone().requires_grad_() for t in (q, k, v)]
plans = {}
candidates = {"gluon two_per_sm": ("gluon two_per_sm_n64_s2", "two_per_sm_n64_s2", None, None),
              "plain": (ts.PLAIN[64][0], None, ts.PLAIN[64][1], None)}
fns = {"cudnn": (lambda: None, ts.step(lambda *t: ts.cudnn(*t), leaves, dout))}
for name, c in candidates.items():
    fns[name] = (lambda c=c: ts.choose(module, 64, c, plans), ts.step(lambda *t: module.attention(*t, causal=True),
                                                                      leaves, dout))
for label, measure in (("latency", lambda f: ts.latency_us(f, 100)), ("host", lambda f: ts.latency_us(f, 100, False))):
    r = ts.alternate(fns, measure, 5)
    print(f"step {label} us (speed vs cuDNN, range):", "; ".join(
        f"{n} {x['median']:.1f} ({x['speed']:.3f}, {x['speed_range'][0]:.3f}-{x['speed_range'][1]:.3f})"
        for n, x in r.items()), flush=True)
