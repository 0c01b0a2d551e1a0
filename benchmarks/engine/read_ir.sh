#!/usr/bin/env bash
# Instructions (valgrind callgrind's Ir) that attnprof's reading of one trace takes in each source tree:
# those of a process that imports the reader and loads TRACE (with its forked range readers, which valgrind
# follows), less those of one that only imports it. On a
# shared machine CPU seconds swing by a third from run to run; this count does not (a fixed hash seed, one
# OpenBLAS thread: its idle thread's spinning is counted otherwise), so an A/B of a few percent shows.
# About 50x slower than the reading itself (rank8.json ~15 s a tree, llama64.json ~100 s).
#   git archive COMMIT src | tar -x -C /tmp/old
#   bash benchmarks/engine/read_ir.sh TRACE /tmp/old/src $PWD/src
set -euo pipefail
trace=$1; shift
py=${PYTHON:-python3}
ir() {  # $1: source tree, $2: trace or - (import only)
  (cd /tmp && OPENBLAS_NUM_THREADS=1 PYTHONHASHSEED=0 PYTHONPATH=$1 valgrind --tool=callgrind \
    --callgrind-out-file=/dev/null "$py" -c "
import sys
from attnprof.trace.reader import load
if sys.argv[1] != '-': load(sys.argv[1])" "$2" 2>&1 | awk '/Collected :/ {n += $NF} END {print n}')
}
for src in "$@"; do
  loaded=$(ir "$src" "$trace"); imported=$(ir "$src" -)
  echo "$src reading: $(( (loaded - imported) / 1000000 ))M instructions ($(( loaded / 1000000 ))M - $(( imported / 1000000 ))M imports)"
done
