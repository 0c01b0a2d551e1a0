"""A small Llama (built from a config, no weights) running on attnprof's kernel under Triton's interpreter,
against the same model on SDPA: prints the logits' and an embedding gradient's max error as JSON.

    TRITON_INTERPRET=1 python interpreted_llama.py hub registered repo   # any of them, in one process
    TRITON_INTERPRET=1 python interpreted_llama.py hub         # transformers' own hub-kernel path
    TRITON_INTERPRET=1 python interpreted_llama.py registered  # the module's function, registered by name
    TRITON_INTERPRET=1 python interpreted_llama.py repo        # attn_implementation="<org>/<repo>", padded batch
    python interpreted_llama.py repo                           # the same on the GPU (no interpreter)

`hub`: attn_implementation names the kernel's hub id and function, LOCAL_KERNELS maps the id to its
folder, and transformers loads it through `kernels` (it needs a `kernels` version it accepts).
`registered`: `kernels.get_local_kernel` loads it and transformers' AttentionInterface registers its
transformers_attention.
`repo`: attn_implementation is the bare hub id, so transformers wraps the kernel's exported flash_attn_func /
flash_attn_varlen_func in its own flash-attention forward (what a user gets from "kernels-community/..."); the
batch is padded on the left in one row, so the varlen path runs, and only real tokens are compared.
Run by test_kernel_in_transformers.py."""

from __future__ import annotations

import json
import os
import sys

from attnprof.kernels import FLASH_ATTN_TRITON

HUB_ID = "attnprof/flash-attn-triton"
os.environ["LOCAL_KERNELS"] = f"{HUB_ID}={FLASH_ATTN_TRITON}"
# under Triton's interpreter on the CPU (CI); without it, on the GPU (the device runs)
DEVICE = "cpu" if os.environ.get("TRITON_INTERPRET") == "1" else "cuda"

import torch  # noqa: E402
from transformers import LlamaConfig, LlamaForCausalLM  # noqa: E402


def run(attn_implementation: str, tokens: torch.Tensor, mask: torch.Tensor | None = None
        ) -> tuple[torch.Tensor, torch.Tensor]:
    torch.manual_seed(0)
    config = LlamaConfig(vocab_size=128, hidden_size=128, intermediate_size=256, num_hidden_layers=2,
                         num_attention_heads=2, num_key_value_heads=1, head_dim=64, max_position_embeddings=64,
                         attn_implementation=attn_implementation)
    model = LlamaForCausalLM(config).half().to(DEVICE)
    tokens, mask = tokens.to(DEVICE), None if mask is None else mask.to(DEVICE)
    logits = model(tokens, attention_mask=mask).logits
    real = torch.ones_like(tokens, dtype=torch.bool) if mask is None else mask.bool()
    logits = logits[real]  # a padded position's output is whatever each implementation leaves there
    logits.float().square().mean().backward()
    return logits.detach(), model.model.embed_tokens.weight.grad


VARLEN_CALLS = []


def counted_varlen() -> None:
    """The kernel as transformers gets it, its flash_attn_varlen_func counting its calls (functools.wraps keeps
    the signature, which transformers reads to choose the arguments it passes)."""
    import functools

    import transformers.integrations.hub_kernels as hub

    get_kernel = hub.get_kernel

    def counting(*args, **kwargs):
        kernel = get_kernel(*args, **kwargs)
        varlen = kernel.flash_attn_varlen_func
        if not hasattr(varlen, "__wrapped__"):
            @functools.wraps(varlen)
            def call(*a, **k):
                VARLEN_CALLS.append(1)
                return varlen(*a, **k)
            kernel.flash_attn_varlen_func = call
        return kernel
    hub.get_kernel = counting


def implementation(how: str) -> str:
    if how == "repo":
        counted_varlen()
        return HUB_ID
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


def errors(how: str, tokens: torch.Tensor) -> dict:
    """One way of loading the kernel against SDPA on the same model and tokens."""
    mask = None
    if how == "repo":  # row 1 padded on the left by 7 tokens: transformers unpads into a varlen call
        mask = torch.ones_like(tokens)
        mask[1, :7] = 0
    ours, ours_grad = run(implementation(how), tokens, mask)
    sdpa, sdpa_grad = run("sdpa", tokens, mask)
    return {"logits": (ours.double() - sdpa.double()).abs().max().item(), "logits_scale": sdpa.abs().max().item(),
            "grad": (ours_grad.double() - sdpa_grad.double()).abs().max().item(),
            "grad_scale": sdpa_grad.abs().max().item(), "varlen_calls": len(VARLEN_CALLS)}


def kernels_refused() -> str:
    """Why transformers' hub-kernel paths are off here: the kernels versions it takes against the one installed."""
    import importlib.metadata

    import transformers
    from transformers.utils import import_utils

    bounds = [getattr(import_utils, name, "?") for name in ("KERNELS_MIN_VERSION", "KERNELS_MAX_VERSION")]
    return (f"transformers {transformers.__version__} takes kernels >={bounds[0]},<{bounds[1]} for hub kernels; "
            f"installed: {importlib.metadata.version('kernels')}")


if __name__ == "__main__":  # one process for every way named (transformers' import is most of the time)
    from transformers.integrations.hub_kernels import is_kernels_available

    tokens = torch.randint(0, 128, (2, 24), generator=torch.Generator().manual_seed(1))
    print(json.dumps({how: errors(how, tokens) if how == "registered" or is_kernels_available() else
                      {"skipped": kernels_refused()} for how in sys.argv[1:]}))
