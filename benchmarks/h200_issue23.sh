#!/usr/bin/env bash
# issue 23 on the H200 host after the BLAS change: one-rank CPU by core count, 8 ranks by cores, llama64/unique64 on 2 cores
set -uo pipefail
mkdir -p /tmp/site && python3 -m pip install -q --no-deps --target /tmp/site .whl/msgspec-*.whl 2>&1 | tail -1
export PYTHONPATH=/tmp/site:$PWD/src
python3 -c "import sys, numpy, msgspec; print(sys.version.split()[0], numpy.__version__, msgspec.__version__)"
nproc; echo "PYTHONDONTWRITEBYTECODE=${PYTHONDONTWRITEBYTECODE:-unset}"; python3 -m compileall -q src >/dev/null  # bytecode, as an installed package has
T="timeout 240"
$T python3 benchmarks/big_trace.py --make /tmp/rank8.json --mb 8 | tail -1; md5sum /tmp/rank8.json
mkdir -p /tmp/r1 && ln -sf /tmp/rank8.json /tmp/r1/rank0.json
for c in 0-15 0-7 0,1; do for i in 1 2 3; do taskset -c $c /usr/bin/time -f "one rank on cores $c: %e s wall %U+%S s CPU" python3 -m attnprof analyze --json /tmp/r1 >/dev/null 2>/tmp/t.err; grep "one rank" /tmp/t.err; done; done
echo "== 8 ranks, 16 cores"; $T python3 benchmarks/ranks_wall.py /tmp/rank8.json --ranks 8 --pairs 5
echo "== 8 ranks, 2 cores"; $T taskset -c 0,1 python3 benchmarks/ranks_wall.py /tmp/rank8.json --ranks 8 --pairs 5
echo "== 64 ranks, 16 cores"; $T python3 benchmarks/ranks_wall.py /tmp/rank8.json --ranks 64 --pairs 3
$T python3 benchmarks/big_trace.py --make /tmp/llama64.json --mb 64 | tail -1
$T python3 benchmarks/big_trace.py --make /tmp/unique64.json --mb 64 --unique-names | tail -1
echo "== llama64, 2 cores"; $T taskset -c 0,1 python3 benchmarks/big_trace.py /tmp/llama64.json --repeat 3 | grep -E "json.load|attnprof|reading|ratio|peak|GPU act"
echo "== unique64, 2 cores"; $T taskset -c 0,1 python3 benchmarks/big_trace.py /tmp/unique64.json --repeat 3 | grep -E "json.load|attnprof|reading|ratio|peak|GPU act"
