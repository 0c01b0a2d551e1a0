#!/usr/bin/env bash
# The whole-kernel check on a fresh H200 (the lead's last call of round 3, session 3), most wanted first:
# GPU tests, the train run, the small problems, the [B, S, H, D] step, the window-256 step against flex,
# the step's host cost and the backward at S=4096 D=128 causal. Logs under $OUT (log.txt, pytest.log).
# Run from the repository root on the device; msgspec and kernels as wheels under WHEELS (default .whl).
set -u
export PYTHONUNBUFFERED=1
python3 -m pip install -q --no-index --no-deps --target /tmp/site ${WHEELS:-.whl}/*.whl || exit 1
export PYTHONPATH=/tmp/site:$PWD/src
OUT=${OUT:-/tmp/h200-check}; mkdir -p "$OUT"
L=$OUT/log.txt
python3 -c "import torch,triton;print(torch.__version__,triton.__version__,torch.backends.cudnn.version())" > $L 2>&1
echo "== cuda tests" >> $L
timeout 120 python3 -m pytest -q -n 8 -m cuda -p no:cacheprovider tests/triton_kernel > $OUT/pytest.log 2>&1; echo "rc=$?" >> $L
tail -n 3 $OUT/pytest.log >> $L; grep -E "FAILED|Error" $OUT/pytest.log | head -20 >> $L
echo "== train run (article problem)" >> $L
timeout 70 python3 -m attnprof run --mode train --batch 8 --heads 16 --seq 1024 --head-dim 64 \
  --variants triton,sdpa-cudnn,sdpa-flash --no-report --no-history --out /tmp/tr >> $L 2>&1; echo "rc=$?" >> $L
echo "== small check" >> $L
timeout 90 python3 benchmarks/triton_small_check.py >> $L 2>&1; echo "rc=$?" >> $L
echo "== layout step" >> $L
timeout 45 python3 benchmarks/triton_small_sections.py --layout-step --out $OUT/ls >> $L 2>&1; echo "rc=$?" >> $L
echo "== masked window256 step" >> $L
timeout 70 python3 benchmarks/triton_masked_backward.py --part train --cases window256_s2048 --rounds 3 --out $OUT/mb 2>&1 | grep -v Warning | tail -8 >> $L; echo "rc=$?" >> $L
echo "== step host cost" >> $L
timeout 45 python3 benchmarks/triton_step_host_cost.py --gpu >> $L 2>&1; echo "rc=$?" >> $L
echo "== backward" >> $L
timeout 55 python3 benchmarks/triton_backward.py --out $OUT/bwd --only s4096-d128-causal >> $L 2>&1; echo "rc=$?" >> $L
cat $L
