#!/usr/bin/env bash
# Context parallelism on 2 x H200 (nvidia-h200-x2): the 2-rank traces the tests read, speed-up and
# efficiency at 32k and 128k tokens, and how the multi-rank analysis scales (synthesised ranks).
# Run from the repository root on the device; everything lands in $OUT (cp.tar.gz and log.txt).
set -u
export NCCL_NVLS_ENABLE=0 TORCH_SYMM_MEM_DISABLE_MULTICAST=1 NVSHMEM_DISABLE_NVLS=1
export PYTHONPATH=${PYTHONPATH:-src} PYTHONUNBUFFERED=1  # a frozen copy of src/ may be given
W=/tmp/cp
mkdir -p "$W"
nvidia-smi -L
python3 -c "import torch; print('torch', torch.__version__, 'nccl', torch.cuda.nccl.version())"

cp_run() {  # seconds, folder, attnprof run arguments...
  local limit=$1 name=$2
  shift 2
  echo "== $name: attnprof run --nproc 2 $*"
  timeout "$limit" python3 -m attnprof run --nproc 2 --out "$W/$name" "$@" >"$W/$name.txt" 2>"$W/$name.err"
  echo "rc=$?"
  cat "$W/$name.txt"
  grep -v -i "warn" "$W/$name.err" | tail -5
  tar czf "$OUT/cp.tar.gz" -C "$W" .  # after every step: a later timeout loses nothing
}

analyze_both() {  # the training-step traces of one backend: both ranks together, then rank 0 alone
  set -- "$W"/s32k/*/*_"$1"_train_rank*.json.gz
  echo "== attnprof analyze, 2 ranks: $*"
  python3 -m attnprof analyze "$@" --json >"$W/analyze_$(basename "$1" .json.gz)_2ranks.json"
  python3 -m attnprof analyze "$@"
  echo "== attnprof analyze, rank 0 alone: $1"
  python3 -m attnprof analyze "$1" | grep -A1 "exposed-comm\|cp-merge"
}

# B=1 H=16 D=128 bf16 causal, the reference facts' problem; traces of every case
cp_run 120 s32k --seq 32768 --variants sdpa-cudnn,sdpa-flash,sdpa-efficient --cp-modes fwd,train --repeats 10
cp_run 100 s128k --seq 131072 --variants sdpa-cudnn,sdpa-flash --cp-modes train --repeats 5 --warmup 2
analyze_both sdpa-cudnn
analyze_both sdpa-flash

# issue 17: analysis of 1..8 ranks synthesised from the two recorded ranks (32 cores here)
set -- "$W"/s32k/*/*_sdpa-cudnn_train_rank*.json.gz
python3 "$(dirname "$0")/../engine/cp_scaling.py" "$@" --ranks 1,2,4,8 --repeat 1
python3 "$(dirname "$0")/../engine/cp_scaling.py" "$@" --ranks 1,2,4,8 --repeat 40

cp_run 60 s32k_alltoall --seq 32768 --variants sdpa-cudnn,sdpa-flash --cp-modes train --cp-rotate alltoall --repeats 10
cp_run 70 flex --seq 32768 --variants flex --cp-modes fwd,train --repeats 10
ls -la "$OUT"
