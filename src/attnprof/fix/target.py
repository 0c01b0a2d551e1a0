"""The user's own code as a target: `path/to/file.py:factory` or `package.module:factory`.

`factory()` returns `(module_or_callable, example_inputs)`, the inputs a tuple of positional
arguments or a dict of keyword arguments. The user's module is imported only here, only when the
user names it. A bad target is a `TargetError` (a ValueError: one line on the CLI, exit 2).
"""

from __future__ import annotations

import contextlib
import hashlib
import importlib
import importlib.util
import itertools
import os
import sys
from collections.abc import Callable, Iterator
from dataclasses import dataclass, replace
from pathlib import Path
from types import ModuleType
from typing import Any

from attnprof.errors import UserError
from attnprof.variants.base import BuildOptions, Variant

_FRESH = itertools.count()  # each source import gets its own module name: before and after never mix


class TargetError(UserError):
    """The target cannot be loaded or its factory returned something unusable."""


@dataclass(frozen=True)
class Target:
    spec: str
    name: str  # `<module stem>.<factory>`: a file-name-safe label
    file: Path  # the source file that defines the factory
    fn: Callable[..., Any]
    inputs: tuple | dict
    digest: str | None = None  # SHA-256 of the bytes that ran: `patch` edits only that file

    def __call__(self) -> Any:
        if isinstance(self.inputs, dict):
            return self.fn(**self.inputs)
        return self.fn(*self.inputs)

    def to(self, device: str) -> Target:
        """The same target with its module and input tensors on `device`."""
        fn = self.fn.to(device) if hasattr(self.fn, "to") and hasattr(self.fn, "parameters") else self.fn
        return replace(self, fn=fn, inputs=_move(self.inputs, device))


@contextlib.contextmanager
def own_errors(target: Target) -> Iterator[None]:
    """Inside: an exception that the target's forward raises on its own example inputs, run plainly (no
    attnprof mode or profiler around it), is the user's code failing, said as one TargetError line naming it;
    any other exception is attnprof's and passes unchanged (an internal error)."""
    try:
        yield
    except UserError:
        raise
    except Exception as e:
        if not _raises_alone(target, type(e)):
            raise
        what = " ".join(str(e).split())[:300]
        raise TargetError(f"target {target.spec!r}: its forward raises on its own example inputs, without "
                          f"attnprof: {type(e).__name__}: {what}") from e


def _raises_alone(target: Target, kind: type[BaseException]) -> bool:
    import torch

    try:
        with torch.no_grad():
            target()
    except kind:
        return True
    except Exception:  # noqa: BLE001 - another failure alone: not the one seen, so not known to be the user's
        return False
    return False


def parse_spec(spec: str) -> tuple[str, str]:
    """`a/b.py:make` -> ("a/b.py", "make"); `pkg.mod:make` -> ("pkg.mod", "make")."""
    where, sep, factory = spec.rpartition(":")
    if not sep or not where or not factory.isidentifier():
        raise TargetError(f"target {spec!r}: expected path/to/file.py:factory or package.module:factory")
    return where, factory


def is_path(where: str) -> bool:
    return where.endswith(".py") or "/" in where or "\\" in where


def source_file(spec: str) -> Path:
    """The file that defines the target's factory, without importing it."""
    where, _ = parse_spec(spec)
    if is_path(where):
        path = Path(where)
        if not path.is_file():
            raise TargetError(f"target {spec!r}: no such file {where}")
        return path.resolve()
    try:
        with _cwd_importable():
            found = importlib.util.find_spec(where)
    except (ImportError, ValueError) as e:
        raise TargetError(f"target {spec!r}: cannot find module {where} ({e})") from None
    if found is None or not found.origin or not found.origin.endswith(".py"):
        raise TargetError(f"target {spec!r}: no Python module named {where}")
    return Path(found.origin).resolve()


