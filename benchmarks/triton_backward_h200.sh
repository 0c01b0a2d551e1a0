#!/usr/bin/env bash
# One device call for the backward (issue 24): whether the Gluon backward applies, the backward's GPU tests at
# the shapes it takes, then benchmarks/triton_backward.py at the bar's shapes with the single column through
# the Gluon kernel (FLASH_ATTN_TRITON_ATOMIC_DQ=gluon). From the repository root: OUT=DIR bash THIS [SHAPES]
set -u
export PYTHONUNBUFFERED=1
python3 -m pip install -q --no-index --no-deps --target /tmp/site .dev/whl/*.whl 2>/dev/null
export PYTHONPATH=/tmp/site:$PWD/src
SHAPES=${1:-s4096-d128-causal,s4096-d128,s8192-d128-causal,s8192-d128,s4096-d64-causal}
nvidia-smi --query-gpu=name,clocks.sm,memory.used --format=csv,noheader
timeout 60 python3 -c "
import torch; from attnprof.kernels import import_from_folder
m = import_from_folder(); q = torch.randn(1, 2, 1024, 128, device='cuda', dtype=torch.bfloat16)
print('Gluon backward:', m._backward_hopper_launch.unsupported(q, q, True, 0) or 'applies')"
timeout 100 python3 -m pytest -q -n 8 -p no:cacheprovider tests/triton_kernel/test_kernel_on_gpu.py -m cuda \
    -k "(gradients and (1024 or 512)) or plan" 2>&1 | tee "$OUT/tests.log" | tail -15
timeout 200 python3 benchmarks/triton_backward.py --out "$OUT" --only "$SHAPES" --single gluon 2>&1 | grep -v Warning \
    | tee "$OUT/bench.log"
