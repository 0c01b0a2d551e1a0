"""What a variant is: a named factory that builds one attention forward for a problem."""

from __future__ import annotations

from collections.abc import Callable
from dataclasses import dataclass, replace
from typing import TYPE_CHECKING

from attnprof.problem import Problem

if TYPE_CHECKING:
    import torch

Forward = Callable[..., "torch.Tensor"]  # forward(q, k, v) -> out, tensors in the variant's layout


class VariantUnavailable(RuntimeError):
    """Raised by a variant's build when it cannot run here (kernel not loadable, no build for
    this device); the runner records the message as the variant's reason, not as an error."""


@dataclass(frozen=True)
class BuildOptions:
    kernel: str | None = None  # hub variant: a hub repo id or a local kernel directory


def always(problem: Problem, device: str) -> str | None:
    return None


@dataclass(frozen=True)
class Variant:
    name: str
    family: str
    description: str
    build: Callable[[Problem, str, BuildOptions], Forward]
    layout: str = "BHSD"  # BHSD: [B, H, S, D] as SDPA takes it; BSHD: [B, S, H, D] as flash-attn takes it
    supports: Callable[[Problem, str], str | None] = always  # None, or why it cannot run here
    compiled: bool = False
    # why it cannot run with these options, known without building it (the hub's default kernel has no
    # CPU build); `list` and `run` both ask (variants.why_not), so they agree
    precheck: Callable[[Problem, str, BuildOptions], str | None] | None = None
    # in a run that names no variants (a callable: decided on the machine, e.g. only on sm_90); else only when
    # named (`list` shows every one)
    by_default: bool | Callable[[], bool] = True
    source: Callable[[str | None], str] | None = None  # what --kernel makes it load, in words (`list --kernel`)
    # how `--mode train` makes its step from the forward and its inputs; None: the gradients of q, k and v
    # (harness.steps.training_step). A whole model (`--target`) trains its own parameters instead.
    train_step: Callable[[Forward, tuple], Forward] | None = None

    def with_compile(self) -> Variant:
        """The same variant wrapped in torch.compile, reported as `<name>+compile`."""
        inner = self.build

        def build(problem: Problem, device: str, options: BuildOptions) -> Forward:
            import torch

            return torch.compile(inner(problem, device, options))

        return replace(self, name=f"{self.name}+compile", build=build, compiled=True)