def load_target(spec: str, source: str | bytes | None = None) -> Target:
    """Import the target's module (from `source` instead of the file when given) and call its factory."""
    where, factory = parse_spec(spec)
    file = source_file(spec)
    if source is None and not is_path(where):
        raw = _read(spec, file)  # before the import: what the import compiles, unless it changes meanwhile
        module = _import_module(spec, where)
    else:
        raw = _read(spec, file) if source is None else None
        module = _import_source(spec, file, raw if source is None else source)
    make = getattr(module, factory, None)
    if not callable(make):
        raise TargetError(f"target {spec!r}: {file.name} has no function {factory!r}")
    digest = hashlib.sha256(raw).hexdigest() if raw is not None else None
    return Target(spec, f"{file.stem}.{factory}", file, *_checked(spec, make()), digest)


def as_target(target: Any, inputs: Any = None) -> Target:
    """What the Python API was given, as a Target: a `file.py:factory` or `pkg.mod:factory` string, or a
    module (any callable) with its example inputs (a tuple of arguments, a dict of keyword arguments, or
    one tensor)."""
    if isinstance(target, Target):
        return target
    if isinstance(target, str):
        if inputs is not None:
            raise TargetError(f"target {target!r}: inputs go with a module; a factory returns its own")
        return load_target(target)
    name = getattr(target, "__name__", None) or type(target).__name__
    if not callable(target):
        raise TargetError(f"target: expected a module, a callable or 'file.py:factory', got {name}")
    if inputs is None:
        raise TargetError(f"target {name}: a module needs its example inputs, e.g. lint(module, inputs=(x,))")
    if hasattr(inputs, "shape"):
        inputs = (inputs,)
    spec = f"<{name}>"
    fn, args = _checked(spec, (target, inputs))
    return Target(spec, name, _defining_file(target), fn, args)


def _defining_file(obj: Any) -> Path:
    """The source file of a function or of a module's class (lint names its lines); `<unknown>` if none."""
    import inspect

    try:
        found = inspect.getsourcefile(obj if inspect.isfunction(obj) or inspect.ismethod(obj) else type(obj))
    except TypeError:
        found = None
    return Path(found).resolve() if found else Path("<unknown>")


def _read(spec: str, file: Path) -> bytes:
    try:
        return file.read_bytes()
    except OSError as e:
        raise TargetError(f"target {spec!r}: cannot read {file}: {e.strerror or e}") from None


def target_variant(spec: str | Target) -> Variant:
    """The target as a variant of `attnprof run`: it ignores the problem's q, k, v and calls itself."""
    target = spec if isinstance(spec, Target) else load_target(spec)  # a bad target fails here, before any work

    on_device: dict[str, Target] = {}  # the target moved by build, for the training step to find its parameters

    def build(problem, device: str, options: BuildOptions):
        on_device["target"] = moved = target.to(device)
        return lambda *_: moved()

    def train_step(forward: Callable[..., Any], args: tuple) -> Callable[..., Any]:
        return model_training_step(forward, on_device["target"].fn)

    return Variant(target.name, "target", target.spec, build, train_step=train_step)


def model_training_step(forward: Callable[..., Any], model: Any) -> Callable[..., Any]:
    """A whole model's training step: the forward under autograd, a loss (the output's own `loss` when it has
    one, else the mean of its first tensor: logits, hidden states), and the gradients of every parameter
    that requires one, by torch.autograd.grad (no AccumulateGrad into .grad, as for one layer)."""
    import torch

    params = [p for p in model.parameters() if p.requires_grad] if hasattr(model, "parameters") else []
    if not params:
        raise TargetError("--mode train: the target has no parameters that require grad (is it a module?)")

    def step(*_: Any) -> Any:
        with torch.enable_grad():
            out = forward()
            torch.autograd.grad(_loss(out), params, allow_unused=True)
        return out

    step.__name__ = f"{getattr(forward, '__name__', 'target')}_step"
    return step


def _loss(out: Any) -> Any:
    """A scalar to differentiate from whatever the model returned; a TargetError when there is no tensor."""
    import torch

    loss = getattr(out, "loss", None)
    if isinstance(loss, torch.Tensor) and loss.numel() == 1:
        return loss
    found = next(iter(tensors_in(out)), None)
    if found is None or not found.requires_grad:
        raise TargetError(f"--mode train: the target returned no tensor that depends on its parameters "
                          f"({type(out).__name__})")
    return found.float().mean()


