"""The modes a module runs in besides the one it was given: train mode, MC dropout (the model in eval
with its dropout modules in train, as uncertainty estimation runs it), and each of its own flags (a
public bool attribute, like `self.causal` or `self.bidirectional`) the other way: the rewrite is of the
class's source, so it must hold for every instance, and a mask filled with ones under a flag shows there.
A rewrite that reads the owner's `self.training` for its dropout stops dropping under MC dropout; one
that reads `.p` of what may be an `nn.Identity` raises in train mode. Each mode is set on copies of
both modules, the same way.

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


def moded(module: Any, setter: Callable[[Any], None]) -> Any:
    """A copy of `module` with `setter` applied (one of `modes`)."""
    copied = copy.deepcopy(module)
    setter(copied)
    return copied


def modes(module: Any) -> list[tuple[str, Callable[[Any], None]]]:
    """(label, setter) of the modes worth trying: train mode with the dropout rates at 0 always (a forward
    may branch on the flag); where the module draws, train mode as it is, and MC dropout for each dropout
    module alone (another one in train would hide that this one stopped dropping)."""
    if not hasattr(module, "train"):
        return []
    found = [(TRAIN_P0, _train_without_dropout)]
    if has_dropout(module):
        found.append((TRAIN, lambda m: m.train()))
    names = [name for name, m in module.named_modules() if m in _dropouts(module) and m.p > 0]
    found += [(f"MC dropout (the model in eval, `{name}` in train; same seed)", _mc_dropout(name)) for name in names]
    return found


def _train_without_dropout(module: Any) -> None:
    module.train()
    for m in _dropouts(module):
        m.p = 0.0
    for owner, name in _rates(module):
        setattr(owner, name, 0.0)


def _mc_dropout(name: str) -> Callable[[Any], None]:
    def setter(module: Any) -> None:
        module.eval()
        module.get_submodule(name).train()

    return setter



def flags(module: Any, most: int = 8) -> list[tuple[str, Callable[[Any], None]]]:
    """(label, setter) for each public bool attribute of the user's own submodules (torch's, like Dropout's
    `inplace`, say how to compute, not what), flipped (the first `most`)."""
    if not hasattr(module, "named_modules"):
        return []
    found = [(path, name, value) for path, m in module.named_modules()
             if not type(m).__module__.startswith("torch.") for name, value in vars(m).items()
             if isinstance(value, bool) and name != "training" and not name.startswith("_")]
    return [(f"`{'.'.join(filter(None, (path, name)))}` = {not value}", _flipped(path, name, not value))
            for path, name, value in found[:most]]


def _flipped(path: str, name: str, value: bool) -> Callable[[Any], None]:
    def setter(module: Any) -> None:
        setattr(module.get_submodule(path), name, value)

    return setter
