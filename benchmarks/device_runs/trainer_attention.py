"""A Llama built from a config (random weights, nothing downloaded) trained by transformers' Trainer with
`AttnprofCallback`, on the attention implementation asked for; the callback's lines are the result. From the
repository root:

    PYTHONPATH=src python3 benchmarks/device_runs/trainer_attention.py --attn eager --out /tmp/traces        # CPU, tiny
    PYTHONPATH=src python3 benchmarks/device_runs/trainer_attention.py --attn sdpa --preset h200 --out /tmp/traces

The tests' Trainer traces (tests/fixtures/cpu/llama_train_*.json.gz) come from the tiny preset with
`--steps 4 --wait 1 --warmup 1 --active 1`.
"""

from __future__ import annotations

import argparse
import json
import logging
from pathlib import Path

import torch
from torch.utils.data import Dataset
from transformers import LlamaConfig, LlamaForCausalLM, Trainer, TrainingArguments

from attnprof.integrations.transformers import AttnprofCallback

# (layers, hidden, heads, kv heads, intermediate, sequence, batch): what a test can train in seconds, and a
# small model whose attention is a real share of an H200's step
PRESETS = {"tiny": (2, 64, 4, 2, 128, 32, 2), "h200": (8, 1024, 16, 4, 2816, 2048, 4)}
VOCAB = 1024


class Tokens(Dataset):
    """Random token sequences, the same for every run (seeded per item)."""

    def __init__(self, n: int, seq: int, vocab: int):
        self.n, self.seq, self.vocab = n, seq, vocab

    def __len__(self) -> int:
        return self.n

    def __getitem__(self, i: int) -> dict:
        ids = torch.randint(0, self.vocab, (self.seq,), generator=torch.Generator().manual_seed(i))
        return {"input_ids": ids, "labels": ids}


def model_for(preset: str, attn: str) -> LlamaForCausalLM:
    layers, hidden, heads, kv_heads, inter, seq, _ = PRESETS[preset]
    torch.manual_seed(0)
    config = LlamaConfig(vocab_size=VOCAB, hidden_size=hidden, intermediate_size=inter, num_hidden_layers=layers,
                         num_attention_heads=heads, num_key_value_heads=kv_heads, max_position_embeddings=seq,
                         attn_implementation=attn)
    return LlamaForCausalLM(config)


def main() -> None:
    p = argparse.ArgumentParser()
    p.add_argument("--attn", default="eager", choices=["eager", "sdpa", "flex_attention"])
    p.add_argument("--preset", default="tiny", choices=sorted(PRESETS))
    p.add_argument("--steps", type=int, default=20)
    p.add_argument("--accum", type=int, default=2, help="gradient accumulation steps")
    p.add_argument("--wait", type=int, default=2)
    p.add_argument("--warmup", type=int, default=2)
    p.add_argument("--active", type=int, default=2)
    p.add_argument("--out", default="attnprof_traces")
    p.add_argument("--db", default=None)
    p.add_argument("--no-verify", action="store_true")
    p.add_argument("--results", default=None, help="write the callback's results (JSON) here")
    args = p.parse_args()
    logging.basicConfig(level=logging.INFO, format="%(message)s")
    logging.getLogger("transformers").setLevel(logging.WARNING)
    cuda = torch.cuda.is_available()
    seq, batch = PRESETS[args.preset][5:]
    model = model_for(args.preset, args.attn)
    data = Tokens(args.steps * args.accum * batch, seq, VOCAB)
    training = TrainingArguments(f"{args.out}/trainer", max_steps=args.steps, per_device_train_batch_size=batch,
                                 gradient_accumulation_steps=args.accum, report_to=[], save_strategy="no",
                                 use_cpu=not cuda, bf16=cuda, disable_tqdm=True, logging_steps=args.steps)
    callback = AttnprofCallback(args.out, wait=args.wait, warmup=args.warmup, active=args.active, db=args.db,
                                verify=not args.no_verify)
    Trainer(model=model, args=training, train_dataset=data, callbacks=[callback]).train()
    if args.results:
        measured = callback.measured
        Path(args.results).write_text(json.dumps({
            "attn": args.attn, "preset": args.preset, "traces": callback.handler.results, "advice": callback.advice,
            "failures": callback.handler.failures,
            "measured": None if measured is None else {k: measured.get(k) for k in ("line", "latency_us", "outputs",
                                                                                     "sdpa_backend", "sdpa_why")}}))


if __name__ == "__main__":
    main()
