#!/usr/bin/env bash
# docs/benchmarks.md "Attention inside a Trainer step": the same Llama (benchmarks/device_runs/trainer_attention.py, preset
# h200) trained with eager and with SDPA attention; AttnprofCallback's lines, results and traces land in $OUT.
# From the repository root on the GPU machine, with attnprof's src/ and msgspec importable.
set -u
out=${OUT:-/tmp/out}; mkdir -p "$out"
python3 -c "import torch, transformers, accelerate; print(torch.__version__, transformers.__version__, accelerate.__version__, torch.cuda.get_device_name())" > "$out/versions.txt" 2>&1
for attn in eager sdpa; do
  extra=""; [ "$attn" = sdpa ] && extra=--no-verify  # the switch is measured from the eager run
  timeout 80 python3 benchmarks/device_runs/trainer_attention.py --attn "$attn" --preset h200 --steps 10 --wait 2 --warmup 2 \
    --active 2 --out "/tmp/tr_$attn" --db /tmp/h.sqlite --results "$out/$attn.json" $extra > "$out/$attn.log" 2>&1
  echo "$attn rc=$?" >> "$out/versions.txt"
  trace=$(ls /tmp/tr_"$attn"/*.pt.trace.json 2>/dev/null | head -1)
  if [ -n "$trace" ]; then
    gzip -c "$trace" > "/tmp/$attn.trace.json.gz"
    size=$(stat -c %s "/tmp/$attn.trace.json.gz"); echo "$attn trace $size bytes gzipped" >> "$out/versions.txt"
    [ "$size" -lt 15000000 ] && cp "/tmp/$attn.trace.json.gz" "$out/"
  fi
done
