#!/usr/bin/env bash
# One H200 call for the article's forward (B8 H16 S1024 D64 causal, bf16): the candidate forwards against
# cuDNN side by side in one process, ROUNDS alternating rounds of device time and of latency
# (benchmarks/kernel/triton_small_quick.py: compiled first in parallel workers, errors against float64), then the
# forward's GPU tests. From the repository root on the device machine; logs under $OUT:
#   gpu.txt      the card, its clocks and temperature before the timing
#   quick.log, triton_small_quick.json   the candidates
#   pytest.log   the skip_above bit-identity tests and the forward's errors and layouts against cuDNN's
# BENCH_S and TESTS_S: the two steps' time limits in seconds. WHEELS: the msgspec wheel's folder.
set -u
OUT=${OUT:-/tmp/triton-article}
mkdir -p "$OUT"
export PYTHONUNBUFFERED=1
python3 -m pip install -q --no-index --no-deps --target /tmp/site "${WHEELS:-.whl}"/msgspec-*.whl 2> /dev/null
export PYTHONPATH=/tmp/site:$PWD/src
nvidia-smi --query-gpu=name,driver_version,clocks.sm,clocks.max.sm,temperature.gpu,power.draw --format=csv \
    > "$OUT/gpu.txt" 2>&1
LABELS="gluon two_per_sm_n64_s2,gluon two_per_sm_n64_s2 again,gluon two_per_sm_n64_s2_skip,\
gluon two_per_sm_n64_s3_skip,gluon two_per_sm_n64_s2 (L2 group 32 MiB),gluon two_per_sm_n64_s2_skip (L2 group 32 MiB)"
timeout "${BENCH_S:-80}" python3 benchmarks/kernel/triton_small_quick.py --out "$OUT" --only b8-s1024-d64-causal \
    --rounds "${ROUNDS:-9}" --labels "$LABELS" > "$OUT/quick.log" 2>&1
echo "quick rc=$?"; grep -v "^  compile failed" "$OUT/quick.log" | cut -c1-200 | tail -n 14
[ "${TESTS_S:-60}" = 0 ] && exit 0
timeout "${TESTS_S:-60}" python3 -m pytest -q -n 8 -m cuda -p no:cacheprovider \
    tests/triton_kernel/test_forward_skip_above.py tests/triton_kernel/test_flash_attn_triton.py > "$OUT/pytest.log" 2>&1
echo "pytest rc=$?"; tail -n 4 "$OUT/pytest.log"
