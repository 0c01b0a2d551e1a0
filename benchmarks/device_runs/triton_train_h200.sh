#!/usr/bin/env bash
# The H200 run behind docs/kernel.md's backward, step and launch-cost tables, from the repository root on
# the device machine (msgspec carried as a wheel, PYTHONPATH=src:/tmp/site). Each step has a watchdog;
# logs land under $OUT (default /tmp/triton-train):
#   host.log        benchmarks/kernel/triton_host_cost.py: host us per call (tiny shape), latency at the article's problem
#   bwd.log, triton_backward.json   benchmarks/kernel/triton_backward.py: backward and step vs cuDNN, alternating
#                   rounds, peak memory, gradient errors vs float64; a configuration sweep at $SWEEP
#   train.log       attnprof run --mode train at the article's problem: GPU activities per step, findings
#   pytest.log      the GPU tests of the kernel that compile, capture and plan, and the gradients of the ragged GQA shape
set -u
OUT=${OUT:-/tmp/triton-train}
SWEEP=${SWEEP:-}  # shapes to sweep configurations at (e.g. s4096-d128-causal); ONLY=name,name limits the shapes
mkdir -p "$OUT"
export PYTHONUNBUFFERED=1
timeout 35 python3 benchmarks/kernel/triton_host_cost.py > "$OUT/host.log" 2>&1; echo "host rc=$?"; tail -n 4 "$OUT/host.log"
timeout 160 python3 benchmarks/kernel/triton_backward.py --out "$OUT" --sweep "$SWEEP" ${ONLY:+--only "$ONLY"} \
    > "$OUT/bwd.log" 2>&1
echo "bwd rc=$?"; grep -v "^compile failed" "$OUT/bwd.log" | cut -c1-560 | tail -n 8
timeout 45 python3 -m attnprof run --mode train --batch 8 --heads 16 --seq 1024 --head-dim 64 \
    --variants triton,sdpa-cudnn,sdpa-flash --no-report --no-history --out /tmp/attnprof-train > "$OUT/train.log" 2>&1
echo "train rc=$?"; tail -n 25 "$OUT/train.log" | cut -c1-200
timeout 60 python3 -m pytest -q -x -m cuda tests/triton_kernel/test_kernel_on_gpu.py -k "compile or graph or plan or 333" \
    -p no:cacheprovider > "$OUT/pytest.log" 2>&1; echo "pytest rc=$?"; tail -n 3 "$OUT/pytest.log"
