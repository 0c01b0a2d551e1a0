#!/usr/bin/env bash
# flash-attention's own Hopper tests (hopper/test_flash_attn.py, copied beside this script) against
# attnprof's flash_attn_triton, through the FA3-interface shim flash_attn_interface.py beside it.
# Run from the project's root on a GPU machine, flash-attention's hopper test files fetched beside it
# (ignored by git here: fetched code is never committed):
#   bash benchmarks/fa_shim/run_fa_tests.sh     (carry the three fetched files: README.md)
# Needs python3 with torch, triton, pytest and einops; no network. Uses pytest-timeout and pytest-xdist
# when they import, and runs without them. Writes $OUT/fa_tests.log (the summary; printed at the end) and
# $OUT/fa_<part>_full.log (pytest's whole output per part).
# Knobs: FA_SHIM_PROFILE=quick|full (conftest.py), FA_WORKERS (xdist workers, default 4; 1: none),
# FA_MAXFAIL (default 5 a part), FA_TEST_TIMEOUT (per test, s, default 240), FA_BUDGET_OUTPUT /
# FA_BUDGET_VARLEN / FA_BUDGET_KVCACHE / FA_BUDGET_RACE (s a part, default 160 / 120 / 110 / 70),
# FA_SHIM_STRICT=1 (skip what the shim composes from several kernel calls instead of composing it).
set -uo pipefail

ROOT=$PWD
SHIM=${FA_SHIM_DIR:-$(cd "$(dirname "$0")" && pwd)}
KERNEL=${FA_KERNEL_DIR:-$ROOT/src/attnprof/kernels/flash_attn_triton/build/torch-cuda}
OUT=${OUT:-$ROOT/fa_shim_out}
mkdir -p "$OUT"
LOG=$OUT/fa_tests.log
: > "$LOG"

export PYTHONPATH=$SHIM:$KERNEL${PYTHONPATH:+:$PYTHONPATH}
export PYTHONUNBUFFERED=1 PYTHONDONTWRITEBYTECODE=1
export FA_SHIM_PROFILE=${FA_SHIM_PROFILE:-quick}
# What flash_attn_triton lacks, switched off where the test module reads them (at its import):
#   FP8 (q/k/v_descale), head dim 96 (it has 64, 128, 256 and 192 with v 128). SOFTCAP and PAGEDKV are on:
#   the shim passes them to the kernel (pages of fewer than 64 rows are skipped by it, deselected by quick).
# Kept on: BACKWARD (autograd through flash_attn_func / flash_attn_varlen_func), LOCAL (windows; FA3's
# attention_chunk, which rides on it, is composed by the shim), APPENDKV (its KV-cache append), FP16.
export FLASH_ATTENTION_DISABLE_FP8=TRUE
export FLASH_ATTENTION_DISABLE_HDIM96=TRUE
# PACKGQA and SPLIT only repeat the same call with FA3 scheduling hints the shim ignores: off for the dense and
# varlen parts (4x fewer identical calls); SPLIT stays on for the KV-cache part, where num_splits 1/3/0 reach
# our split-KV decode.

{
  echo "== fa_shim: flash-attention hopper/test_flash_attn.py vs flash_attn_triton ($(date -u +%FT%TZ))"
  echo "profile=$FA_SHIM_PROFILE; disabled: FP8 HDIM96 (+ PACKGQA, SPLIT outside kvcache)"
  nvidia-smi --query-gpu=name,driver_version --format=csv,noheader 2>&1 | head -2
  python3 -c "import torch, triton, einops, pytest, flash_attn_triton as f
print('torch', torch.__version__, '| triton', triton.__version__, '| pytest', pytest.__version__, '| cuda', torch.cuda.is_available(), torch.cuda.get_device_name() if torch.cuda.is_available() else '')
print('flash_attn_triton', f.__version__, 'from', f.__file__.rsplit('/', 3)[-3])"
} >> "$LOG" 2>&1 || { echo "preflight failed (see above)" >> "$LOG"; cat "$LOG"; exit 1; }

extra=()
if python3 -c "import pytest_timeout" 2>/dev/null; then
  extra+=(--timeout="${FA_TEST_TIMEOUT:-240}")
else
  echo "pytest-timeout absent: no per-test timeout (each part still has its budget)" >> "$LOG"
fi
WORKERS=${FA_WORKERS:-4}
if [ "$WORKERS" -gt 1 ] && python3 -c "import xdist" 2>/dev/null; then
  extra+=(-n "$WORKERS")
else
  echo "pytest-xdist absent or FA_WORKERS=1: one process" >> "$LOG"
fi

