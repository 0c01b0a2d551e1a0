"""`patch --to-sdpa --verify`: the rewrite (or a library's own switch) proved on the target's inputs, and
the verdict: which backend SDPA picked and why.

Why a backend: SDPA tries its fused backends in a fixed priority order and takes the first whose
checks pass; torch names the check that failed for each one it passed over (`can_use_*(params,
debug=True)` warns with the reason). The SDPA call the rewritten forward made is captured once and
put to the same checks.
"""

from __future__ import annotations

import os
import re
import sys
import tempfile
import warnings

from attnprof.errors import UserError
from attnprof.fix import verify as before_and_after_verify
from attnprof.fix.target import Target, before_and_after, load_target, same_weights, source_file
from attnprof.fix.to_sdpa.plan import LIBRARY, Rewrite

CHECKS = {"cudnn": "can_use_cudnn_attention", "flash": "can_use_flash_attention",
          "efficient": "can_use_efficient_attention"}
PRIORITY_NAMES = {"CUDNN_ATTENTION": "cudnn", "FLASH_ATTENTION": "flash", "EFFICIENT_ATTENTION": "efficient",
                  "MATH": "math", "OVERRIDEABLE": "overrideable"}


def verify(spec: str, sources: dict[str, tuple[str, str]], device: str, grad: bool, planned: list[Rewrite]) -> dict:
    """The plan proved on the target's inputs: the rewritten file against the original, or, where the attention
    lives in an installed package (nothing written), the library's own switch to SDPA."""
    if not sources and any(r.reason == LIBRARY for r in planned):
        return verify_configured(spec, device, grad)
    return verify_rewrite(spec, sources, device, grad)


def verify_rewrite(spec: str, sources: dict[str, tuple[str, str]], device: str, grad: bool = False) -> dict:
    """verify.verify (its one verdict on the outputs), and why the rewritten forward's SDPA call ran the
    backend it ran."""
    result = before_and_after_verify.verify(spec, sources, device, grad)
    old, new = sources[str(source_file(spec))]
    _, after = before_and_after(spec, old, new, device)
    return result | {"sdpa_why": why_backend(after, device, result["sdpa_backend"][1], grad)}


def verify_configured(spec: str, device: str, grad: bool = False, implementation: str = "sdpa") -> dict:
    """A transformers model built as given and again with `attn_implementation=implementation`."""
    before = load_target(spec).to(device)
    return verify_switch(before, same_weights(before, load_target(spec).to(device)), device, grad, implementation)


def verify_switch(before: Target, after: Target, device: str, grad: bool = False, implementation: str = "sdpa"
                  ) -> dict:
    """Two builds of one transformers model (same weights, same inputs), `after` switched to `implementation`."""
    if not hasattr(before.fn, "set_attn_implementation"):
        raise UserError(f"--verify: {type(before.fn).__name__} has no attn_implementation switch (not a "
                        "transformers model); its attention is in an installed package attnprof does not edit")
    after.fn.set_attn_implementation(implementation)
    # its verdict holds 16-bit outputs against fp32, as a rewrite's
    result = before_and_after_verify.compare(before, after, device, grad)
    return result | {"configured": f'attn_implementation="{implementation}"',
                     "sdpa_why": why_backend(after, device, result["sdpa_backend"][1], grad)}


def why_backend(target: Target, device: str, backend: str | None, grad: bool = False) -> str:
    """One line: the backend SDPA ran and the reason each backend before it in priority declined."""
    if backend is None:
        return "no SDPA call was seen in the rewritten forward's profile"
    if device != "cuda":
        return f"{backend}: on the CPU SDPA runs its CPU flash kernel where it can, else the math path"
    import torch

    call = _first_sdpa_call(target, grad)
    if call is None:
        return f"{backend}: the SDPA call's inputs could not be captured"
    q, k, v, mask, p, causal, gqa = call
    try:
        params = torch.backends.cuda.SDPAParams(q, k, v, mask, p, causal, gqa)
    except (AttributeError, TypeError):  # the signature changed between torch versions
        params = None
    what = (f"{str(q.dtype).removeprefix('torch.')}, head dim {q.shape[-1]}, "
            f"{'is_causal' if causal else 'an attn_mask' if mask is not None else 'no mask'}"
            f"{', dropout' if p else ''}{', GQA' if gqa else ''}")
    declined = []
    for name in _priority():
        if name == backend:
            break
        check = getattr(torch.backends.cuda, CHECKS.get(name, ""), None)
        if check is not None and params is not None:
            declined.append(f"{name} declined ({_reason(check, params)})")
    tail = f"; {'; '.join(declined)}" if declined else f": {backend} is SDPA's first choice here and accepts them"
    return f"{backend} for these inputs ({what}){tail}"


def _priority() -> list[str]:
    import torch

    try:
        order = torch._C._get_sdp_priority_order()
        return [PRIORITY_NAMES.get(torch.nn.attention.SDPBackend(int(b)).name, "?") for b in order]
    except (AttributeError, RuntimeError, TypeError, ValueError):
        return ["cudnn", "flash", "efficient", "math"]  # torch 2.5+ on Hopper


def _reason(check, params) -> str:
    """The first reason torch gives for refusing: a Python warning, or a C++ one written to stderr."""
    with tempfile.TemporaryFile() as err, warnings.catch_warnings(record=True) as caught:
        warnings.simplefilter("always")
        sys.stderr.flush()
        saved = os.dup(2)
        os.dup2(err.fileno(), 2)
        try:
            check(params, True)
        finally:
            os.dup2(saved, 2)
            os.close(saved)
        err.seek(0)
        printed = err.read().decode(errors="replace")
    reasons = [str(w.message) for w in caught] + re.findall(r"Warning: (.*?) \(function \w+\)", printed)
    return " ".join(reasons[0].split())[:160] if reasons else "its checks failed"


def _first_sdpa_call(target: Target, grad: bool):
    """(q, k, v, attn_mask, dropout_p, is_causal, enable_gqa) of the forward's first SDPA call."""
    import torch
    import torch.nn.functional as F
    from torch.overrides import TorchFunctionMode

    seen = []

    class Capture(TorchFunctionMode):
        def __torch_function__(self, func, types, args=(), kwargs=None):
            kwargs = kwargs or {}
            if func is F.scaled_dot_product_attention and not seen:
                named = dict(zip(("query", "key", "value", "attn_mask", "dropout_p", "is_causal"), args, strict=False))
                named |= kwargs
                seen.append((named["query"], named["key"], named["value"], named.get("attn_mask"),
                             float(named.get("dropout_p", 0.0)), bool(named.get("is_causal", False)),
                             bool(named.get("enable_gqa", False))))
            return func(*args, **kwargs)

    with torch.set_grad_enabled(grad), Capture():
        target()
    return seen[0] if seen else None
