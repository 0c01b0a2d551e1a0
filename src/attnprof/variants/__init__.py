"""The variant registry: every attention implementation attnprof knows, by name."""

from __future__ import annotations

from attnprof.errors import UserError
from attnprof.variants import flex, hub, naive, sdpa, triton
from attnprof.variants.base import BuildOptions, Variant, VariantUnavailable

REGISTRY: dict[str, Variant] = {v.name: v for family in (naive, sdpa, flex, hub, triton) for v in family.VARIANTS}
COMPILE_SUFFIX = "+compile"


class UnknownVariant(UserError):
    pass


def get(name: str) -> Variant:
    """A variant by name; `<name>+compile` wraps it in torch.compile."""
    base = name.removesuffix(COMPILE_SUFFIX)
    if base not in REGISTRY:
        raise UnknownVariant(f"unknown variant {name!r}; known: {', '.join(REGISTRY)}")
    variant = REGISTRY[base]
    return variant.with_compile() if name.endswith(COMPILE_SUFFIX) else variant


def label(name: str, compiled: bool) -> str:
    """The name a variant runs under: `<name>+compile` when --compile wraps it."""
    return name + COMPILE_SUFFIX if compiled and not name.endswith(COMPILE_SUFFIX) else name


def why_not(variant: Variant, problem, device: str, kernel: str | None = None) -> str | None:
    """Why `variant` cannot run here, decided without building it: `list` and `run` ask this same question."""
    reason = variant.supports(problem, device)
    if reason is None and variant.precheck is not None:
        reason = variant.precheck(problem, device, BuildOptions(kernel=kernel))
    return reason


def names() -> list[str]:
    """The variants a run takes when it names none."""
    return [name for name, v in REGISTRY.items() if (v.by_default() if callable(v.by_default) else v.by_default)]


__all__ = ["REGISTRY", "BuildOptions", "UnknownVariant", "Variant", "VariantUnavailable", "get", "names", "why_not"]
