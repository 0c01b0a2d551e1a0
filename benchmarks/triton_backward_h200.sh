#!/usr/bin/env bash
# One device call for the backward (issue 24): the Gluon single passes checked against the two-pass backward
# (benchmarks/triton_backward_probe.py --check), benchmarks/triton_backward.py at the bar's shapes with a
# column for each Gluon kernel that agreed, the backward's GPU tests, then Nsight Compute's stall reasons and
# speed of light for every backward kernel at S4096 D128 causal. From the repository root, msgspec installed
# (the device's README): OUT=DIR bash THIS [SHAPES] [SINGLES]
set -u
export PYTHONUNBUFFERED=1 PYTHONPATH=/tmp/site:$PWD/src
SHAPES=${1:-s4096-d128-causal,s4096-d128,s8192-d128-causal,s8192-d128,s4096-d64-causal}
SINGLES=${2:-gluon_ws,gluon_ws_dk,gluon}
nvidia-smi --query-gpu=name,clocks.sm,memory.used --format=csv,noheader
timeout 90 python3 benchmarks/triton_backward_probe.py --check "$SINGLES" 2>&1 | grep -v Warning | tee "$OUT/check.log"
AGREE=$(sed -n 's/^agree: //p' "$OUT/check.log")
echo "timing the single passes: ${AGREE:-none}"
timeout 240 python3 benchmarks/triton_backward.py --out "$OUT" --only "$SHAPES" --single "${AGREE:-1}" 2>&1 \
    | grep -v Warning | tee "$OUT/bench.log"
timeout 90 python3 -m pytest -q -n 8 -p no:cacheprovider tests/triton_kernel/test_kernel_on_gpu.py -m cuda \
    -k "(gradients and (1024 or 512)) or plan" 2>&1 | tee "$OUT/tests.log" | tail -6
NCU=$(command -v ncu || ls /opt/nvidia/nsight-compute/*/ncu 2>/dev/null | head -1)
STALLS=$(for r in barrier long_scoreboard wait math_pipe_throttle short_scoreboard mio_throttle membar sleeping \
    dispatch_stall no_instruction not_selected selected lg_throttle misc branch_resolving drain imc_miss; do
    printf 'smsp__average_warps_issue_stalled_%s_per_issue_active.ratio,' $r; done)
timeout 110 "$NCU" --clock-control none -k 'regex:bwd_(dkdv|dq|hopper|hopper_ws)$' -c 5 --section WarpStateStats \
    --section SpeedOfLight --section LaunchStats --section Occupancy --section ComputeWorkloadAnalysis \
    --metrics "${STALLS%,}" python3 benchmarks/triton_backward_probe.py --profile "0,$AGREE" > "$OUT/ncu.txt" 2>&1
grep -E "bwd_|Duration|Throughput|stalled|Warp Cycles Per Issued|Eligible|Registers Per|Achieved Occ|SM Busy|Issue Slots" \
    "$OUT/ncu.txt" | sed 's/smsp__average_warps_issue_stalled_//; s/_per_issue_active.ratio//' | head -120
