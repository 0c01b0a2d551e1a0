#!/usr/bin/env bash
# Issue 24's host-cost call (session 4): the prepared launch's tests on the device's Triton, the step's host
# cost (prepared launch, Triton's runner, no-op launches, cuDNN), host per call and latency against SDPA, why
# the harness's train timing read 1.17 ms, the train run, the article's forward and step, then every GPU test.
# Run from the repository root on the device; msgspec and kernels as wheels in the folders WHEELS names
# (space-separated, default .whl).
set -u
export PYTHONUNBUFFERED=1
python3 -m pip install -q --no-index --no-deps --target /tmp/site $(for d in ${WHEELS:-.whl}; do echo $d/*.whl; done) \
  || exit 1
export PYTHONPATH=/tmp/site:$PWD/src
OUT=${OUT:-/tmp/h200-host}; mkdir -p "$OUT"
L=$OUT/log.txt
python3 -c "import torch,triton;print(torch.__version__,triton.__version__,torch.backends.cudnn.version())" > $L 2>&1
step() { echo "== $1 ($(date +%T))" >> $L; shift; timeout "$@" >> $L 2>&1; echo "rc=$?" >> $L; }
step "prepared launch tests" 45 python3 -m pytest -q -p no:cacheprovider tests/triton_kernel/test_prepared_launch.py tests/triton_kernel/test_plans.py
step "step host cost" 45 python3 benchmarks/kernel/triton_step_host_cost.py --gpu
step "host cost and latency" 30 python3 benchmarks/kernel/triton_host_cost.py
step "harness train timing" 45 python3 benchmarks/kernel/harness_train_timing.py
step "train run (article problem)" 60 python3 -m attnprof run --mode train --batch 8 --heads 16 --seq 1024 \
  --head-dim 64 --variants triton,sdpa-cudnn,sdpa-flash --no-report --no-history --out /tmp/tr
cp /tmp/tr/*/results.json $OUT/train_results.json 2>/dev/null
step "small check (article)" 40 python3 benchmarks/kernel/triton_small_check.py article
echo "== cuda tests ($(date +%T))" >> $L
timeout ${TESTS_S:-120} python3 -m pytest -q -n 8 -m cuda -p no:cacheprovider tests/triton_kernel > $OUT/pytest.log 2>&1
echo "rc=$?" >> $L; tail -n 3 $OUT/pytest.log >> $L; grep -E "FAILED|Error" $OUT/pytest.log | head -20 >> $L
cat $L
