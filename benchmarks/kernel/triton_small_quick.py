"""Some of benchmarks/kernel/triton_small.py's candidates at some of its shapes, each shape under a watchdog: a
short H200 call that checks new candidates (errors against float64, speed against cuDNN in alternating
rounds, as triton_small.py measures them).

    PYTHONPATH=src python3 benchmarks/kernel/triton_small_quick.py --out DIR --only SHAPE,SHAPE --labels LABEL,LABEL \
        [--rounds N]   # N alternating rounds of device time and of latency (default 5 and 3)

A candidate runs when its label is one of --labels (cuDNN always runs). Writes DIR/triton_small_quick.json.
"""

from __future__ import annotations

import argparse
import json
import sys
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parent))
import triton_small as small  # noqa: E402
from triton_attention import Watchdog  # noqa: E402

SHAPE_LIMIT_S = 45  # one shape's candidates, compiled beforehand, take 5-10 s at 5 rounds


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--out", type=Path, default=Path("."))
    parser.add_argument("--only", required=True, help="comma-separated shape names of triton_small.SHAPES")
    parser.add_argument("--labels", required=True, help="comma-separated labels of triton_small.CANDIDATES")
    parser.add_argument("--rounds", type=int, help="alternating rounds of device time and of latency")
    args = parser.parse_args()
    names, labels = args.only.split(","), set(args.labels.split(","))

    def keep(label: str) -> bool:
        return label in labels

    module = small.load_flash_attn_triton()[0]
    failed = small.precompile([(name, i) for name in names for i, c in enumerate(small.CANDIDATES[name])
                               if keep(c[0])])
    watchdog, results = Watchdog(SHAPE_LIMIT_S), {}
    args.out.mkdir(parents=True, exist_ok=True)
    for name in names:
        watchdog.start(name)
        rounds = (args.rounds, args.rounds) if args.rounds else (small.ROUNDS, 3)
        results[name] = small.small_shape(module, name, failed, keep, *rounds)
        watchdog.stop()
        small.print_small(name, results[name])
        (args.out / "triton_small_quick.json").write_text(json.dumps(results, indent=1))


if __name__ == "__main__":
    main()
