"""Run one sweep twice, each in its own process, and compare every (point, variant): do the two
measurements of device time agree within their spreads (analysis.noise.compare says "no change")?
Prints a markdown table (for docs/benchmarks.md), the fitted exponents of both runs, and a summary.

    PYTHONPATH=src python3 benchmarks/device_runs/repeat_sweep.py --out DIR -- <attnprof sweep options>
    # the tables again, from the saved runs:
    PYTHONPATH=src python3 benchmarks/device_runs/repeat_sweep.py --from DIR/repeat.json
"""

from __future__ import annotations

import argparse
import json
import subprocess
import sys
from pathlib import Path

from attnprof.analysis.noise import compare
from attnprof.report.terminal import point_label
from attnprof.units import exponent, spread


def one_sweep(options: list[str], out: Path) -> dict:
    command = [sys.executable, "-m", "attnprof", "sweep", *options, "--json", "--no-report", "--no-history",
               "--out", str(out)]
    proc = subprocess.run(command, capture_output=True, text=True)
    if proc.returncode != 0:
        sys.exit(f"sweep failed ({proc.returncode}): {proc.stderr[-2000:]}")
    return json.loads(proc.stdout)


def table(first: dict, second: dict) -> tuple[list[str], int, int]:
    again = {(x["key"], x["variant"]): x for x in second["lines"]}
    rows = ["| point | variant | run 1 device time | run 2 device time | change | verdict |",
            "| --- | --- | --- | --- | --- | --- |"]
    agree = total = 0
    for x in first["lines"]:
        y = again.get((x["key"], x["variant"]))
        if x["status"] != "ok" or not y or y["status"] != "ok":
            continue
        c = compare(x["device_us"], y["device_us"])
        total += 1
        agree += c["verdict"] == "no change"
        flag = f" (unstable: {', '.join(c['unstable'])})" if c["unstable"] else ""
        rows.append(f"| {point_label(x['point'])} | {x['variant']} | {spread(x['device_us'])} | "
                    f"{spread(y['device_us'])} | {c['change_pct']:+.1f}% | {c['verdict']}{flag} |")
    return rows, agree, total


def fits(runs: list[dict]) -> list[str]:
    out = []
    for group in runs[0]["scaling"]:
        for variant in runs[0]["scaling"][group]:
            ks = [exponent(r["scaling"].get(group, {}).get(variant, {}).get("time")) for r in runs]
            r2 = [(r["scaling"].get(group, {}).get(variant, {}).get("time") or {}).get("r2") for r in runs]
            out.append(f"- {group} {variant}: time ~ S^k, k = {ks[0]} then {ks[1]} (R² {r2[0]}, {r2[1]})")
    return out


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--out", help="the two sweeps' folders and repeat.json go here")
    parser.add_argument("--from", dest="saved", help="a repeat.json: compare its two runs again, measure nothing")
    parser.add_argument("options", nargs=argparse.REMAINDER, help="-- then `attnprof sweep` options")
    args = parser.parse_args()
    if args.saved:
        runs = json.loads(Path(args.saved).read_text())["runs"]
    elif args.out:
        runs = [one_sweep([o for o in args.options if o != "--"], Path(args.out) / f"run{i}") for i in (1, 2)]
    else:
        parser.error("give --out DIR -- <sweep options>, or --from repeat.json")
    rows, agree, total = table(*runs)
    print("\n".join(rows))
    print()
    print("\n".join(fits(runs)))
    print(f"\n{agree} of {total} (point, variant) pairs agree within their spreads "
          "(p25–p75 bands overlap, or medians within 1%)")
    if not args.saved:
        (Path(args.out) / "repeat.json").write_text(json.dumps({"runs": runs, "agree": agree, "total": total}))
    return 0


if __name__ == "__main__":
    sys.exit(main())
