"""Whether the Gluon Hopper kernels compile to the same PTX as they did at an earlier commit: the forward at every
configuration it has (`_hopper_launch.CONFIGS`), head dims 64 and 128, causal or not, and the backward at each
head dim, causal or not, for GQA groups 1, 2 and 4. A change that only
reorganises the kernel's source (its parameters bundled with `@gluon.aggregate`, say) leaves the machine code,
and so the GPU timings, as they were. No GPU needed: Triton compiles for sm_90 with its own ptxas.

    python benchmarks/kernel/hopper_same_ptx.py 586cb56      # the kernel at that commit against the working tree

The PTX is compared without its `.loc`/`.file` lines, `$L__tmp` labels and debug sections (source positions move
with any edit) and with the module names made equal; shared memory and warps too. A configuration that does not
compile must fail on both sides. Prints one line per difference and a summary; exits 1 on any difference.
"""

from __future__ import annotations

import re
import subprocess
import sys
import tempfile
from pathlib import Path

ROOT = Path(__file__).resolve().parents[2]
sys.path.insert(0, str(ROOT / "src"))
KERNEL = "src/attnprof/kernels/flash_attn_triton"

from attnprof.kernels import FLASH_ATTN_TRITON, import_from_folder  # noqa: E402


def compiled(kernel_dir: Path, module: str) -> dict[str, str]:
    """Each configuration's normalised PTX and metadata, or why it did not compile."""
    name = import_from_folder(kernel_dir, module).__name__
    forward = sys.modules[name + ".forward._hopper_launch"]
    backward = sys.modules[name + ".backward._backward_hopper_launch"]
    builds = {f"forward {config} d{d} causal={causal}": (forward.compile_for_sm90, (d, causal, "bf16", config))
              for config in forward.CONFIGS for d in (64, 128) for causal in (False, True)}
    builds |= {f"backward d{d} causal={causal} group={g}": (backward.compile_for_sm90, (d, causal, "bf16", g))
               for d in (64, 128) for causal in (False, True) for g in (1, 2, 4)}
    return {key: _built(build, args, module) for key, (build, args) in builds.items()}


def _built(build, args: tuple, module: str) -> str:
    try:
        kernel = build(*args)
    except Exception as e:  # noqa: BLE001 - a configuration that cannot compile: the same on both sides
        return f"does not compile: {type(e).__name__}"
    meta = f"shared={kernel.metadata.shared} warps={kernel.metadata.num_warps}"
    return meta + "\n" + _normalised(kernel.asm["ptx"], module)


def _normalised(ptx: str, module: str) -> str:
    # `.loc`, `.file` and the `$L__tmpN:` labels are the debug line table's anchors: they move when an inlined
    # function moves to another place or file, and the debug sections alone refer to them
    ptx = re.sub(r"^\s*(\.(loc|file)\b.*|\$L__tmp\d+:)$", "", ptx, flags=re.M).split(".section\t.debug", 1)[0]
    return "\n".join(line for line in ptx.replace(module, "MODULE").splitlines() if line.strip())


def compiled_at(rev: str, compile_all) -> dict[str, str]:
    """compile_all(kernel folder) on the kernel as it was at commit rev (git archive into a temporary folder)."""
    with tempfile.TemporaryDirectory() as tmp:
        archive = subprocess.run(["git", "-C", str(ROOT), "archive", rev, KERNEL], capture_output=True, check=True)
        subprocess.run(["tar", "-x", "-C", tmp], input=archive.stdout, check=True)
        return compile_all(Path(tmp) / KERNEL)


def report_same(before: dict[str, str], after: dict[str, str], what: str) -> int:
    """One line per key whose code differs, then the summary; 1 on any difference."""
    differ = [key for key in before if before[key] != after.get(key)]
    for key in differ:
        print(f"differs: {key}")
    built = sum(not v.startswith("does not compile") for v in before.values())
    print(f"{len(before) - len(differ)} of {len(before)} {what} the same ({built} compiled, the others fail alike); "
          f"{len(differ)} differ")
    return 1 if differ else 0


def main(rev: str) -> int:
    before = compiled_at(rev, lambda folder: compiled(folder, "_hopper_before"))
    return report_same(before, compiled(FLASH_ATTN_TRITON, "_hopper_after"), "configurations")

if __name__ == "__main__":
    sys.exit(main(sys.argv[1] if len(sys.argv) > 1 else "HEAD"))
