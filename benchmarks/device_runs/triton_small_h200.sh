#!/usr/bin/env bash
# The H200 run behind docs/kernel.md's small-problem, layout and step tables, from the repository root on
# the device machine (Python packages there; msgspec carried as a wheel for attnprof's own tests). Logs
# under $OUT (default /tmp/triton-small):
#   small.log, triton_small.json, profile_*.txt   benchmarks/kernel/triton_small.py: candidates at the small
#                   problems against cuDNN, layouts, host cost, the step at the article's problem
#   pytest.log      the forward's GPU tests (layouts, errors against cuDNN's) and the plan/graph ones
# SMALL_S and TESTS_S are the two steps' time limits in seconds (TESTS_S=0: no tests).
set -u
OUT=${OUT:-/tmp/triton-small}
WHEELS=${WHEELS:-.whl}
mkdir -p "$OUT"
export PYTHONUNBUFFERED=1
python3 -m pip install -q --no-index --no-deps --target /tmp/site "$WHEELS"/msgspec-*.whl 2> /dev/null
export PYTHONPATH=src:/tmp/site
timeout "${SMALL_S:-190}" python3 benchmarks/kernel/triton_small.py --out "$OUT" > "$OUT/small.log" 2>&1
echo "small rc=$?"; grep -v "^  compile failed" "$OUT/small.log" | cut -c1-200 | tail -n 62
[ "${TESTS_S:-75}" = 0 ] && exit 0
timeout "${TESTS_S:-75}" python3 -m pytest -q -x -n 8 -m cuda -p no:cacheprovider tests/triton_kernel/test_flash_attn_triton.py \
    tests/triton_kernel/test_kernel_on_gpu.py -k "bshd_and_packed or error_is_no_worse or plan or graph or 333" \
    > "$OUT/pytest.log" 2>&1
echo "pytest rc=$?"; tail -n 4 "$OUT/pytest.log"
