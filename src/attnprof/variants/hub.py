"""A FlashAttention kernel from the Hugging Face kernels hub, loaded with the `kernels` package.

`BuildOptions.kernel` picks the kernel:
  - None: `kernels-community/flash-attn2`, stable version 2;
  - `org/name`, `org/name@N` (version N) or `org/name@<branch|tag|commit>`: another hub repo;
    flash-attn3 defaults to version 1, any other repo to version 1 unless `@...` says otherwise;
  - an existing directory: a local kernel, loaded with `kernels.get_local_kernel`. Its layout is
    `<dir>/build/<variant>/{metadata.json,__init__.py}`; a Python-only kernel uses the noarch
    variants `torch-cpu` and `torch-cuda` (tests/fixtures/local_kernel is a complete example;
    src/attnprof/kernels/flash_attn_triton keeps its source in torch-ext/ and builds torch-cuda from it).
The `kernels` package also reads `LOCAL_KERNELS=org/name=/path[:org2/name2=/path2]`: a hub id
mapped there loads from that directory, without the network. The kernel is called as
`flash_attn_func(q, k, v, causal=..., [window_size=...])` on [B, S, H, D] tensors.

Loading needs the network unless the kernel is in the HF cache and HF_HUB_OFFLINE=1 is set.
supports() only checks the package (no network); build() loads, and raises VariantUnavailable
with a one-line reason (hub unreachable, offline, repo not found, no build for this torch/CUDA/arch).

On the H200 device machine: Hopper (sm_90) has builds of both flash-attn2 and flash-attn3
(FA3 is Hopper-only), but that machine reaches no network and its image has no `kernels`
package (carry it as wheels), so the default hub repo cannot be downloaded there. What runs
there is a local kernel directory, through the kernel option or LOCAL_KERNELS.
"""

from __future__ import annotations

import json
import os
import re
from dataclasses import dataclass
from pathlib import Path
from types import ModuleType

from attnprof.problem import Problem
from attnprof.variants.base import BuildOptions, Forward, Variant, VariantUnavailable

DEFAULT_REPO = "kernels-community/flash-attn2"
# get_kernel needs a stable major version since kernels 0.15; these are what the repo cards name
KNOWN_VERSIONS = {"kernels-community/flash-attn2": 2, "kernels-community/flash-attn3": 1}
MIN_KERNELS = (0, 17)  # keyword API, noarch torch-<backend> variants, "kernel"-type hub repos
HUB_ID = re.compile(r"^[\w.-]+/[\w.-]+(@[\w./-]+)?$")
LOCAL_HINT = "set LOCAL_KERNELS=<repo>=<dir>, or pass --kernel <local kernel dir>"
# exception class names (anywhere in an exception's chain and MRO) that mean the hub was not reached
NETWORK_ERRORS = {"TransportError", "ConnectionError", "TimeoutException", "TimeoutError", "gaierror",
                  "OfflineModeIsEnabled"}


@dataclass(frozen=True)
class KernelSpec:
    """What BuildOptions.kernel names: a local directory, or a hub repo at a version or revision."""

    label: str
    path: Path | None = None
    repo_id: str | None = None
    version: int | None = None
    revision: str | None = None
    explicit: bool = False  # named by the user, who thereby trusts it


def parse_kernel(kernel: str | None) -> KernelSpec:
    if kernel is None:
        return KernelSpec(DEFAULT_REPO, repo_id=DEFAULT_REPO, version=KNOWN_VERSIONS[DEFAULT_REPO])
    path = Path(kernel).expanduser()
    if path.is_dir():
        return KernelSpec(str(path), path=path.resolve())
    if kernel.startswith(("/", ".", "~")):
        raise VariantUnavailable(f"no kernel directory at {kernel!r}")
    if not HUB_ID.match(kernel):
        raise VariantUnavailable(f"kernel {kernel!r} is neither an existing directory nor a hub repo id")
    repo_id, _, ref = kernel.partition("@")
    if ref.isdigit():
        return KernelSpec(kernel, repo_id=repo_id, version=int(ref), explicit=True)
    if ref:
        return KernelSpec(kernel, repo_id=repo_id, revision=ref, explicit=True)
    return KernelSpec(kernel, repo_id=repo_id, version=KNOWN_VERSIONS.get(repo_id, 1), explicit=True)


