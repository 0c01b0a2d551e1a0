#!/usr/bin/env bash
# Issue 26's H200 call (round 3, session 4), in one command from the repository root on the device: the
# mask and varlen GPU tests while the benchmarks' kernels and flex compile, then the masked backward's
# candidates at window 256 (graph replay), the steps of all three mask cases against flex (ours: the
# default and TRAIN_CONFIGS', by default the Triton passes where the default is the Gluon backward), the
# ragged batch (forward and step) and the masked step's host profile.
# (Session 4's call ran it with the candidates of then, the dQ pass's delta among them: docs/kernel.md.)
# Logs under $OUT (log.txt the summary); msgspec as a wheel under WHEELS.
set -u
export PYTHONUNBUFFERED=1
python3 -m pip install -q --no-index --no-deps --target /tmp/site ${WHEELS:-.whl}/*.whl || exit 1
export PYTHONPATH=/tmp/site:$PWD/src
OUT=${OUT:-/tmp/h200-masks}; mkdir -p "$OUT"
L=$OUT/log.txt
nvidia-smi --query-gpu=name,clocks.sm,clocks.mem,temperature.gpu --format=csv,noheader > $L
python3 -c "import torch,triton;print(torch.__version__,triton.__version__)" >> $L 2>&1
start=$SECONDS
timeout ${TEST_S:-100} python3 -m pytest -q -n 6 -m cuda -p no:cacheprovider tests/triton_kernel/test_masked_backward.py \
  tests/triton_kernel/test_decode_and_masks.py tests/triton_kernel/test_backward_hopper.py > $OUT/pytest.log 2>&1 &
tests=$!
timeout ${PREWARM_S:-100} python3 benchmarks/kernel/triton_masked_backward.py --part prewarm --every-config \
  > $OUT/prewarm.log 2>&1; echo "prewarm rc=$? at $((SECONDS - start)) s" >> $L
wait $tests; echo "tests rc=$? at $((SECONDS - start)) s" >> $L
tail -n 2 $OUT/pytest.log >> $L; grep -E "^FAILED|Error" $OUT/pytest.log | head -8 >> $L
timeout ${TRAIN_S:-110} python3 benchmarks/kernel/triton_masked_backward.py --part sweep --part train --rounds ${ROUNDS:-7} \
  --train-configs ${TRAIN_CONFIGS:-triton} --out $OUT > $OUT/train.log 2>&1; echo "train rc=$? at $((SECONDS - start)) s" >> $L
grep -v Warn $OUT/train.log | tail -n 3 | cut -c1-600 >> $L
timeout ${RAGGED_S:-25} python3 benchmarks/kernel/triton_masks.py --part ragged --out $OUT > $OUT/ragged.log 2>&1
echo "ragged rc=$? at $((SECONDS - start)) s" >> $L; tail -n 1 $OUT/ragged.log | cut -c1-600 >> $L
timeout ${HOST_S:-15} python3 benchmarks/kernel/triton_decode_masks_host_cost.py --gpu > $OUT/host.log 2>&1
echo "host rc=$? at $((SECONDS - start)) s" >> $L; grep "==" $OUT/host.log >> $L
cat $L
