"""Produces a kernel's `build/` folders from its `torch-ext/` source, as kernel-builder does for a
Python-only (Triton) kernel: `build/` is an output, never edited by hand. What the kernel is (its name,
version, license and backends) is read from its `build.toml`, kernel-builder's configuration, as
kernel-builder reads it; the build variants are those of its backends.

    python -m attnprof.kernels.builder            # rewrite every build variant from the source
    python -m attnprof.kernels.builder --check    # exit 1 if a build variant differs from the source

Variants written for build.toml's `backends = ["cuda"]` (kernels >= 0.17 picks the first that fits the machine):
  torch-cuda       the noarch CUDA variant kernels prefers; metadata.json names the arch it is written for
  torch-universal  the legacy universal variant, the last fallback (CPU machines, older `kernels`)
"""

from __future__ import annotations

import base64
import hashlib
import json
import shutil
import sys
import tempfile
from pathlib import Path

if sys.version_info >= (3, 11):
    import tomllib
else:  # the same parser, before it joined the standard library
    import tomli as tomllib

# Triton compiles for the GPU it runs on at the first call (like PTX), so "9.0+PTX": Hopper and newer
CUDA_ARCHS = ["9.0+PTX"]
# per backend build.toml names: the variants written, the noarch one first (kernels >= 0.17 picks the first
# that fits the machine), the legacy universal one last (CPU machines, older `kernels`)
BACKEND_VARIANTS = {"cuda": {"torch-cuda": {"type": "cuda", "archs": CUDA_ARCHS},
                             "torch-universal": {"type": "cuda"}}}
METADATA_FIELDS = ("name", "version", "license")  # build.toml's [general] values each metadata.json repeats


def general(kernel_dir: Path) -> dict:
    """build.toml's [general] table: name, version, license, backends (a KeyError names what is missing)."""
    table = tomllib.loads((kernel_dir / "build.toml").read_text())["general"]
    return {key: table[key] for key in (*METADATA_FIELDS, "backends")}


def variants(kernel_dir: Path) -> dict[str, dict]:
    """The build variants of the kernel's backends, each with the backend its metadata.json names."""
    return {name: backend for b in general(kernel_dir)["backends"] for name, backend in BACKEND_VARIANTS[b].items()}


def module_name(kernel_dir: Path) -> str:
    """The kernel's Python package name: its build.toml name with `-` as `_`, as kernel-builder makes it."""
    return general(kernel_dir)["name"].replace("-", "_")


def digest(files: dict[str, bytes]) -> dict:
    """kernel-builder's source digest of a variant's files (metadata.json aside): each file's SHA-256 in base64
    by its path, what `kernels`' Digest.hash_variant computes and validates a download against."""
    return {"algorithm": "sha256",
            "files": {name: base64.b64encode(hashlib.sha256(data).digest()).decode() for name, data in files.items()}}


def metadata(kernel_dir: Path, variant: str, files: dict[str, bytes]) -> dict:
    """A variant's metadata.json with kernel-builder's required fields (id, name, version, license, backend,
    digest): build.toml's name, version and license; an id unique per variant, as kernels requires of two
    loaded builds; the digest of `files`."""
    suffix = variant.removeprefix("torch-")
    about = general(kernel_dir)
    return {"name": about["name"], "id": f"_{module_name(kernel_dir)}_{suffix}_attnprof",
            "version": about["version"], "license": about["license"], "python-depends": [],
            "backend": variants(kernel_dir)[variant], "digest": digest(files)}


def source_files(kernel_dir: Path) -> dict[str, bytes]:
    """The kernel's Python source by path relative to its module folder (caches left out)."""
    package = kernel_dir / "torch-ext" / module_name(kernel_dir)
    return {p.relative_to(package).as_posix(): p.read_bytes() for p in sorted(package.rglob("*.py"))}


def expected_files(kernel_dir: Path, variant: str) -> dict[str, bytes]:
    """Every file of one build variant, by path relative to the variant's folder."""
    files = {f"{module_name(kernel_dir)}/{name}": data for name, data in source_files(kernel_dir).items()}
    files["metadata.json"] = (json.dumps(metadata(kernel_dir, variant, files), indent=2) + "\n").encode()
    return files


def built_files(variant_dir: Path) -> dict[str, bytes]:
    if not variant_dir.is_dir():
        return {}
    return {p.relative_to(variant_dir).as_posix(): p.read_bytes() for p in sorted(variant_dir.rglob("*"))
            if p.is_file() and "__pycache__" not in p.parts}


def differences(kernel_dir: Path) -> list[str]:
    """`variant/path` of each build file missing, stale or extra against the source; empty when in step."""
    found = []
    for variant in variants(kernel_dir):
        want, have = expected_files(kernel_dir, variant), built_files(kernel_dir / "build" / variant)
        found += [f"{variant}/{name}" for name in sorted(want.keys() | have.keys()) if want.get(name) != have.get(name)]
    return found


def build(kernel_dir: Path) -> None:
    """Rewrite each build variant from the source: written beside it, then swapped in whole."""
    for variant in variants(kernel_dir):
        target = kernel_dir / "build" / variant
        target.parent.mkdir(parents=True, exist_ok=True)
        staging = Path(tempfile.mkdtemp(prefix=f".{variant}-", dir=target.parent))
        for name, data in expected_files(kernel_dir, variant).items():
            (staging / name).parent.mkdir(parents=True, exist_ok=True)
            (staging / name).write_bytes(data)
        if target.exists():
            shutil.rmtree(target)
        staging.rename(target)


def main(argv: list[str]) -> int:
    from attnprof.kernels import FLASH_ATTN_TRITON

    if "--check" in argv:
        stale = differences(FLASH_ATTN_TRITON)
        for name in stale:
            print(f"differs from torch-ext/: build/{name}", file=sys.stderr)
        return 1 if stale else 0
    build(FLASH_ATTN_TRITON)
    return 0


if __name__ == "__main__":
    sys.exit(main(sys.argv[1:]))
