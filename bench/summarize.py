#!/usr/bin/env python3
"""Side-by-side Markdown tables of kt_kernel_bench and torch_bench results.

Reads the two JSON files of one GPU run (same machine, same copy roofline)
and prints, per grid point, kerntune's heuristic config and GB/s beside
PyTorch eager and torch.compile. Launch-bound points (under ~20 us) are
compared on CUDA-graph replay figures where both sides have them, since the
per-launch figures of the two tools time host overhead differently.

  python3 bench/summarize.py kernel_bench.json torch_bench.json > summary.md
"""

import argparse
import json
import sys


def load(path):
    with open(path) as f:
        return json.load(f)


def fair_pair(ours, peer):
    """(our GB/s, peer GB/s, basis) on a common basis: graph replay when both
    timed one, else the per-launch event figures."""
    if peer is None:
        return ours["gbps"], None, "event"
    if ours.get("graph_gbps") and peer.get("graph_gbps"):
        return ours["graph_gbps"], peer["graph_gbps"], "graph"
    return ours["gbps"], peer["gbps"], "event"


def main():
    parser = argparse.ArgumentParser(description=__doc__,
                                     formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("kernel_bench")
    parser.add_argument("torch_bench")
    parser.add_argument("--target-pct", type=float, default=85.0,
                        help="%% of copy expected of 16-bit points with cols >= 1024")
    parser.add_argument("--tuned-target-pct", type=float, default=90.0,
                        help="%% of copy expected of tuned configs (any dtype) with cols >= 1024")
    args = parser.parse_args()
    ours = load(args.kernel_bench)
    torch = load(args.torch_bench)
    peers = {(r["group"], r["op"], r["dtype"], r["rows"], r["cols"], r["mode"]): r
             for r in torch["results"]}
    copy = ours["copy_gbps"]
    out = sys.stdout
    out.write(f"GPU: {ours['gpu']}; copy roofline {copy:.0f} GB/s (kt_kernel_bench), "
              f"{torch['copy_gbps']:.0f} GB/s (torch_bench); torch {torch['torch']}, "
              f"triton {torch['triton']}; commit {ours['commit']}; {ours['date']}\n\n")
    out.write("GB/s = (bytes read + bytes written) / median time. `vs eager` and "
              "`vs compile` are our GB/s over theirs on the same basis "
              "(graph replay for launch-bound points, marked g).\n\n")

    slower_than_eager, below_target, slower_than_compile = [], [], []
    tuned_slower, tuned_below_target, tuned_slower_than_compile = [], [], []
    for group in ("main", "few_rows", "attention"):
        rows = [r for r in ours["results"] if r["group"] == group]
        if not rows:
            continue
        out.write(f"### {group}\n\n")
        out.write("| op | dtype | rows | cols | config | GB/s | % copy | graph GB/s "
                  "| tuned GB/s | eager GB/s | compile GB/s | vs eager | vs compile |\n")
        out.write("|---|---|---|---|---|---|---|---|---|---|---|---|---|\n")
        for r in rows:
            key = (r["group"], r["op"], r["dtype"], r["rows"], r["cols"])
            eager = peers.get(key + ("eager",))
            compiled = peers.get(key + ("compile",))
            a, b, basis = fair_pair(r, eager)
            c, d, cbasis = fair_pair(r, compiled)
            vs_eager = f"{a / b:.2f}{'g' if basis == 'graph' else ''}" if b else "-"
            vs_compile = f"{c / d:.2f}{'g' if cbasis == 'graph' else ''}" if d else "-"
            graph = f"{r['graph_gbps']:.0f}" if r.get("graph_gbps") else "-"
            t = r.get("tuned")
            tuned = f"{t['gbps']:.0f} `{t['config']}`" if t and t.get("gbps") else "-"
            if t and t.get("gbps"):
                heuristic = r["graph_gbps"] if t.get("graph_replay") else r["gbps"]
                if t["gbps"] < heuristic:
                    tuned_slower.append((key, t["gbps"], heuristic))
                if (group == "main" and r["cols"] >= 1024
                        and 100 * t["gbps"] / copy < args.tuned_target_pct):
                    tuned_below_target.append((key, 100 * t["gbps"] / copy))
                if compiled:
                    peer = compiled["graph_gbps"] if t.get("graph_replay") and compiled.get(
                        "graph_gbps") else compiled["gbps"]
                    if t["gbps"] < peer:
                        tuned_slower_than_compile.append((key, t["gbps"], peer))
            out.write(f"| {r['op']} | {r['dtype']} | {r['rows']} | {r['cols']} | "
                      f"`{r['config']}` | {r['gbps']:.0f} | {r['pct_copy']:.1f} | {graph} | "
                      f"{tuned} | "
                      f"{eager['gbps'] if eager else float('nan'):.0f} | "
                      f"{compiled['gbps'] if compiled else float('nan'):.0f} | "
                      f"{vs_eager} | {vs_compile} |\n")
            if b and a < b:
                slower_than_eager.append((key, a, b))
            if d and c < d:
                slower_than_compile.append(key)
            if (group == "main" and r["dtype"] != "float32" and r["cols"] >= 1024
                    and r["pct_copy"] < args.target_pct):
                below_target.append((key, r["pct_copy"]))
        out.write("\n")

    def key_text(key):
        return " ".join(map(str, key))

    def gbps_pair(item):
        key, a, b = item
        return f"{key_text(key)}: {a:.0f} vs {b:.0f} GB/s"

    def pct(item):
        key, value = item
        return f"{key_text(key)}: {value:.1f}%"

    def check(title, items, describe=None, total=""):
        """One checks line with its count, then each offending point."""
        out.write(f"- {title}: {len(items)}{total}\n")
        for item in items if describe else ():
            out.write(f"  - {describe(item)}\n")

    out.write("### Checks\n\n")
    check("kerntune outputs failing the fp64 check",
          [r for r in ours["results"] if not r["passed"]])
    check("points slower than torch eager", slower_than_eager, gbps_pair)
    check(f"16-bit main points with cols >= 1024 under {args.target_pct:.0f}% of copy",
          below_target, pct)
    check("points slower than torch.compile", slower_than_compile,
          total=f" of {len(ours['results'])}")
    if any(r.get("tuned") for r in ours["results"]):
        check("tuned configs slower than the heuristic (same run)", tuned_slower, gbps_pair)
        check(f"tuned, main, cols >= 1024 under {args.tuned_target_pct:.0f}% of copy",
              tuned_below_target, pct)
        check("tuned configs slower than torch.compile", tuned_slower_than_compile, gbps_pair)

if __name__ == "__main__":
    main()
