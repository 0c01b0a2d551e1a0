"""The modes a module runs in besides the one it was given: train mode, and MC dropout (the model in
eval with its dropout modules in train, as uncertainty estimation runs it). A rewrite that reads the
owner's `self.training` for its dropout stops dropping under MC dropout; one that reads `.p` of what
may be an `nn.Identity` raises in train mode. Each mode is set on copies of both modules, the same way.

With the dropout rates set to 0 both must compute the same function. With their own rates, both runs
draw from one seed: eager dropout and SDPA's math path draw the same mask on the CPU, so they agree
where the rewrite keeps the dropout; where the draws differ (another kernel), what is held against the
original is whether dropout is still applied at all."""

from __future__ import annotations

import copy
from collections.abc import Callable
from typing import Any

TRAIN_P0 = "train mode with dropout p=0"
TRAIN = "train mode with its dropout (same seed)"
MC_DROPOUT = "MC dropout (the model in eval, its dropout modules in train; same seed)"


def _dropouts(module: Any) -> list:
    import torch

    return [m for m in module.modules() if isinstance(m, torch.nn.modules.dropout._DropoutNd)]


def _rates(module: Any) -> list[tuple[Any, str]]:
    """(owner, attribute) of float attributes named like a dropout rate (`self.attn_pdrop`, `self.dropout`):
    the p a forward passes to F.dropout or to SDPA."""
    return [(m, name) for m in module.modules() for name, value in vars(m).items()
            if isinstance(value, float) and "drop" in name.lower() and 0 < value < 1]


def has_dropout(module: Any) -> bool:
    """Whether `module` draws random masks in train mode (a dropout of p > 0)."""
    return hasattr(module, "modules") and (any(m.p > 0 for m in _dropouts(module)) or bool(_rates(module)))


def moded(module: Any, mode: str) -> Any:
    """A copy of `module` in `mode` (one of TRAIN_P0, TRAIN, MC_DROPOUT)."""
    copied = copy.deepcopy(module)
    if mode == MC_DROPOUT:
        copied.eval()
        for m in _dropouts(copied):
            m.train()
        return copied
    copied.train()
    if mode == TRAIN_P0:
        for m in _dropouts(copied):
            m.p = 0.0
        for owner, name in _rates(copied):
            setattr(owner, name, 0.0)
    return copied


def modes(module: Any) -> list[str]:
    """The modes worth trying: train mode always (a forward may branch on it), the modes with dropout
    drawn where the module has a dropout."""
    if not hasattr(module, "train"):
        return []
    with_dropout = [TRAIN, MC_DROPOUT] if has_dropout(module) else []
    return [TRAIN_P0, *with_dropout]


def deterministic(run: Callable[[int], list], seeds: tuple[int, int] = (0, 1)) -> bool:
    """Whether a run gives the same tensors from two seeds (no random draw left in it)."""
    import torch

    first, second = (run(s) for s in seeds)
    return all(torch.equal(a, b) for (_, a), (_, b) in zip(first, second, strict=True))