@contextlib.contextmanager
def _cwd_importable() -> Iterator[None]:
    """The current folder on sys.path while a `pkg.mod:factory` target is found and imported, as
    `python -m` has it: the `attnprof` script's own folder is first on its sys.path, not the user's."""
    cwd = os.getcwd()
    added = "" not in sys.path and cwd not in sys.path
    if added:
        sys.path.insert(0, cwd)
    try:
        yield
    finally:
        if added:
            sys.path.remove(cwd)


def _import_module(spec: str, name: str) -> ModuleType:
    try:
        with _cwd_importable():
            return importlib.import_module(name)
    except Exception as e:  # noqa: BLE001 - the user's import error, in one line
        raise TargetError(f"target {spec!r}: importing {name} failed: {type(e).__name__}: {e}") from None


def _import_source(spec: str, file: Path, source: str | bytes) -> ModuleType:
    """Execute `source` as a new module named after `file`; its folder is importable meanwhile,
    so the user's sibling imports work. Bytes compile as Python reads a file: a BOM or a `coding:`
    line names their encoding."""
    name = f"attnprof_target_{file.stem}_{next(_FRESH)}"
    module = ModuleType(name)
    module.__file__ = str(file)
    sys.modules[name] = module  # dataclasses and pickling look the module up by name
    sys.path.insert(0, str(file.parent))
    try:
        exec(compile(source, str(file), "exec"), module.__dict__)  # noqa: S102 - the user asked to run it
    except Exception as e:  # noqa: BLE001
        sys.modules.pop(name, None)
        raise TargetError(f"target {spec!r}: importing {file.name} failed: {type(e).__name__}: {e}") from None
    finally:
        sys.path.remove(str(file.parent))
    return module


def _checked(spec: str, made: Any) -> tuple[Callable[..., Any], tuple | dict]:
    if not (isinstance(made, (tuple, list)) and len(made) == 2):
        raise TargetError(f"target {spec!r}: the factory must return (module_or_callable, example_inputs), "
                          f"got {type(made).__name__}")
    fn, inputs = made
    if not callable(fn):
        raise TargetError(f"target {spec!r}: the factory's first item is a {type(fn).__name__}, not callable")
    if isinstance(inputs, list):
        inputs = tuple(inputs)
    if not isinstance(inputs, (tuple, dict)):
        raise TargetError(f"target {spec!r}: example_inputs must be a tuple of arguments or a dict of "
                          f"keyword arguments, got {type(inputs).__name__}")
    return fn, inputs


def before_and_after(spec: str, old: str, new: str, device: str) -> tuple[Target, Target]:
    """The target built from the `old` and the `new` text of its file, on `device`, with the same weights
    and inputs: a rewrite and its original, side by side."""
    before = load_target(spec, source=old).to(device)
    return before, same_weights(before, load_target(spec, source=new).to(device))


def same_weights(before: Target, after: Target) -> Target:
    """`after` with `before`'s weights and inputs: two builds of one target, compared side by side."""
    if hasattr(before.fn, "state_dict") and hasattr(after.fn, "load_state_dict"):
        after.fn.load_state_dict(before.fn.state_dict())
    return replace(after, inputs=before.inputs)


def tensors_in(value: Any) -> list:
    """The tensors of an output or of the inputs (nested in tuples, lists and dicts), in order."""
    if hasattr(value, "dtype") and hasattr(value, "shape"):
        return [value]
    if isinstance(value, dict):
        value = list(value.values())
    if isinstance(value, (list, tuple)):
        return [t for v in value for t in tensors_in(v)]
    return []


def _move(value: Any, device: str) -> Any:
    if hasattr(value, "to") and hasattr(value, "device"):
        return value.to(device)
    if isinstance(value, (tuple, list)):
        return type(value)(_move(v, device) for v in value)
    if isinstance(value, dict):
        return {k: _move(v, device) for k, v in value.items()}
    return value