summarize() {  # part rc budget log
  python3 - "$@" <<'EOF'
import re, sys
part, rc, budget, path = sys.argv[1:5]
text = open(path, errors="replace").read()
lines = text.splitlines()
final = [l for l in lines if re.match(r"^=+ .*\b(passed|failed|skipped|error|errors|deselected|no tests ran)\b.* in [\d.]+s", l)]
counts = {}
if final:
    for n, what in re.findall(r"(\d+) (passed|failed|skipped|deselected|errors?|xfailed|xpassed)", final[-1]):
        counts[what.rstrip("s") if what.startswith("error") else what] = int(n)
else:  # cut off before pytest's own summary: count the progress lines
    for m in re.finditer(r"(?m)^(?:\[gw\d+\] \[ *\d+%\] (PASSED|FAILED|SKIPPED|ERROR) \S+::|\S+::\S+ (PASSED|FAILED|SKIPPED|ERROR))", text):
        w = (m.group(1) or m.group(2)).lower()
        w = {"error": "error"}.get(w, w)
        counts[w] = counts.get(w, 0) + 1
note = {"0": "all passed", "1": "some failed", "124": f"BUDGET HIT ({budget}s): partial", "137": "killed"}.get(rc, f"rc={rc}")
print(f"-- {part}: " + ", ".join(f"{counts.get(k, 0)} {k}" for k in ("passed", "failed", "skipped", "error"))
      + (f", {counts['deselected']} deselected" if "deselected" in counts else "") + f" [{note}]")
if final:
    print("   pytest: " + final[-1].strip("= "))
short = [l for l in lines if re.match(r"^(FAILED|ERROR) \S+::", l)]
for l in short[:8]:
    print("   " + l[:400])
skips = [l for l in lines if l.startswith("SKIPPED [")]
for l in skips[:6]:
    print("   " + l[:300])
start = next((i for i, l in enumerate(lines) if re.match(r"^_+ \S*test_\S+ _+$", l)), None)
if start is not None:
    print("   first failure:")
    end = next((j for j in range(start + 1, len(lines)) if re.match(r"^(_+ \S*test_\S+ _+|=+ .*)$", lines[j])), len(lines))
    body = [l for l in lines[start:end] if not re.match(r"^(dv|dQ|dK|dV|Output|Pytorch|pack_gqa|num_splits) ", l)]
    for l in body[:45]:
        print("   | " + l[:300])
if not final and not counts:
    for l in lines[-15:]:
        print("   > " + l[:300])
EOF
}

one_process=()  # after extra: xdist's -n 0, for a part whose tests each take most of the card's memory
[ "$WORKERS" -gt 1 ] && python3 -c "import xdist" 2>/dev/null && one_process=(-n 0)

run_part() {  # name budget node [VAR=value ...]; part_args: more pytest options for this part
  local name=$1 budget=$2 node=$3
  shift 3
  local full=$OUT/fa_${name}_full.log
  echo "== $name: $node (budget ${budget}s) $*" >> "$LOG"
  (cd "$SHIM" && env COLUMNS=400 "$@" timeout -s INT -k 30 "$budget" python3 -m pytest -p no:cacheprovider -v -rfEs \
      --tb=short --maxfail="${FA_MAXFAIL:-5}" "${extra[@]}" "${part_args[@]}" "$node") > "$full" 2>&1
  local rc=$?
  summarize "$name" "$rc" "$budget" "$full" >> "$LOG" 2>&1
}

T0=$SECONDS
part_args=()
run_part output "${FA_BUDGET_OUTPUT:-160}" test_flash_attn.py::test_flash_attn_output \
  FLASH_ATTENTION_DISABLE_PACKGQA=TRUE FLASH_ATTENTION_DISABLE_SPLIT=TRUE
run_part varlen "${FA_BUDGET_VARLEN:-120}" test_flash_attn.py::test_flash_attn_varlen_output \
  FLASH_ATTENTION_DISABLE_PACKGQA=TRUE FLASH_ATTENTION_DISABLE_SPLIT=TRUE
run_part kvcache "${FA_BUDGET_KVCACHE:-110}" test_flash_attn.py::test_flash_attn_kvcache \
  FLASH_ATTENTION_DISABLE_PACKGQA=TRUE
part_args=("${one_process[@]}")  # each test holds a 70 GiB dummy allocation: one at a time
run_part race "${FA_BUDGET_RACE:-70}" test_flash_attn.py::test_flash_attn_race_condition
echo "== done in $((SECONDS - T0))s; full pytest output: $OUT/fa_*_full.log" >> "$LOG"
tail -n 80 "$LOG"
