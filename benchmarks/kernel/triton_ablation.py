"""What each choice in attnprof's Triton attention is worth on the GPU, one change at a time, with cuDNN
timed in the same process before and after (the drift between the two is the noise to read the rest by).

    PYTHONPATH=src python3 benchmarks/kernel/triton_ablation.py [--out DIR]

At B=4 H=16 D=128 bf16, S=4096 and 8192, causal and not. The plain-Triton kernel (BLOCK_N 128, 2 stages):
plain and warp-specialised; causal tiles head by head or longest-first across groups of heads
(HEAD_GROUP, the launch's L2 heuristic); one program per tile or persistent; and, causal only, the same
kernel with its mask removed: wrong answers, timed only to price the mask. Then the Gluon (Hopper)
forward: FA2's order of work, + intra-warpgroup overlap, + ping-pong, each in one global longest-first
tile order, and overlap in the launch's order (groups of heads for causal, head by head otherwise). Medians of
triton.testing.do_bench (CUDA events after warm-up); each row's max abs difference from cuDNN's output.
"""

from __future__ import annotations

import argparse
import importlib.util
import json
import sys
import tempfile
from pathlib import Path

import torch
import triton
from torch.nn.attention import SDPBackend, sdpa_kernel

sys.path.insert(0, str(Path(__file__).resolve().parent))
from triton_kernel_path import load_flash_attn_triton  # noqa: E402

SHAPES = [(4096, True), (4096, False), (8192, True), (8192, False)]


def unmasked_kernel(launch):
    """The forward kernel with its mask switched off, loaded from a copy of its source."""
    source = (Path(launch.__file__).parent / "forward" / "_forward.py").read_text()
    unmasked = source.replace("    if MASKED:  # key j", "    if False:  # key j")
    assert unmasked != source, "the mask line moved: update this benchmark"
    path = Path(tempfile.mkdtemp()) / "forward_unmasked.py"
    path.write_text(unmasked)
    spec = importlib.util.spec_from_file_location("forward_unmasked", path)
    module = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(module)
    return module.flash_attn_triton_fwd


def runner(launch, kernel_fn, q, k, v, causal, *, ws, persistent, head_group):
    """A call of the raw kernel with every constexpr given, HEAD_GROUP included (no heuristics)."""
    config = launch.make_config(128, 2, ws=ws, persistent=persistent, warps=8)
    args, meta = launch.launch_args(q, k, v, causal, None)
    meta = {**meta, **config.kwargs, "EVEN_N": True, "HEAD_GROUP": head_group}

    def run():
        kernel_fn[launch.grid](**args, **meta, num_warps=config.num_warps, num_stages=config.num_stages)
        return args["Out"]

    return run


def hopper_runner(launch, q, k, v, causal, config: str, head_group: int):
    def run():
        args, meta = launch.launch_args(q, k, v, causal, None)
        assert launch._hopper_launch.first_launch(args, meta, head_group, config), "the Gluon forward did not compile"
        return args["Out"]

    return run


def hopper_rows(launch, q, k, v, causal, grouped: int) -> list[tuple[str, object]]:
    """The Gluon forward step by step: FA2-style order of work, + intra-warpgroup overlap, + ping-pong,
    and the order of its tiles (one global longest-first order, or groups of heads)."""
    n_bh = q.shape[0] * q.shape[1]
    rows = [(f"gluon {name}, global longest-first order", hopper_runner(launch, q, k, v, causal, name, n_bh))
            for name in ("simple", "overlap", "pingpong")]
    rows.append((f"gluon overlap, {f'groups of {grouped} heads' if causal else 'head by head'}",
                 hopper_runner(launch, q, k, v, causal, "overlap", grouped)))
    return rows


def rows_for(launch, unmasked, seq: int, causal: bool) -> list[tuple[str, object]]:
    torch.manual_seed(0)
    q, k, v = (torch.randn(4, 16, seq, 128, device="cuda", dtype=torch.bfloat16) for _ in range(3))
    fwd = launch.flash_attn_triton_fwd
    grouped = launch.launch_head_group(*launch.launch_args(q, k, v, causal, None))

    def cudnn():
        with sdpa_kernel(SDPBackend.CUDNN_ATTENTION):
            return torch.nn.functional.scaled_dot_product_attention(q, k, v, is_causal=causal)

    rows = [("cuDNN", cudnn), ("plain, head by head", runner(launch, fwd, q, k, v, causal, ws=False,
                                                              persistent=False, head_group=1)),
            ("warp-specialised, head by head", runner(launch, fwd, q, k, v, causal, ws=True, persistent=False,
                                                      head_group=1))]
    if causal:
        rows.append((f"warp-specialised, groups of {grouped} heads",
                     runner(launch, fwd, q, k, v, causal, ws=True, persistent=False, head_group=grouped)))
    rows.append(("warp-specialised, persistent", runner(launch, fwd, q, k, v, causal, ws=True, persistent=True,
                                                       head_group=1)))
    if causal:
        rows.append(("warp-specialised, head by head, NO MASK (wrong; prices the mask)",
                     runner(launch, unmasked, q, k, v, causal, ws=True, persistent=False, head_group=1)))
    rows += hopper_rows(launch, q, k, v, causal, grouped)
    rows.append(("attention()", lambda: launch.forward(q, k, v, causal=causal, sm_scale=None)[0]))
    rows.append(("cuDNN again", cudnn))
    return rows, cudnn, q


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--out", type=Path, default=None)
    args = parser.parse_args()
    launch = load_flash_attn_triton()[0]._launch
    launch._ensure_allocator()
    unmasked = unmasked_kernel(launch)
    results = []
    for seq, causal in SHAPES:
        rows, cudnn, q = rows_for(launch, unmasked, seq, causal)
        want = cudnn().float()
        tflop = 4 * 4 * 16 * seq * seq * 128 / (2 if causal else 1) / 1e12
        print(f"== B=4 H=16 S={seq} D=128 bf16 {'causal' if causal else 'non-causal'}", flush=True)
        first = None
        for name, fn in rows:
            diff = (fn().float() - want).abs().max().item()
            ms = triton.testing.do_bench(fn, warmup=25, rep=100, return_mode="median")
            first = first or ms
            results.append({"seq": seq, "causal": causal, "row": name, "ms": ms, "tflops": tflop / ms * 1e3,
                            "speed_vs_cudnn": first / ms, "max_abs_diff_vs_cudnn": diff})
            print(f"  {name:<66} {ms:7.3f} ms {tflop / ms * 1e3:5.0f} TF/s  {first / ms:.3f}x cuDNN  "
                  f"diff {diff:.1e}", flush=True)
    if args.out:
        args.out.mkdir(parents=True, exist_ok=True)
        (args.out / "triton_ablation.json").write_text(json.dumps(results, indent=1))


if __name__ == "__main__":
    main()
