#!/usr/bin/env bash
# The H200 run behind docs/kernel.md, from the repository root on the device machine (torch, triton, ncu there):
#   bash benchmarks/triton_h200.sh [--only NAME,NAME]
# Writes under $OUT: bench.log, triton_attention.json, ncu.csv (Nsight Compute's raw page for cuDNN's and
# our fastest kernel at s4096-d128-causal) and ncu.ncu-rep.
set -u
OUT=${OUT:-/tmp/triton-bench}
mkdir -p "$OUT"
export PYTHONPATH=src
python3 benchmarks/triton_attention.py --out "$OUT" "$@" > "$OUT/bench.log" 2>&1
tail -n 80 "$OUT/bench.log"
if command -v ncu > /dev/null; then
  ncu --clock-control none --target-processes all -k regex:'flash_attn_triton|cudnn' \
      --section SpeedOfLight --section Occupancy --section LaunchStats --section ComputeWorkloadAnalysis \
      --export "$OUT/ncu" --force-overwrite \
      python3 benchmarks/triton_ncu_probe.py "$OUT/triton_attention.json" s4096-d128-causal > "$OUT/ncu.log" 2>&1
  tail -n 5 "$OUT/ncu.log"
  ncu --import "$OUT/ncu.ncu-rep" --csv --page raw > "$OUT/ncu.csv"
  ncu --import "$OUT/ncu.ncu-rep" --print-summary none --page details | grep -iE "^  [a-z_]+.*\(|Achieved Occupancy|Theoretical Occupancy|Registers Per|Block Limit|Compute \(SM\) Throughput|Memory Throughput" | head -40
else
  echo "ncu is not on PATH"
fi
