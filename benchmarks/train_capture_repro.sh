#!/usr/bin/env bash
# The article's train run (triton, sdpa-cudnn, sdpa-flash) in each source tree given, one process each: each
# variant's device time, its method (cuda-graph or back-to-back), why a capture was refused where the tree records
# it, and torch's AccumulateGrad stream warning where it comes (docs/kernel.md, "The train run's 1.17 ms").
# Session 4 ran it on the H200 over `git archive 6b5f4b1` (the kernel's plan keeps its first output), the same with
# main's harness/runner.py and harness/measure.py copied in (each variant its own leaves), and main:
#   bash benchmarks/train_capture_repro.sh ../old ../mix .     (msgspec and kernels installed or on PYTHONPATH)
set -u
export PYTHONUNBUFFERED=1
for tree in "$@"; do
  echo "== $tree ($(date +%T))"
  out=$(mktemp -d)
  (cd "$tree" && PYTHONPATH=${PYTHONPATH:+$PYTHONPATH:}$PWD/src timeout 45 python3 -m attnprof run --mode train \
    --batch 8 --heads 16 --seq 1024 --head-dim 64 --variants triton,sdpa-cudnn,sdpa-flash --no-report --no-history \
    --out "$out" 2>&1 | grep -E "AccumulateGrad node's stream|status: ok|fastest" | cut -c1-260)
  python3 - "$out" <<'PY'
import glob, json, sys
results = json.load(open(glob.glob(f"{sys.argv[1]}/*/results.json")[0]))
for v in results["variants"]:
    d = v["device_us"]
    print("  ", v["name"], d["method"], d["median"], d["unstable"], d.get("graph_refused"), "host", v["host_us"])
PY
done
