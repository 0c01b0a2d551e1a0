#!/usr/bin/env bash
# CPU and wall seconds of attnprof's reading alone (trace.reader.load, the readers of a big file counted),
# each run a fresh interpreter, two source trees alternating, for A/B runs on a shared machine:
#   git archive COMMIT src | tar -x -C /tmp/old
#   bash benchmarks/engine/read_ab.sh TRACE ROUNDS /tmp/old/src $PWD/src
set -euo pipefail
trace=$1; rounds=$2; a=$3; b=$4
py=${PYTHON:-python3}
for _ in $(seq "$rounds"); do
  for src in "$a" "$b"; do
    PYTHONPATH=$src $py -c "
import resource, sys, time
from attnprof.trace.reader import load
def cpu():
    ch = resource.getrusage(resource.RUSAGE_CHILDREN)
    return time.process_time() + ch.ru_utime + ch.ru_stime
c, w = cpu(), time.perf_counter()
load(sys.argv[1])
print(sys.argv[2], round(cpu() - c, 3), round(time.perf_counter() - w, 3))" "$trace" "$src"
  done
done | awk '{cpu[$1] = cpu[$1] " " $2; wall[$1] = wall[$1] " " $3} END {for (k in cpu) print k, "CPU s:" cpu[k], " wall s:" wall[k]}'
