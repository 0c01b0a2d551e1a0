#!/usr/bin/env bash
# The sweep behind docs/benchmarks.md, on one H200: every variant, B=4, H=16, causal bf16,
# D=64 and 128, S=512..16384. naive and SDPA math store the S x S scores and run out of memory
# at the long end: those points are recorded as oom (fast) and the sweep goes on.
#
#   benchmarks/device_runs/h200_sweep.sh [OUT]            start a sweep in a new folder under OUT
#                                             (default attnprof-out/h200)
#   benchmarks/device_runs/h200_sweep.sh --resume DIR     continue it where it stopped
#
# One device command may run 10 minutes. The sweep gets SIGINT after BUDGET seconds (default
# 520), which keeps every finished point in DIR/results.jsonl and writes nothing half-done; the
# script then prints the --resume command that runs the rest. Repeats are modest (10 timed
# repeats of up to 200 calls each) because each timed repeat already averages many calls.
# Inputs rotate through ROTATE copies (default 8): at S=512, D=64 one q, k, v set is 12 MiB and
# would sit in the H200's L2 (about 50 MB: torch.cuda.get_device_properties(0).L2_cache_size)
# between calls; 8 sets (96 MiB) do not, as in a real model.
# Profiling is off (no traces) for speed; EXTRA=--profile adds per-point traces and kernel tables
# (each point then runs in its own process, about 10 s more per point).
set -uo pipefail
cd "$(dirname "$0")/../.."
export PYTHONPATH="$PWD/src${PYTHONPATH:+:$PYTHONPATH}"  # this checkout's attnprof
BUDGET=${BUDGET:-520}

if [ "${1:-}" = "--resume" ]; then
  [ -n "${2:-}" ] || { echo "usage: $0 --resume DIR" >&2; exit 2; }
  args=(--resume "$2")
else
  args=(--device cuda --batch 4 --heads 16 --head-dim 64,128 --dtype bf16
        --seq 512,1024,2048,4096,8192,16384 --repeats 10 --rotate-inputs "${ROTATE:-8}"
        --out "${1:-attnprof-out/h200}" ${EXTRA:-})
fi

timeout --signal=INT --kill-after=30 "$BUDGET" python3 -m attnprof sweep "${args[@]}"
rc=$?
if [ "$rc" -eq 124 ] || [ "$rc" -eq 130 ]; then
  dir=${2:-$(ls -dt "${1:-attnprof-out/h200}"/*_sweep | head -n 1)}
  echo "time budget reached; finished points are kept. Continue with: $0 --resume $dir" >&2
  python3 -m attnprof report "$dir" >&2  # the page for what finished so far
fi
exit "$rc"
