#!/usr/bin/env bash
# The workloads of issue 12 on one H200, in one device call: reference traces of training steps, decode,
# GQA prefill and a sliding window (plain torch.profiler, benchmarks/device_runs/record_traces.py), then `attnprof run`
# in each mode (what docs/benchmarks.md reports, next to these exact commands).
#   benchmarks/device_runs/h200_modes.sh OUTDIR
set -uo pipefail
cd "$(dirname "$0")/../.."
out=${1:?usage: $0 OUTDIR}
mkdir -p "$out/fixtures" "$out/runs"
export COLUMNS=200 PYTHONUNBUFFERED=1 PYTHONPATH=src${PYTHONPATH:+:$PYTHONPATH}
quiet() { grep -v -e '^USDT' -e 'Warning' -e '_warn_once' -e 'warnings.warn'; }
ap() { timeout 240 python3 -m attnprof run --repeats 10 --no-report --no-history --out "$out/runs/$1" "${@:2}" 2>&1 | quiet; }
nvidia-smi --query-gpu=name,driver_version,clocks.sm,clocks.mem --format=csv,noheader
[ -n "${SKIP_RECORD:-}" ] || timeout 300 python3 benchmarks/device_runs/record_traces.py --out "$out/fixtures" --sets train,decode,gqa,window 2>&1 | quiet
ap train --mode train --batch 4 --heads 16 --seq 1024 --head-dim 64 \
  --variants naive,inplace,sdpa-math,sdpa-flash,sdpa-efficient,sdpa-cudnn,sdpa-auto,flex
ap decode --mode decode --batch 8 --heads 32 --kv-heads 8 --seq 8192 --head-dim 128 \
  --variants naive,sdpa-math,sdpa-flash,sdpa-efficient,sdpa-cudnn,sdpa-auto,flex
ap gqa --batch 2 --heads 32 --kv-heads 8 --seq 2048 --head-dim 128 --variants naive,sdpa-flash,sdpa-cudnn,sdpa-auto
ap window --mask window=256 --batch 4 --heads 16 --seq 4096 --head-dim 64 --variants naive,sdpa-auto,flex
ap window-dense --mask window=256 --dense-mask --batch 4 --heads 16 --seq 4096 --head-dim 64 \
  --variants sdpa-flash,sdpa-efficient,sdpa-cudnn,sdpa-auto,flex
