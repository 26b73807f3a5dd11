#!/usr/bin/env python3
"""Issue 44's side-by-side: kt_kernel_bench's llm_norm group against llm_norm_peers.py.

Reads the two JSON files of one GPU run and writes, per point both timed
(op, dtype, rows, cols, variant), kerntune's best (its tuned config when the
run had a tuning store, else the heuristic), the heuristic, each peer and
the best peer, all as graph-replay microseconds (both tools time the same
bytes, tuner::PointBytes, so time ratios are bandwidth ratios); then issue
44's checks:

  - prefill points (rows >= 512; QK-norm: tokens >= 512): kerntune's best
    >= the best peer (a tie within 2%), and their geometric mean >= 1.10x;
  - >= 95% of the same-size copy at 8192 rows (tokens);
  - decode points (rows 1-64) reported apart, as launch-bound.

  python3 bench/summarize_llm_norm.py kernel_bench_llm_norm.json llm_norm_peers.json \\
      --csv side_by_side.csv > summary.md
"""

import argparse
import csv
import json
import math
import sys

PEERS = ("eager", "compile", "liger", "flashinfer")
HEADS = 32  # the llm_norm group's QK-norm rows are tokens x 32 heads (tuner/grid.cc)
TIE = 0.98  # within 2% is a tie


def load(path):
    with open(path) as f:
        return json.load(f)


def peer_variant(r):
    """llm_norm_peers.py's variant name for kt_kernel_bench result `r`."""
    if r["op"] == "rms_norm" or not r.get("variant"):
        return "plain"  # QK-norm's variant names its layout; the add forms have none
    return r["variant"].replace(" ", "/")  # "fp8_e4m3 per_row" -> "fp8_e4m3/per_row"


def tokens(r):
    return r["rows"] // HEADS if r["op"] == "rms_norm" else r["rows"]


def ours_us(r):
    """(kerntune's best graph-replay us, its config, the heuristic's us)."""
    heuristic = r.get("graph_median_us")
    t = r.get("tuned")
    if t and t.get("passed") and t.get("graph_replay"):
        return t["median_us"], t["config"], heuristic
    return heuristic, r.get("config"), heuristic


def geomean(xs):
    return math.exp(sum(math.log(x) for x in xs) / len(xs)) if xs else float("nan")