def _one_line(text: str, limit: int = 200) -> str:
    line = " ".join(text.split())
    return line if len(line) <= limit else line[: limit - 3] + "..."


def import_kernels() -> tuple[ModuleType | None, str | None]:
    """The `kernels` module, or None and why it cannot be used."""
    try:
        import kernels
    except ImportError as e:
        why = _one_line(str(e), 80)
        return None, f"the `kernels` package is not installed ({why}); pip install 'attnprof[hub]'"
    except Exception as e:  # a broken install raises anything; it must still be a reason, not a traceback
        return None, f"importing `kernels` failed: {type(e).__name__}: {_one_line(str(e))}"
    version = getattr(kernels, "__version__", None)
    if version is None:  # a folder named `kernels` on the path (a namespace package), not the library
        where = ", ".join(getattr(kernels, "__path__", [])) or getattr(kernels, "__file__", "?")
        return None, f"`kernels` on the import path ({where}) is not the Hugging Face kernels package"
    found = tuple(int(p) for p in re.findall(r"\d+", version)[:2])
    if found < MIN_KERNELS:
        need = ".".join(map(str, MIN_KERNELS))
        return None, f"kernels {version} is too old; the hub variant needs kernels>={need}"
    return kernels, None


def supports_hub(problem: Problem, device: str) -> str | None:
    # cheap on purpose: no network; which kernel and whether it loads is build()'s business
    _, reason = import_kernels()
    if reason is not None:
        return reason
    if device.split(":")[0] not in ("cpu", "cuda"):
        return f"the hub variant loads kernels for cpu and cuda devices, not {device!r}"
    return None


def kernel_source(kernel: str | None) -> str:
    """What `run` would load for the hub variant given `--kernel` (`list --kernel` says it): the local
    directory with the kernel its metadata names and its builds, or the hub repo at its version."""
    try:
        spec = parse_kernel(kernel)
    except VariantUnavailable as e:
        return str(e)
    if spec.path is None:
        at = f"revision {spec.revision}" if spec.revision else f"version {spec.version}"
        where = "a local directory (LOCAL_KERNELS)" if _locally_mapped(spec.repo_id) else "the Hugging Face Hub"
        return f"would load {spec.repo_id} {at} from {where}"
    builds = sorted((spec.path / "build").glob("torch*/metadata.json"))
    names = sorted({_metadata_name(m) for m in builds} - {None})
    return (f"would load {', '.join(names) or 'the kernel'} from the local directory {spec.path} "
            f"(builds: {', '.join(m.parent.name for m in builds) or 'none found'})")


def _metadata_name(path: Path) -> str | None:
    try:
        name = json.loads(path.read_text()).get("name")
    except (OSError, ValueError, AttributeError):
        return None
    return name if isinstance(name, str) else None


def _locally_mapped(repo_id: str) -> bool:
    entries = os.environ.get("LOCAL_KERNELS", "").split(":")
    return repo_id in {e.split("=", 1)[0] for e in entries if "=" in e}


def _precheck(spec: KernelSpec, problem: Problem, device: str) -> None:
    """Refuse, without the network, what the known FlashAttention repos are known not to run."""
    if spec.repo_id not in KNOWN_VERSIONS or _locally_mapped(spec.repo_id):
        return
    if problem.dtype not in ("bf16", "fp16"):
        raise VariantUnavailable(f"{spec.label} takes bf16 or fp16 only, not {problem.dtype}")
    if device.startswith("cpu"):
        raise VariantUnavailable(f"{spec.label} has GPU builds only; run on cuda, or {LOCAL_HINT}")


def precheck_hub(problem: Problem, device: str, options: BuildOptions) -> str | None:
    """Why the kernel the options name cannot run here, known without the network; None when it may."""
    try:
        _precheck(parse_kernel(options.kernel), problem, device)
    except VariantUnavailable as e:
        return str(e)
    return None


