#!/usr/bin/env bash
# One device call for the backward (issue 24): the Gluon kernel checked against the two-pass backward
# (benchmarks/kernel/triton_backward_probe.py --check), benchmarks/kernel/triton_backward.py at the bar's shapes and two
# small ones (the default, and the two-pass one beside it), the kernel's GPU tests, then Nsight Compute's
# duration of each of the Gluon backward's three kernels at S4096 D128 causal and its stall samples per SASS
# instruction. From the repository root, msgspec installed (the device's README): OUT=DIR bash THIS [SHAPES]
set -u
export PYTHONUNBUFFERED=1 PYTHONPATH=/tmp/site:$PWD/src
SHAPES=${1:-s4096-d128-causal,s4096-d128,s8192-d128-causal,s8192-d128,s4096-d64-causal,b16-s2048-d128-causal,b8-s1024-d64-causal}
nvidia-smi --query-gpu=name,clocks.sm,memory.used --format=csv,noheader
timeout 60 python3 benchmarks/kernel/triton_backward_probe.py --check gluon 2>&1 | grep -v Warning | tee "$OUT/check.log"
timeout 200 python3 benchmarks/kernel/triton_backward.py --out "$OUT" --only "$SHAPES" --single 0 2>&1 \
    | grep -v Warning | tee "$OUT/bench.log"
timeout 120 python3 -m pytest -q -n 8 -p no:cacheprovider tests/triton_kernel -m cuda 2>&1 | tee "$OUT/tests.log" \
    | grep -E "passed|failed|Error|FAIL" | tail -12
NCU=$(command -v ncu || ls /opt/nvidia/nsight-compute/*/ncu 2>/dev/null | head -1)
timeout 45 "$NCU" --clock-control none -k 'regex:bwd_(delta_zero|hopper|dq_convert)$' -c 3 --section SpeedOfLight \
    python3 benchmarks/kernel/triton_backward_probe.py --profile gluon > "$OUT/ncu.txt" 2>&1
grep -E "bwd_|Duration|DRAM Throughput|Compute \(SM\)" "$OUT/ncu.txt" | head -20
# where the Gluon kernel's warps stall, instruction by instruction (sampled), for the next step's choice
timeout 60 "$NCU" --clock-control none -k 'regex:bwd_hopper$' -c 1 --section WarpStateStats --section SourceCounters \
    --page source --print-source sass --csv python3 benchmarks/kernel/triton_backward_probe.py --profile gluon \
    > "$OUT/ncu_source.csv" 2>&1
head -c 600 "$OUT/ncu_source.csv"; echo; wc -l "$OUT/ncu_source.csv"
