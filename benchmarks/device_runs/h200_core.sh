#!/usr/bin/env bash
# GPU verification of the core on one H200 (what docs/benchmarks.md reports), in one device call:
# the cuda-marked tests, two runs of the default problem (run-to-run noise), compiled variants,
# the hub variant through a local kernel, and shapes only some backends take.
#   benchmarks/device_runs/h200_core.sh OUTDIR
set -uo pipefail
cd "$(dirname "$0")/../.."
out=${1:?usage: $0 OUTDIR}
mkdir -p "$out"
export COLUMNS=160 PYTHONUNBUFFERED=1
ap() { python3 -m attnprof "$@" 2>&1 | grep -v -e '^USDT' -e 'Warning' -e '_warn_once'; }
nvidia-smi --query-gpu=name,driver_version,clocks.sm,clocks.mem --format=csv,noheader
python3 -m pytest -q -m cuda -p no:cacheprovider tests 2>&1 | tail -15
ap run --out "$out/default"             # all variants, the article's problem
ap run --out "$out/default"             # again: medians should agree within noise
ap run --variants naive,inplace,sdpa-auto --compile --out "$out/compile"
ap run --variants hub --kernel tests/fixtures/local_kernel --out "$out/hub-local"
ap run --variants hub --out "$out/hub-default"
ap run --dtype fp32 --variants naive,sdpa-math,sdpa-flash,sdpa-efficient,sdpa-cudnn --out "$out/fp32"
ap run --head-dim 512 --variants sdpa-math,sdpa-flash,sdpa-efficient,sdpa-cudnn --out "$out/d512"
