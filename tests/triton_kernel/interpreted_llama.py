"""A small Llama (built from a config, no weights) running on attnprof's kernel under Triton's interpreter,
against the same model on SDPA: prints the logits' and an embedding gradient's max error as JSON.

    TRITON_INTERPRET=1 python interpreted_llama.py hub         # transformers' own hub-kernel path
    TRITON_INTERPRET=1 python interpreted_llama.py registered  # the module's function, registered by name

`hub`: attn_implementation names the kernel's hub id and function, LOCAL_KERNELS maps the id to its
folder, and transformers loads it through `kernels` (it needs a `kernels` version it accepts).
`registered`: `kernels.get_local_kernel` loads it and transformers' AttentionInterface registers its
transformers_attention. Run by test_kernel_in_transformers.py."""

from __future__ import annotations

import json
import os
import sys

from attnprof.kernels import FLASH_ATTN_TRITON

HUB_ID = "attnprof/flash-attn-triton"
os.environ["LOCAL_KERNELS"] = f"{HUB_ID}={FLASH_ATTN_TRITON}"
assert os.environ.get("TRITON_INTERPRET") == "1", "run with TRITON_INTERPRET=1"

import torch  # noqa: E402
from transformers import LlamaConfig, LlamaForCausalLM  # noqa: E402


def run(attn_implementation: str, tokens: torch.Tensor) -> tuple[torch.Tensor, torch.Tensor]:
    torch.manual_seed(0)
    config = LlamaConfig(vocab_size=128, hidden_size=128, intermediate_size=256, num_hidden_layers=2,
                         num_attention_heads=2, num_key_value_heads=1, head_dim=64, max_position_embeddings=64,
                         attn_implementation=attn_implementation)
    model = LlamaForCausalLM(config).half()
    logits = model(tokens).logits
    logits.float().square().mean().backward()
    return logits.detach(), model.model.embed_tokens.weight.grad


def implementation(how: str) -> str:
    if how == "hub":
        from transformers.integrations.hub_kernels import load_and_register_attn_kernel

        name = f"{HUB_ID}:transformers_attention"
        load_and_register_attn_kernel(name, allow_all_kernels=True)
        return name
    import kernels
    from transformers import AttentionInterface, AttentionMaskInterface

    name = "attnprof_triton"  # a name with "flash" in it would send transformers looking for flash-attn
    AttentionInterface.register(name, kernels.get_local_kernel(FLASH_ATTN_TRITON).transformers_attention)
    # the mask the hub path registers for such a kernel: None unless there is padding
    AttentionMaskInterface.register(name, AttentionMaskInterface._global_mapping["flash_attention_2"])
    return name


if __name__ == "__main__":
    tokens = torch.randint(0, 128, (2, 24), generator=torch.Generator().manual_seed(1))
    ours, ours_grad = run(implementation(sys.argv[1]), tokens)
    sdpa, sdpa_grad = run("sdpa", tokens)
    print(json.dumps({"logits": (ours.double() - sdpa.double()).abs().max().item(),
                      "logits_scale": sdpa.abs().max().item(),
                      "grad": (ours_grad.double() - sdpa_grad.double()).abs().max().item(),
                      "grad_scale": sdpa_grad.abs().max().item()}))