def _chain(exc: BaseException) -> list[BaseException]:
    seen: list[BaseException] = []
    while exc is not None and exc not in seen:
        seen.append(exc)
        exc = exc.__cause__ or exc.__context__
    return seen


def _kinds(exc: BaseException) -> set[str]:
    return {cls.__name__ for e in _chain(exc) for cls in type(e).__mro__}


def _system() -> str:
    import platform

    import torch

    accel = f"CUDA {torch.version.cuda}" if torch.version.cuda else "no CUDA"
    return f"torch {torch.__version__}, {accel}, {platform.machine()}"


def explain(exc: BaseException, spec: KernelSpec) -> str:
    """One line that says why loading `spec` failed, for the runner's unsupported record."""
    from huggingface_hub import constants

    kinds, message = _kinds(exc), str(exc)
    if kinds & NETWORK_ERRORS:
        root = _one_line(str(_chain(exc)[-1]), 80)  # the socket error: DNS failure, refused, timeout
        return f"cannot reach the Hugging Face Hub for {spec.label} ({root}); {LOCAL_HINT}"
    if "build variant" in message:
        return f"{spec.label} has no build for this system ({_system()})"
    if "RepositoryNotFoundError" in kinds or "RevisionNotFoundError" in kinds:
        return f"{spec.label} was not found on the Hugging Face Hub (or is private or gated)"
    cache_miss = "offline" in message or "local snapshot" in message
    if constants.HF_HUB_OFFLINE and spec.path is None and cache_miss:
        return f"HF_HUB_OFFLINE is set and {spec.label} is not in the local Hugging Face cache; {LOCAL_HINT}"
    return f"loading {spec.label} failed: {type(exc).__name__}: {_one_line(message)}"


def load_module(spec: KernelSpec, device: str) -> ModuleType:
    kernels, reason = import_kernels()
    if reason is not None:
        raise VariantUnavailable(reason)
    # pick the CPU build for a CPU run even where torch has CUDA; else let kernels detect the backend
    backend = "cpu" if device.startswith("cpu") else None
    try:
        if spec.path is not None:
            return kernels.get_local_kernel(spec.path, backend=backend)
        # a repo the user named is allowlisted: naming it is the opt-in the trust check asks for
        trust: bool | list[str] = [spec.repo_id] if spec.explicit else False
        return kernels.get_kernel(spec.repo_id, version=spec.version, revision=spec.revision,
                                  backend=backend, trust_remote_code=trust)
    except Exception as e:  # any load failure becomes the recorded reason, never a traceback
        raise VariantUnavailable(explain(e, spec)) from e


def flash_kwargs(problem: Problem, label: str) -> dict:
    """flash_attn_func's arguments for `problem`: causal (aligned to the bottom right, as a decode call
    needs), a sliding window as window_size=(W - 1, 0); it takes no mask tensor and no documents."""
    kind, size = problem.mask.kind, problem.mask.size
    if problem.dense_mask or kind == "document":
        what = "a mask tensor (--dense-mask)" if problem.dense_mask else "documents (--mask document=N)"
        raise VariantUnavailable(f"{label}: flash_attn_func takes no {what}; it masks causally or by a window")
    if kind == "window":
        return {"causal": True, "window_size": (size - 1, 0)}
    return {"causal": kind == "causal"}


def build_hub(problem: Problem, device: str, options: BuildOptions) -> Forward:
    spec = parse_kernel(options.kernel)
    _precheck(spec, problem, device)
    module = load_module(spec, device)
    func = getattr(module, "flash_attn_func", None)
    if not callable(func):
        raise VariantUnavailable(f"{spec.label} has no flash_attn_func")
    kwargs = flash_kwargs(problem, spec.label)

    def hub(q, k, v):  # [B, S, H, D] in and out; K/V keep their own head count (flash-attn takes GQA)
        out = func(q, k, v, **kwargs)
        return out[0] if isinstance(out, tuple) else out  # some FA3 builds return (out, softmax_lse)

    return hub


VARIANTS = [
    Variant(
        "hub", "hub", "FlashAttention from the Hugging Face kernels hub (flash-attn2 by default)",
        build_hub, layout="BSHD", supports=supports_hub, precheck=precheck_hub, source=kernel_source,
    )
]
