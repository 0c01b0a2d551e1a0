"""What host ops' names and recorded shapes say: the ops that copy on purpose, SDPA's entry points, the
bytes of an input. Shared by the trace queries (attention calls, copies) and the findings rules."""

from __future__ import annotations

from collections.abc import Iterable

from attnprof.trace.reader import Args, Event

# Ops that exist to copy or convert: a copy under one of these is what the user asked for.
EXPLICIT_COPY_OPS = frozenset({
    "aten::clone", "aten::contiguous", "aten::copy_", "aten::to", "aten::_to_copy", "aten::type_as",
    "aten::repeat", "aten::repeat_interleave", "aten::detach_copy", "aten::lift_fresh_copy",
})
# Entry points of SDPA and its backends, as the dispatcher records them.
SDPA_BACKEND_OPS = {
    "aten::_scaled_dot_product_cudnn_attention": "cudnn",
    "aten::_scaled_dot_product_flash_attention": "flash",
    "aten::_scaled_dot_product_flash_attention_for_cpu": "flash",
    "aten::_scaled_dot_product_efficient_attention": "efficient",
    "aten::_scaled_dot_product_attention_math": "math",
    "aten::_scaled_dot_product_attention_math_for_mps": "math",
    "aten::_scaled_dot_product_fused_attention_overrideable": "overrideable",
}
SDPA_OP = "aten::scaled_dot_product_attention"
MHA_OP = "aten::_native_multi_head_attention"  # nn.MultiheadAttention's fast path (it calls SDPA inside)
# The ops a call of attention is entered by in a forward's top aten ops: SDPA, its backends where no SDPA op is
# above them (a compiled graph calls `aten::_scaled_dot_product_flash_attention` itself), the MHA fast path.
ATTENTION_ENTRY_OPS = (SDPA_OP, *SDPA_BACKEND_OPS, MHA_OP)

ITEMSIZE = {"c10::BFloat16": 2, "c10::Half": 2, "float": 4, "double": 8, "long int": 8, "int": 4,
            "short int": 2, "bool": 1, "unsigned char": 1, "signed char": 1, "c10::complex<float>": 8}


def aten_only(chain: Iterable[Event]) -> list[Event]:
    return [e for e in chain if e.name.startswith("aten::")]


def tensor_bytes(op: Event, arg: int = 0) -> int | None:
    """Bytes of input `arg` of a host op, from Input Dims and Input type (record_shapes); else None."""
    return input_bytes(op.args, arg)


def input_bytes(args: Args | None, arg: int = 0) -> int | None:
    """`tensor_bytes` of an op whose args these are."""
    if args is None or not args.input_dims or not args.input_type or len(args.input_dims) <= arg:
        return None
    dims, dtype = args.input_dims[arg], args.input_type[arg] if len(args.input_type) > arg else None
    if not isinstance(dims, list) or dtype not in ITEMSIZE:
        return None
    numel = 1
    for d in dims:
        if not isinstance(d, int):
            return None
        numel *= d
    return numel * ITEMSIZE[dtype]


def is_scalar(op: Event) -> bool | None:
    """Whether the first input of `op` is 0-dim; None when the trace has no shapes."""
    dims = op.args.input_dims if op.args else None
    if not dims or not isinstance(dims[0], list):
        return None
    return len(dims[0]) == 0
