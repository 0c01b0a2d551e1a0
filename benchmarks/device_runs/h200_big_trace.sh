#!/usr/bin/env bash
# A 2.4 GB plain trace on the H200 host's 16 cores: read by 16 processes at once, then analysed; the counts
# checked against the layers the generator laid (17 GPU activities each, as in the template step)
set -uo pipefail
mkdir -p /tmp/site && python3 -m pip install -q --no-deps --target /tmp/site .whl/msgspec-*.whl 2>&1 | tail -1
export PYTHONPATH=/tmp/site:$PWD/src
python3 -c "import sys, numpy, msgspec; print(sys.version.split()[0], numpy.__version__, msgspec.__version__)"
nproc; python3 -m compileall -q src >/dev/null  # bytecode, as an installed package has it
T="timeout 300"
/usr/bin/time -f "make: %e s" $T python3 benchmarks/engine/big_trace.py --make /tmp/big.json --events 13000000 --lean | tail -1
for r in 1 2; do
  /usr/bin/time -f "analyze --json: %e s wall, %U s user, %S s sys, maxrss %M KiB" timeout 200 \
    python3 -m attnprof analyze --json /tmp/big.json > /tmp/out.json
done
python3 -c "import json; d=json.load(open('/tmp/out.json')); print(d['region'], d['forwards'], 'steps;', d['per_forward']['gpu_ops'], 'GPU activities a step;', d['unattributed'], [f['id'] for f in d['findings']])"
timeout 200 python3 benchmarks/engine/stage_cpu.py /tmp/big.json --runs 2
/usr/bin/time -f "reading alone (16 readers): %e s wall, %U s user, %S s sys" timeout 100 \
  python3 -c "from attnprof.trace.reader import load; load('/tmp/big.json')"
/usr/bin/time -f "reading alone (2 readers): %e s wall, %U s user, %S s sys" timeout 100 \
  python3 -c "from attnprof.trace.reader import load; load('/tmp/big.json', readers=2)"
