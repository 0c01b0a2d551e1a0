#!/usr/bin/env bash
# The H200 run behind docs/kernel.md, from the repository root on the device machine (torch, triton, ncu
# there; attnprof's one missing dependency, msgspec, carried as a wheel in .whl/):
#   bash benchmarks/device_runs/triton_h200.sh [--only NAME,NAME]
# 1. benchmarks/kernel/triton_attention.py: every configuration of attnprof's Triton kernel, the tutorial-style
#    baseline, cuDNN and flash, with errors against float64 (bench.log, triton_attention.json);
# 2. Nsight Compute on cuDNN's and our fastest kernel at s4096-d128-causal (ncu.csv);
# 3. benchmarks/kernel/triton_ablation.py: what each choice is worth, one change at a time (ablation.log);
# 4. `attnprof run --ncu` with sdpa-cudnn, sdpa-flash and triton at B=4 H=16 S=4096 D=128 (run.log,
#    run_results.json).
# Everything lands under $OUT (the device tool's folder; default /tmp/triton-bench).
set -u
OUT=${OUT:-/tmp/triton-bench}
mkdir -p "$OUT"
export PYTHONPATH=src
python3 benchmarks/kernel/triton_attention.py --out "$OUT" "$@" > "$OUT/bench.log" 2>&1
tail -n 40 "$OUT/bench.log"
if command -v ncu > /dev/null; then
  ncu --clock-control none --target-processes all -k regex:'flash_attn_triton|cudnn' \
      --section SpeedOfLight --section Occupancy --section LaunchStats --section ComputeWorkloadAnalysis \
      --export /tmp/ncu --force-overwrite \
      python3 benchmarks/kernel/triton_ncu_probe.py "$OUT/triton_attention.json" s4096-d128-causal > /tmp/ncu_probe.log 2>&1
  tail -n 3 /tmp/ncu_probe.log
  ncu --import /tmp/ncu.ncu-rep --csv --page raw > "$OUT/ncu.csv"
else
  echo "ncu is not on PATH"
fi
python3 benchmarks/kernel/triton_ablation.py --out "$OUT" > "$OUT/ablation.log" 2>&1
cat "$OUT/ablation.log"
if ls .whl/msgspec-*.whl > /dev/null 2>&1; then
  python3 -m pip install -q --no-index --no-deps --target /tmp/site .whl/msgspec-*.whl && export PYTHONPATH=src:/tmp/site
fi
python3 -m attnprof run --variants sdpa-cudnn,sdpa-flash,triton --batch 4 --heads 16 --seq 4096 --head-dim 128 \
    --ncu --no-report --no-history --out /tmp/attnprof-run > "$OUT/run.log" 2>&1
tail -n 30 "$OUT/run.log"
cp /tmp/attnprof-run/*/results.json "$OUT/run_results.json" 2> /dev/null || true
