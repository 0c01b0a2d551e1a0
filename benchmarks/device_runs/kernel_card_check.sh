#!/usr/bin/env bash
# One card's checks and figures for the kernel (issue 44) and the GPU paths of issue 43, from the repository
# root on the device machine, wheels for msgspec, kernels and tomlkit carried in .whl/:
#   bash benchmarks/device_runs/kernel_card_check.sh [STEP ...]      (default: every step, in this order)
# Steps, each under its own time limit so that one stuck step leaves the others' results:
#   tests    every test marked cuda (pytest -m cuda, 8 workers)
#   repo     a padded config-built Llama on attn_implementation="<org>/<repo>" (transformers' flash wrapper
#            around the kernel's flash_attn_varlen_func) against SDPA (tests/triton_kernel/interpreted_llama.py);
#            the kernels wheels in .whl/repo/, if any, go first on its path: the image's transformers (5.17)
#            takes kernels >=0.16,<0.17 for hub kernels (kernels 0.16.1 and kernels-data 0.16.1 load our folder)
#   versus   benchmarks/kernel/triton_vs_cudnn.py: forward and backward against cuDNN, batch-1 decode (with the
#            b1 step's fastest settings in the rounds when b1 ran first),
#            softcap and sinks against flex, head dims 256 and 192/128 against SDPA, in alternating rounds
#   decode   benchmarks/kernel/triton_decode.py: B8 decode, 2k-128k keys, q-len 1-16, against cuDNN and flash, with
#            both K/V reads (TMA, pointer loads) in the same rounds; a paged cache against flex_attention's
#            PagedAttention on the same pages
#   b1       benchmarks/kernel/triton_decode.py --b1-sweep: batch-1 decode by split count and tile
#   fwdcfg   triton_vs_cudnn.py's forward_configs part: the Gluon forward's other configurations against the
#            default and cuDNN at D128 S4k-8k (what the per-card table chooses from), into $OUT/fwdcfg/
#   run      `attnprof run --ncu` on three variants: each variant's memory view and Nsight child on a GPU
#   kbench   `kernels benchmark` on the kernel's folder: the hub's own tool, ours against SDPA cuDNN
#   wide     benchmarks/kernel/triton_wide_configs.py: head dims 256 and 192/128, the backward's (dense, masked, the
#            atomic single pass) and the forward's tile candidates against the shipped ones and cuDNN (not in the
#            default list)
#   pdltrace benchmarks/kernel/decode_trace_overlap.py: batch-1 decode under torch.profiler with and without the
#            combine as a dependent launch, what its trace shows (attnprof's overlap check; not in the default list)
#   fa       flash-attention's own tests through benchmarks/fa_shim (not in the default list: ~8 minutes alone;
#            carry the three fetched files, benchmarks/fa_shim/README.md)
# VERSUS_PARTS picks triton_vs_cudnn.py's parts (default dense,d64,decode,features,head_dims).
# WIDE_PARTS picks triton_wide_configs.py's (default backward,masked,forward).
# Each step's time on an H100 (2026-12-07): tests 104-107 s, b1 20-31, versus 96-125, wide 69, fwdcfg 37, repo 18,
# kbench 7, fa 365 (8 workers; its race part, added since, up to 70 more); decode with versus's decode part and 16
# GPU tests 92 s. Three calls that fit the device tool's 10 minutes: `tests b1 versus wide`, `decode fwdcfg repo
# run kbench`, `fa`; where device time is short, the first alone (the GPU tests and every figure a card table or
# docs/kernel.md quotes but fwdcfg's and the B8 decode's: 267 s on the H100 of session 19). Before a call
# after a kernel edit, run on the CPU `python benchmarks/kernel/plain_kernels_sm90.py same REV` and `hopper_same_ptx.py REV`
# (and tests/triton_kernel/test_sm90_compile.py): a kernel the interpreter runs can still fail to compile.
# Everything lands under $OUT (the device tool's folder; default /tmp/card-check); back on this machine,
# `python benchmarks/kernel/card_check_tables.py <that folder>` prints its figures as tables (per-round ratios).
set -u
export OUT=${OUT:-/tmp/card-check}
mkdir -p "$OUT"
python3 -m pip install -q --no-index --no-deps --no-compile --no-cache-dir --upgrade --target /tmp/site .whl/*.whl \
    || exit 1
export PYTHONPATH=src:/tmp/site PYTHONUNBUFFERED=1
nvidia-smi --query-gpu=name,driver_version,clocks.max.sm --format=csv,noheader
python3 -c "import torch, triton; print('torch', torch.__version__, 'triton', triton.__version__, 'cudnn', \
torch.backends.cudnn.version())"

step() {  # name seconds command...: the step's output in $OUT/<name>.log, its last lines printed
  local name=$1 limit=$2
  shift 2
  local t0=$SECONDS
  timeout -k 10 "$limit" "$@" > "$OUT/$name.log" 2>&1
  echo "== $name: rc=$? in $((SECONDS - t0)) s"
  tail -n "${TAIL:-12}" "$OUT/$name.log" | cut -c1-400
}

steps=("$@")
[ ${#steps[@]} -eq 0 ] && steps=(tests b1 versus fwdcfg repo run kbench)
for s in "${steps[@]}"; do
  case $s in
    tests) step tests 200 python3 -m pytest -q -m cuda -n 8 -p no:cacheprovider --maxfail=15 --no-header -rfE tests ;;
    repo) rm -rf /tmp/site-repo && ls .whl/repo/*.whl > /dev/null 2>&1 && python3 -m pip install -q --no-index \
            --no-deps --no-compile --no-cache-dir --target /tmp/site-repo .whl/repo/*.whl
          PYTHONPATH=src:/tmp/site-repo:/tmp/site step repo 90 python3 tests/triton_kernel/interpreted_llama.py repo ;;
    versus) sweep=(); [ -f "$OUT/decode_b1_sweep.json" ] && sweep=(--b1-sweep "$OUT/decode_b1_sweep.json")
        step versus 240 python3 benchmarks/kernel/triton_vs_cudnn.py --out "$OUT" --rounds 5 \
        --part "${VERSUS_PARTS:-dense,d64,decode,features,head_dims}" "${sweep[@]}" ;;
    fwdcfg) mkdir -p "$OUT/fwdcfg"; step fwdcfg 120 python3 benchmarks/kernel/triton_vs_cudnn.py --out "$OUT/fwdcfg" \
        --rounds 5 --part forward_configs ;;
    decode) step decode 200 python3 benchmarks/kernel/triton_decode.py --out "$OUT" --rounds 5 ;;
    b1) step b1 100 python3 benchmarks/kernel/triton_decode.py --b1-sweep --out "$OUT" ;;
    run) step run 150 python3 -m attnprof run --variants naive,sdpa-flash,triton --batch 2 --heads 8 --seq 1024 \
        --head-dim 64 --ncu --no-history --out /tmp/run43
         cp /tmp/run43/*/results.json "$OUT/run_results.json" 2> /dev/null ;;
    wide) step wide 240 python3 benchmarks/kernel/triton_wide_configs.py --out "$OUT" --rounds 5 \
        --parts "${WIDE_PARTS:-backward,masked,forward}" ;;
    pdltrace) step pdltrace 120 python3 benchmarks/kernel/decode_trace_overlap.py --out "$OUT/decode_traces" ;;
    kbench) step kbench 120 python3 -c "import sys; from kernels._internals.cli import main; sys.argv[0] = 'kernels'; \
sys.exit(main())" benchmark ./src/attnprof/kernels/flash_attn_triton --iterations 50 --warmup 10 ;;
    # a worker per 10 GiB of the card: 14 on an H100 ran out of memory at 4224x4224; the same tests passed 4 at once
    fa) gib=$(nvidia-smi --query-gpu=memory.total --format=csv,noheader,nounits | head -1)
        export FA_WORKERS=${FA_WORKERS:-$(( ${gib:-81920} / 10240 ))}; step fa 560 bash benchmarks/fa_shim/run_fa_tests.sh
        cat "$OUT/fa_tests.log" ;;
    *) echo "unknown step $s" ;;
  esac
done
