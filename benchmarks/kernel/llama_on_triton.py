"""A small Llama (built from a config, no weights) running on attnprof's kernel, as an `attnprof run`
target, loaded through transformers' hub-kernel path where this transformers accepts the installed
`kernels` (attn_implementation names the kernel; LOCAL_KERNELS maps its id to the folder), else with
the kernel's transformers_attention registered through AttentionInterface:

    attnprof run --target benchmarks/kernel/llama_on_triton.py:factory --mode train          # a GPU (sm_90)
    TRITON_INTERPRET=1 attnprof run --target benchmarks/kernel/llama_on_triton.py:factory --device cpu

On CPU, Triton's interpreter runs the kernel in float16 (bfloat16 is refused there).
"""

from __future__ import annotations

import os
from pathlib import Path

import torch

KERNEL_DIR = Path(__file__).resolve().parents[2] / "src" / "attnprof" / "kernels" / "flash_attn_triton"
HUB_ID = "attnprof/flash-attn-triton"


def attention_implementation() -> str:
    """The attn_implementation that puts the model on the kernel, registering it on the way."""
    from transformers.integrations.hub_kernels import is_kernels_available, load_and_register_attn_kernel

    os.environ["LOCAL_KERNELS"] = f"{HUB_ID}={KERNEL_DIR}"
    if is_kernels_available():
        name = f"{HUB_ID}:transformers_attention"
        load_and_register_attn_kernel(name, allow_all_kernels=True)
        return name
    import kernels
    from transformers import AttentionInterface, AttentionMaskInterface

    name = "attnprof_triton"
    AttentionInterface.register(name, kernels.get_local_kernel(KERNEL_DIR).transformers_attention)
    AttentionMaskInterface.register(name, AttentionMaskInterface._global_mapping["flash_attention_2"])
    return name


def factory():
    from transformers import LlamaConfig, LlamaForCausalLM

    cuda = torch.cuda.is_available()
    config = LlamaConfig(vocab_size=1024, hidden_size=1024 if cuda else 128, intermediate_size=2048 if cuda else 256,
                         num_hidden_layers=4 if cuda else 2, num_attention_heads=8 if cuda else 2,
                         num_key_value_heads=2 if cuda else 1, head_dim=128 if cuda else 64,
                         attn_implementation=attention_implementation())
    device, dtype = ("cuda", torch.bfloat16) if cuda else ("cpu", torch.float16)
    model = LlamaForCausalLM(config).to(device=device, dtype=dtype)
    tokens = torch.randint(0, config.vocab_size, (4 if cuda else 1, 2048 if cuda else 32), device=device)
    return model, (tokens,)
