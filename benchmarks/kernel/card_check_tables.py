"""The figures of one kernel_card_check.sh call as markdown tables, from the files it leaves in its folder, so that
what docs/kernel.md quotes is read off the JSON rather than copied by hand. From the repository root:

    python benchmarks/kernel/card_check_tables.py OUT      # OUT: the device tool's folder of the call

Every speed is a median of per-round ratios (alternating rounds, triton_masks.alternating) with its range: "speed
vs cuDNN" is cuDNN's time over ours (above 1: ours faster), "A / B" is A's time over B's. A pair that the benchmark
did not time in the same rounds (files written before rounds were kept) is given by its medians and says so.
Reads triton_vs_cudnn.json (dense, d64, decode, features, head_dims), triton_wide_configs.json, decode.json and
pdltrace.log; what is missing is skipped.
"""

from __future__ import annotations

import argparse
import json
import statistics
from pathlib import Path


def ratio(timings: dict, over: str, under: str) -> str:
    """timings[over] / timings[under] per round: 'median (min-max)'; by the medians where rounds were not kept."""
    a, b = timings.get(over), timings.get(under)
    if not a or not b:
        return "-"
    if "rounds" in a and "rounds" in b:
        per_round = [x / y for x, y in zip(a["rounds"], b["rounds"], strict=True)]
        return f"{statistics.median(per_round):.3f} ({min(per_round):.3f}-{max(per_round):.3f})"
    return f"{a['median'] / b['median']:.3f} (medians)"


def us(timings: dict, name: str) -> str:
    return f"{timings[name]['median']:.2f}" if name in timings else "-"


def table(header: list[str], rows: list[list[str]]) -> str:
    lines = ["| " + " | ".join(header) + " |", "|" + "---|" * len(header)]
    return "\n".join(lines + ["| " + " | ".join(row) + " |" for row in rows])


def dense_table(rows: list[dict]) -> str:
    body = []
    for r in rows:
        shape = f"B{r['batch']} S{r['seq']} D{r.get('head_dim', 128)}{' causal' if r['causal'] else ''}"
        f, b = r["forward_us"], r["backward_us"]
        body.append([shape, us(f, "ours"), us(f, "cudnn"), ratio(f, "cudnn", "ours"), us(b, "ours"), us(b, "cudnn"),
                     ratio(b, "cudnn", "ours"), ratio(b, "ours_deterministic", "ours")])
    return table(["shape", "fwd µs", "cuDNN fwd µs", "fwd speed vs cuDNN", "bwd µs", "cuDNN bwd µs",
                  "bwd speed vs cuDNN", "deterministic / default"], body)


def decode_b1_table(part: dict) -> str:
    body = []
    for r in part["rows"]:
        for where in ("from_dram", "l2_warm"):
            t = r[where]
            shares = "/".join(str(t[n].get("share_of_copy", "-")) for n in ("ours", "cudnn", "copy_same_traffic")
                              if n in t)
            body.append([f"{r['cache']} {where}", us(t, "ours"), us(t, "cudnn"), ratio(t, "cudnn", "ours"),
                         ratio(t, "ours_no_pdl", "ours_pdl"), ratio(t, "ours_swept", "ours"), shares])
    return table(["B1 cache", "ours µs", "cuDNN µs", "speed vs cuDNN", "no PDL / PDL", "swept / ours",
                  "share of copy: ours/cuDNN/copy"], body)


def pairs_table(rows: list[dict], label, pairs: list[tuple[str, str, str, str | None]]) -> str:
    """One row per benchmark row: label(row), then each (column, over, under, key) pair's per-round ratio, of the
    timings under row[key] (None: the row itself holds them)."""
    return table(["case"] + [p[0] for p in pairs],
                 [[label(r)] + [ratio(r if key is None else r.get(key) or {}, over, under)
                                for _, over, under, key in pairs] for r in rows])


def trace_table(log: Path) -> str:
    """decode_trace_overlap.py's lines (the pdltrace step's log): what the trace of each form shows."""
    rows = [json.loads(line) for line in log.read_text().splitlines() if line.startswith("{")]
    return table(["cache", "dependent launch", "overlaps", "overlap µs (median)", "summed kernel µs a call"],
                 [[str(r["cache"]), str(r["pdl"]), str(r["overlaps"]), f"{r['overlap_us_median']:.2f}",
                   f"{r['summed_us_per_call']:.2f}"] for r in rows])


def wide_table(rows: list[dict]) -> str:
    body = []
    for r in rows:
        t = r["us"]
        shipped = next(iter(t))
        for name in t:
            if "/" in name:
                continue
            body.append([f"{r['qk']}/{r['v']} {r['part']}", name + (" (shipped)" if name == shipped else ""),
                         us(t, name), ratio(t, name, shipped) if name != shipped else "1",
                         ratio(t, "cudnn", name) if "cudnn" in t and name != "cudnn" else "-"])
        for name, error in r.get("errors", {}).items():
            body.append([f"{r['qk']}/{r['v']} {r['part']}", name, "refused", error[:60], "-"])
    return table(["shape, part", "candidate", "µs", "its time / shipped", "speed vs cuDNN"], body)


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("out", type=Path)
    out = parser.parse_args().out
    versus = out / "triton_vs_cudnn.json"
    if versus.exists():
        v = json.loads(versus.read_text())
        print(f"{v['device']}, torch {v['torch']}, Triton {v['triton']}, cuDNN {v['cudnn']}\n")
        for part in ("dense", "d64"):
            if part in v:
                print(f"## {part}\n\n{dense_table(v[part])}\n")
        if "decode" in v:
            ceiling = v["decode"]["copy_TBs"]
            print(f"## batch-1 decode (copy ceiling {ceiling:.2f} TB/s)\n\n{decode_b1_table(v['decode'])}\n")
        if "features" in v:
            print("## features\n\n" + pairs_table(v["features"], lambda r: r["case"], [
                ("forward: flex / ours", "flex", "ours", "forward_us"),
                ("step: flex / ours", "flex", "ours", "step_us")]) + "\n")
        if "head_dims" in v:
            print("## head dims\n\n" + pairs_table(v["head_dims"], lambda r: f"{r['qk']}/{r['v']}", [
                ("fwd speed vs cuDNN", "cudnn_attention", "ours", "forward_us"),
                ("bwd speed vs cuDNN", "cudnn_attention", "ours", "backward_us")]) + "\n")
    wide = out / "triton_wide_configs.json"
    if wide.exists():
        print(f"## wide tiles\n\n{wide_table(json.loads(wide.read_text())['rows'])}\n")
    decode = out / "decode.json"
    if decode.exists():
        d = json.loads(decode.read_text())
        print("## B8 decode\n\n" + pairs_table(d["decode"], lambda r: f"{r['cache']} q{r['q_len']}", [
            ("speed vs cuDNN", "cudnn", "ours", None), ("no PDL / PDL", "ours_no_pdl", "ours_pdl", None),
            ("pointers / TMA", "ours_pointers", "ours_tma", None)]) + "\n")
        print("## paged\n\n" + pairs_table(d["paged"], lambda r: str(r["cache"]), [
            ("paged / contiguous", "ours_paged", "ours", None), ("flex paged / ours paged", "flex_paged", "ours_paged",
                                                                  None)]) + "\n")
    if (out / "pdltrace.log").exists():
        print(f"## batch-1 decode under the profiler\n\n{trace_table(out / 'pdltrace.log')}\n")

if __name__ == "__main__":
    main()
