"""`attnprof.patch(module, to_sdpa=True)`: the rewrite to SDPA at run time, on a module object.

Each class among the module's submodules is read from its source file; the methods holding attention
chains are rewritten exactly as `attnprof patch --to-sdpa` would rewrite the file, compiled alone in
the globals of the method they replace (its module's imports and names), and bound to each instance
of that class in place. The class itself, other instances and the file are left alone.
"""

from __future__ import annotations

import ast
import copy
import inspect
import linecache
import types
from collections import defaultdict
from typing import Any

from attnprof.errors import PatchError
from attnprof.files import shown
from attnprof.fix.differential import RewriteDiffers, check_modules
from attnprof.fix.edits import apply, installed
from attnprof.fix.to_sdpa import facts as sdpa_facts
from attnprof.fix.to_sdpa.chain import Chain, find
from attnprof.fix.to_sdpa.plan import Source, chain_lines, rewrite


def patch_module(module: Any, inputs: tuple | dict | None, strict: bool) -> Any:
    """`module` with its attention rewritten to SDPA (fix.rewrite.patch); a transformers model on "eager" is
    switched to attn_implementation="sdpa" instead, its library's own switch (its code is configured, not
    edited). `.attnprof_rewrites`, `.attnprof_refused` and `.attnprof_verdict` say what was done."""
    config = getattr(module, "config", None)
    if hasattr(module, "set_attn_implementation") and getattr(config, "_attn_implementation", None) == "eager":
        module.set_attn_implementation("sdpa")
        module.attnprof_rewrites = ['attn_implementation="sdpa"']
        return module
    done, refused, verdict = rewrite_module(module, inputs, strict)
    if not done:
        reasons = "; ".join(refused) or "no softmax between two matmuls in its classes' methods"
        raise PatchError(f"attnprof.patch(to_sdpa=True): nothing rewritten in {type(module).__name__}: {reasons}")
    module.attnprof_rewrites = done
    module.attnprof_refused = refused
    module.attnprof_verdict = verdict
    return module


def rewrite_module(module: Any, inputs: tuple | dict | None = None, strict: bool = False
                   ) -> tuple[list[str], list[str], dict]:
    """(rewrites done, refusals with their reasons, the verdict of the check against the original) over
    every class of `module`'s submodules; `strict` refuses rewrites that lose autograd the original has."""
    instances: dict[type, list[Any]] = defaultdict(list)
    for m in module.modules():
        instances[type(m)].append(m)
    found = [(cls, source, fn, chain) for cls in instances for source, fn, chain in _chains_of(cls)]
    facts = None
    if inputs is not None:
        wanted = {(s.file, n) for _, s, _, c in found if isinstance(c, Chain) for n in chain_lines(c)}
        facts = sdpa_facts.observe(lambda: module(**inputs) if isinstance(inputs, dict) else module(*inputs),
                                   wanted)
    original = copy.deepcopy(module) if inputs is not None else None
    by_method, done, refused = defaultdict(list), [], []
    for cls, source, fn, chain in found:
        result = rewrite(source, chain, facts)
        where = f"{shown(source.file)}:{result.line} {cls.__name__}.{fn.name}"
        if result.safe:
            by_method[(cls, fn.name)].append(result)
            done.append(f"{where}: {result.call}")
        else:
            refused.append(f"{where}: {result.reason}")
    for (cls, name), results in by_method.items():
        try:
            method = _compiled(cls, name, results[0].file, [e for r in results for e in r.edits])
        except ValueError as e:
            done = [d for d in done if f" {cls.__name__}.{name}: " not in d]
            refused.append(str(e))
            continue
        for instance in instances[cls]:  # the instance's attribute wins over the class's function
            object.__setattr__(instance, name, types.MethodType(method, instance))
    if done and original is not None:
        return _checked(module, original, inputs, instances, by_method, done, refused, strict)
    return done, refused, {}


def _checked(module, original, inputs, instances, by_method, done: list[str], refused: list[str], strict: bool):
    """The rewritten module against a copy of the original (fix.differential, on copies: the user's
    module keeps its mode); where they differ the rewrites are taken back and refused with the reason."""
    try:
        verdict = check_modules(copy.deepcopy(original), copy.deepcopy(module), inputs, strict)
    except RewriteDiffers as e:
        for cls, name in by_method:
            for instance in instances[cls]:
                vars(instance).pop(name, None)
        return [], refused + [f"{d.split(': ', 1)[0]}: checked against the original: {e}" for d in done], {}
    return done, refused, verdict


def _chains_of(cls: type) -> list[tuple[Source, ast.FunctionDef, Any]]:
    """(source, method, chain or refusal) for each method `cls` defines in a user file."""
    try:
        file = inspect.getsourcefile(cls)
    except TypeError:  # a class defined in C
        return []
    if file is None or installed(file) or not _plain_methods(cls):
        return []
    source = Source.read(file)
    node = next((c for c in ast.walk(source.tree) if isinstance(c, ast.ClassDef) and c.name == cls.__name__
                 and {f.name for f in c.body if isinstance(f, ast.FunctionDef)} >= _plain_methods(cls)), None)
    if node is None:
        return []
    modules = set(source.modules)
    return [(source, fn, chain) for fn in node.body if isinstance(fn, ast.FunctionDef)
            for chain in find(fn, modules, source.tree)]


def _plain_methods(cls: type) -> set[str]:
    return {name for name, value in vars(cls).items() if isinstance(value, types.FunctionType)}


def _compiled(cls: type, name: str, file: str, edits: list) -> types.FunctionType:
    """The method `name` of the rewritten file, compiled in the original method's globals."""
    text = apply(Source.read(file).text, edits)
    tree = ast.parse(text)
    cls_node = next(c for c in ast.walk(tree) if isinstance(c, ast.ClassDef) and c.name == cls.__name__)
    fn = next(f for f in cls_node.body if isinstance(f, ast.FunctionDef) and f.name == name)
    original = vars(cls)[name]
    if fn.decorator_list or original.__code__.co_freevars:
        raise ValueError(f"{cls.__name__}.{name} is decorated or uses super()/a closure: patch its source "
                         "with `attnprof patch TARGET --to-sdpa --write` instead")
    filename = f"<attnprof to_sdpa {file}>"
    linecache.cache[filename] = (len(text), None, text.splitlines(keepends=True), filename)  # tracebacks show it
    namespace: dict[str, Any] = {}
    exec(compile(ast.Module([fn], []), filename, "exec"), original.__globals__, namespace)  # noqa: S102
    method = namespace[name]
    method.__qualname__ = original.__qualname__
    return method
