"""The kernel folder's layout: the source in torch-ext/, build/ produced from it and equal to it, and
`kernels` loading the build it should."""

from __future__ import annotations

import glob
import json
import shutil

import pytest

from attnprof.kernels import FLASH_ATTN_TRITON, MODULE_NAME, builder, source_package


def test_every_build_variant_is_the_source_byte_for_byte():
    """build/ is produced by `python -m attnprof.kernels.builder`; a stale build fails here."""
    assert builder.differences(FLASH_ATTN_TRITON) == []
    assert (source_package() / "__init__.py").is_file()


def test_the_builder_notices_a_stale_or_extra_file_and_rebuilds_it(tmp_path):
    kernel = tmp_path / "k"
    shutil.copytree(FLASH_ATTN_TRITON, kernel)
    (kernel / "torch-ext" / MODULE_NAME / "_launch.py").write_text("# edited\n")
    (kernel / "torch-ext" / MODULE_NAME / "backward" / "_backward.py").write_text("# edited\n")  # a role folder's
    (kernel / "build" / "torch-cuda" / MODULE_NAME / "_old.py").write_text("")
    edited = (f"{MODULE_NAME}/_launch.py", f"{MODULE_NAME}/backward/_backward.py", "metadata.json")
    assert set(builder.differences(kernel)) == {f"{v}/{name}" for v in builder.variants(kernel) for name in edited} | {
        f"torch-cuda/{MODULE_NAME}/_old.py"}  # metadata.json holds each file's digest
    builder.build(kernel)
    assert builder.differences(kernel) == []


def test_the_package_data_globs_ship_every_source_and_build_file_the_role_folders_included():
    """An install carries only what pyproject's package-data globs match (a `*` stops at a `/`): each .py of
    torch-ext/ and build/, forward/ and backward/ one level down, must be matched by one."""
    tomllib = pytest.importorskip("tomllib")  # Python 3.11+
    root = FLASH_ATTN_TRITON.parents[1]  # src/attnprof
    pyproject = tomllib.loads((root.parents[1] / "pyproject.toml").read_text())
    globs = pyproject["tool"]["setuptools"]["package-data"]["attnprof"]
    shipped = {path for pattern in globs for path in glob.glob(pattern, root_dir=root)}
    wanted = {p.relative_to(root).as_posix() for folder in ("torch-ext", "build")
              for p in (FLASH_ATTN_TRITON / folder).rglob("*.py") if "__pycache__" not in p.parts}
    assert any("/backward/" in path for path in wanted) and any("/forward/" in path for path in wanted)
    assert wanted - shipped == set()


def test_the_noarch_cuda_build_names_its_arch_and_each_variant_has_its_own_id():
    metadata = {v: json.loads((FLASH_ATTN_TRITON / "build" / v / "metadata.json").read_text())
                for v in builder.variants(FLASH_ATTN_TRITON)}
    assert metadata["torch-cuda"]["backend"] == {"type": "cuda", "archs": ["9.0+PTX"]}
    assert len({m["id"] for m in metadata.values()}) == len(metadata)
    assert {m["name"] for m in metadata.values()} == {"flash-attn-triton"}


def test_kernels_reads_the_metadata_and_loads_the_build_it_picks_for_this_machine():
    kernels = pytest.importorskip("kernels")
    torch = pytest.importorskip("torch")
    from kernels._rust import Metadata

    cuda = Metadata.read_from_file(FLASH_ATTN_TRITON / "build" / "torch-cuda" / "metadata.json")
    assert cuda.backend.archs == ["9.0+PTX"]
    assert cuda.id and cuda.version == 1 and cuda.license == "apache-2.0"
    module = kernels.get_local_kernel(FLASH_ATTN_TRITON)
    expected = "torch-cuda" if torch.version.cuda else "torch-universal"  # noarch first, universal last
    assert f"/build/{expected}/" in module.__file__.replace("\\", "/")
    assert callable(module.attention) and callable(module.flash_attn_func)


def test_every_variants_digest_is_the_one_kernels_computes_and_catches_an_edited_file(tmp_path):
    pytest.importorskip("kernels")
    from kernels._rust import Digest, DigestAlgorithm, DigestValidationError, Metadata

    for variant in builder.variants(FLASH_ATTN_TRITON):
        folder = FLASH_ATTN_TRITON / "build" / variant
        recorded = Metadata.read_from_file(folder / "metadata.json").digest
        recorded.validate(Digest.hash_variant(DigestAlgorithm.SHA256, folder))  # raises on any difference
    recorded = Metadata.read_from_file(FLASH_ATTN_TRITON / "build" / "torch-cuda" / "metadata.json").digest
    edited = tmp_path / "variant"
    shutil.copytree(FLASH_ATTN_TRITON / "build" / "torch-cuda", edited, ignore=shutil.ignore_patterns("__pycache__"))
    (edited / MODULE_NAME / "_launch.py").write_text("# edited\n")
    with pytest.raises(DigestValidationError):
        recorded.validate(Digest.hash_variant(DigestAlgorithm.SHA256, edited))


def test_build_toml_is_kernel_builders_current_format_and_agrees_with_the_metadata():
    pytest.importorskip("kernels")
    from kernels._rust import Backend, Build

    assert Build.open(FLASH_ATTN_TRITON).general.backends == [Backend.CUDA]  # raises on a format it rejects
    general = builder.general(FLASH_ATTN_TRITON)
    metadata = json.loads((FLASH_ATTN_TRITON / "build" / "torch-cuda" / "metadata.json").read_text())
    assert {k: metadata[k] for k in builder.METADATA_FIELDS} == {k: general[k] for k in builder.METADATA_FIELDS}
    assert builder.module_name(FLASH_ATTN_TRITON) == MODULE_NAME and general["backends"] == ["cuda"]


def test_the_builder_takes_the_kernels_name_version_and_license_from_build_toml(tmp_path):
    kernel = tmp_path / "k"
    shutil.copytree(FLASH_ATTN_TRITON, kernel)
    toml = (kernel / "build.toml").read_text()
    (kernel / "build.toml").write_text(toml.replace("version = 1", "version = 2").replace('"apache-2.0"', '"mit"'))
    assert "torch-cuda/metadata.json" in builder.differences(kernel)
    builder.build(kernel)
    metadata = json.loads((kernel / "build" / "torch-cuda" / "metadata.json").read_text())
    assert (metadata["version"], metadata["license"], metadata["name"]) == (2, "mit", "flash-attn-triton")


def test_kernels_benchmark_finds_a_benchmark_class_with_a_verify_step_for_every_workload():
    pytest.importorskip("kernels")
    pytest.importorskip("torch")
    try:  # where `kernels benchmark` finds a kernel's benchmark classes: kernels < 0.19, then 0.19's move
        from kernels.cli.benchmark import discover_benchmark_classes, discover_benchmark_scripts
    except ModuleNotFoundError:
        from kernels._internals.cli.benchmark import discover_benchmark_classes, discover_benchmark_scripts

    (script,) = discover_benchmark_scripts("flash_attn_triton", FLASH_ATTN_TRITON)
    (cls,) = discover_benchmark_classes(script, FLASH_ATTN_TRITON)
    workloads = {name.removeprefix("benchmark_") for name in dir(cls) if name.startswith("benchmark_")}
    assert workloads == {"article", "long"}
    assert all(hasattr(cls, f"{prefix}_{w}") for w in workloads for prefix in ("setup", "verify"))