def main():
    parser = argparse.ArgumentParser(description=__doc__,
                                     formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("kernel_bench")
    parser.add_argument("peers")
    parser.add_argument("--csv", help="also write the side-by-side table here")
    args = parser.parse_args()
    ours = load(args.kernel_bench)
    theirs = load(args.peers)
    peers = {}
    # kerntune.torch timed inside the peers' harness (llm_norm_peers.py's
    # "kerntune" peer): kerntune itself, beside the peers, never one of them.
    in_harness = {}
    for p in theirs["results"]:
        if p.get("passed") and p.get("median_us"):
            key = (p["op"], p["dtype"], p["rows"], p["cols"], p["variant"])
            if p["peer"] == "kerntune":
                in_harness[key] = p["median_us"]
            else:
                peers.setdefault(key, {})[p["peer"]] = p["median_us"]

    rows = []
    for r in ours["results"]:
        if r["group"] != "llm_norm" or not r.get("passed"):
            continue
        key = (r["op"], r["dtype"], r["rows"], r["cols"], peer_variant(r))
        if key not in peers:
            continue
        us, config, heuristic = ours_us(r)
        if us is None:
            continue
        times = peers[key]
        best = min(times, key=times.get)
        same = r.get("copy_same_bytes_graph_gbps")
        pct_copy = 100 * r["bytes"] / (us * 1e3) / same if same else None
        rows.append({"op": r["op"], "dtype": r["dtype"], "rows": r["rows"], "cols": r["cols"],
                     "variant": key[4], "tokens": tokens(r), "config": config,
                     "kerntune_us": us, "heuristic_us": heuristic, "pct_copy": pct_copy,
                     **{f"{peer}_us": times.get(peer) for peer in PEERS},
                     "best_peer": best, "ratio": times[best] / us,
                     "kerntune_torch_us": in_harness.get(key),
                     "torch_ratio": times[best] / in_harness[key] if key in in_harness
                     else None})

    fields = ["op", "dtype", "rows", "cols", "variant", "config", "kerntune_us", "heuristic_us",
              "pct_copy"] + [f"{peer}_us" for peer in PEERS] + ["best_peer", "ratio",
                                                                "kerntune_torch_us",
                                                                "torch_ratio"]

    def text(value, digits=2):
        if value is None:
            return ""
        return f"{value:.{digits}f}" if isinstance(value, float) else str(value)

    if args.csv:
        with open(args.csv, "w", newline="") as f:
            w = csv.writer(f)
            w.writerow(fields)
            for row in rows:
                w.writerow([text(row[k], 1 if k == "pct_copy" else 3 if k.endswith("ratio")
                                 else 2) for k in fields])

    out = sys.stdout
    out.write(f"GPU: {ours['gpu']}; kerntune commit {ours['commit']}, {ours['date']}; peers "
              f"{theirs['date']} (torch {theirs.get('torch')}, triton {theirs.get('triton')})\n\n")
    out.write("| op | rows | cols | variant | kerntune us | config | % copy | best peer us | "
              "ratio |\n|---|---|---|---|---|---|---|---|---|\n")
    for row in rows:
        best_us = row[f"{row['best_peer']}_us"]
        out.write(f"| {row['op']} | {row['rows']} | {row['cols']} | {row['variant']} | "
                  f"{row['kerntune_us']:.2f} | `{row['config']}` | {text(row['pct_copy'], 1)} | "
                  f"{best_us:.2f} {row['best_peer']} | {row['ratio']:.3f} |\n")

    prefill = [row for row in rows if row["tokens"] >= 512]
    decode = [row for row in rows if row["tokens"] <= 64]
    behind = [row for row in prefill if row["ratio"] < TIE]
    big = [row for row in rows if row["tokens"] == 8192 and row["pct_copy"] is not None]
    under = [row for row in big if row["pct_copy"] < 95]
    out.write("\n### Checks (issue 44)\n\n")
    out.write(f"- prefill points behind the best peer by more than 2%: {len(behind)} of "
              f"{len(prefill)}\n")
    for row in behind:
        out.write(f"  - {row['op']} {row['rows']}x{row['cols']} {row['variant']}: "
                  f"{row['ratio']:.3f}x {row['best_peer']}\n")
    prefill_mean = geomean([row["ratio"] for row in prefill])
    out.write(f"- prefill geometric mean over the best peer: {prefill_mean:.3f}x (target 1.10x)\n")
    out.write(f"- 8192-token points under 95% of the same-size copy: {len(under)} of {len(big)}\n")
    for row in under:
        out.write(f"  - {row['op']} {row['rows']}x{row['cols']} {row['variant']}: "
                  f"{row['pct_copy']:.1f}%\n")
    if decode:
        ratios = [r["ratio"] for r in decode]
        out.write(f"- decode (1-64 tokens, launch-bound): geometric mean {geomean(ratios):.3f}x, "
                  f"min {min(ratios):.3f}x over {len(decode)} points\n")
    torch_rows = [row for row in rows if row["torch_ratio"] is not None]
    if torch_rows:
        # Issue 48: kerntune.torch in the peers' own harness, graph replay.
        out.write("\n### kerntune.torch in the peers' harness (issue 48)\n\n")
        for name, part in (("decode (1-64 tokens)", [r for r in torch_rows if r["tokens"] <= 64]),
                           ("prefill (512+ tokens)",
                            [r for r in torch_rows if r["tokens"] >= 512])):
            if not part:
                continue
            ratios = [r["torch_ratio"] for r in part]
            behind_torch = [r for r in part if r["torch_ratio"] < TIE]
            out.write(f"- {name}: geometric mean {geomean(ratios):.3f}x the best peer, min "
                      f"{min(ratios):.3f}x; behind by more than 2% at {len(behind_torch)} of "
                      f"{len(part)}\n")
            for row in behind_torch:
                out.write(f"  - {row['op']} {row['rows']}x{row['cols']} {row['variant']}: "
                          f"{row['kerntune_torch_us']:.2f} us vs "
                          f"{row[row['best_peer'] + '_us']:.2f} {row['best_peer']}\n")


if __name__ == "__main__":
    main()
