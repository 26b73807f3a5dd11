#!/usr/bin/env python3
"""Side-by-side Markdown tables of kt_kernel_bench and torch_bench results.

Reads the two JSON files of one GPU run (same machine, same copy roofline)
and prints, per grid point (op, dtype, rows, cols, inner), kerntune's
heuristic config and GB/s, its tuned config when the run had a tuning store,
and PyTorch eager and torch.compile; then kerntune's best (tuned, else the
heuristic) over the best peer of the point. Points are compared on
CUDA-graph replay figures where both sides have them (both tools time every
point that way since 2026-11-26; older files only launch-bound ones), else
on the per-launch events figures. Both tools count the same bytes (tuner::PointBytes), so every
GB/s ratio is a time ratio. Both tools keep all device work on one stream
("streams": "one"): a process that has used a second stream can launch
~0.35 us slower (tuner/measure.h). kt_kernel_bench files from before that
(no "streams" key) are summarized with a warning.

  python3 bench/summarize.py kernel_bench.json torch_bench.json > summary.md

--plot PNG also draws kerntune's best and the best peer of each point of one
group (--plot-group, default main: 49152 rows) as GB/s against columns, one
panel per op, a colour per dtype, on a log2 axis of columns beside the run's
copy roofline. Only --plot needs matplotlib (Debian: python3-matplotlib).
"""

import argparse
import json
import math
import sys

GROUPS = ("main", "few_rows", "attention", "axis", "llm")


def load(path):
    with open(path) as f:
        return json.load(f)


def ours_pair(ours, peer, graph_replay=None):
    """(our GB/s, peer GB/s, basis) on a common basis: graph replay when both
    timed one, else the per-launch event figures. `ours` is a result (or its
    tuned entry, whose graph_replay says which basis its one figure is on)."""
    if peer is None or peer.get("gbps") is None:
        return ours.get("gbps"), None, "event"
    if graph_replay is None:
        if ours.get("graph_gbps") and peer.get("graph_gbps"):
            return ours["graph_gbps"], peer["graph_gbps"], "graph"
        return ours.get("gbps"), peer["gbps"], "event"
    if graph_replay and peer.get("graph_gbps"):
        return ours.get("gbps"), peer["graph_gbps"], "graph"
    return ours.get("gbps"), peer["gbps"], "event"


def best_peer(ours, peers, graph_replay=None):
    """(our GB/s, best peer GB/s, basis, peer mode) over the peers that passed."""
    best = None
    for mode, peer in peers.items():
        if peer is None or not peer.get("passed"):
            continue
        a, b, basis = ours_pair(ours, peer, graph_replay)
        if b is not None and (best is None or b > best[1]):
            best = (a, b, basis, mode)
    return best


def point_best(r, peers):
    """best_peer of kt_kernel_bench result `r` against its peers (mode -> torch_bench
    result): kerntune's best is its tuned entry when the run had one, else the
    heuristic; None when kerntune failed or no peer passed."""
    t = r.get("tuned")
    if t and t.get("gbps"):
        return best_peer(t, peers, bool(t.get("graph_replay")))
    return best_peer(r, peers) if r.get("passed") else None


def peers_of(torch):
    """torch_bench's results by (group, op, dtype, rows, cols, inner, mode); its
    "kerntune" mode is kerntune.torch timed there, never one of the peers."""
    return {(r["group"], r["op"], r["dtype"], r["rows"], r["cols"], r.get("inner", 1),
             r["mode"]): r for r in torch["results"] if r["mode"] != "kerntune"}


def point_peers(r, peers):
    """The eager and compile results of kt_kernel_bench result `r`'s point."""
    key = (r["group"], r["op"], r["dtype"], r["rows"], r["cols"], r.get("inner", 1))
    return {"eager": peers.get(key + ("eager",)), "compile": peers.get(key + ("compile",))}


def plot(ours, torch, group, path):
    """Writes a PNG of kerntune's best and the best peer, GB/s against cols, at
    the points of `group` that have both; one panel per op. Returns the number
    of points drawn."""
    try:
        import matplotlib
        matplotlib.use("Agg")
        import matplotlib.pyplot as plt
        import matplotlib.ticker
    except ImportError:
        sys.exit("summarize.py: --plot needs matplotlib (Debian: apt-get install "
                 "python3-matplotlib; deploy/install_deps.sh installs it)")
    peers = peers_of(torch)
    # op -> dtype -> [(cols, ours, peer, basis)], rows and inner per op.
    lines, shapes = {}, {}
    for r in ours["results"]:
        if r["group"] != group:
            continue
        best = point_best(r, point_peers(r, peers))
        if not best or not best[0] or not best[1]:
            continue
        lines.setdefault(r["op"], {}).setdefault(r["dtype"], []).append(
            (r["cols"], best[0], best[1], best[2]))
        shapes.setdefault(r["op"], set()).add((r["rows"], r.get("inner", 1)))
    if not lines:
        sys.exit(f"summarize.py: --plot: no {group} point has both kerntune and a peer "
                 "that passed")
    ops = list(lines)
    ncols = min(3, len(ops))
    nrows = (len(ops) + ncols - 1) // ncols
    fig, axes = plt.subplots(nrows, ncols, figsize=(4.2 * ncols, 3.9 * nrows), dpi=90,
                             squeeze=False, sharey=True)
    colours = {"float32": "tab:blue", "float16": "tab:orange", "bfloat16": "tab:green"}
    copy = ours["copy_gbps"]
    for ax, op in zip(axes.flat, ops):
        for dtype, points in lines[op].items():
            points.sort()
            cols = [p[0] for p in points]
            colour = colours.get(dtype)
            ax.plot(cols, [p[1] for p in points], "-", color=colour, label=f"kerntune {dtype}")
            ax.plot(cols, [p[2] for p in points], "--", color=colour, alpha=0.7,
                    label=f"best peer {dtype}")
            # The basis of each comparison: filled, graph replay; open, per-launch events.
            for basis, face in (("graph", colour), ("event", "white")):
                at = [p for p in points if p[3] == basis]
                ax.plot([p[0] for p in at], [p[1] for p in at], "o", color=colour,
                        markerfacecolor=face, markersize=3.5)
        ax.axhline(copy, color="grey", linewidth=0.8, linestyle=":")
        ax.set_xscale("log", base=2)
        ax.xaxis.set_major_formatter(matplotlib.ticker.FuncFormatter(lambda x, _: f"{x:.0f}"))
        ax.set_ylim(bottom=0)
        shape = ", ".join(f"{rows} rows" + (f" x inner {inner}" if inner > 1 else "")
                          for rows, inner in sorted(shapes[op]))
        ax.set_title(f"{op} ({shape})", fontsize=10)
        ax.set_xlabel("cols (reduced axis)")
        ax.grid(True, which="major", alpha=0.3)
    for ax in axes[:, 0]:
        ax.set_ylabel("GB/s (bytes read + written)")
    for ax in list(axes.flat)[len(ops):]:
        ax.axis("off")
    handles, labels = axes.flat[0].get_legend_handles_labels()
    handles.append(plt.Line2D([], [], color="grey", linewidth=0.8, linestyle=":"))
    labels.append(f"1 GiB copy {copy:.0f} GB/s")
    fig.legend(handles, labels, loc="lower center", ncol=min(4, len(labels)), fontsize=8,
               frameon=False)
    fig.suptitle(f"kerntune (tuned, else heuristic) vs the faster of torch eager and "
                 f"torch.compile\n{ours['gpu']}, {ours['date'][:10]}, commit {ours['commit']}"
                 f", torch {torch.get('torch', '?')}\ndashed: best peer; filled points timed by graph "
                 f"replay, open ones per launch (events)", fontsize=10)
    legend_rows = (len(labels) + 3) // 4
    fig.tight_layout(rect=(0, 0.04 + 0.035 * legend_rows / nrows, 1, 1))
    fig.savefig(path)
    plt.close(fig)
    return sum(len(p) for d in lines.values() for p in d.values())


def ratio(a, b, basis):
    if not a or not b:
        return "-"
    return f"{a / b:.2f}{'g' if basis == 'graph' else ''}"


def number(value, digits=0):
    if value is None or (isinstance(value, float) and math.isnan(value)):
        return "-"
    return f"{value:.{digits}f}"


def main():
    parser = argparse.ArgumentParser(description=__doc__,
                                     formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("kernel_bench")
    parser.add_argument("torch_bench")
    parser.add_argument("--target-pct", type=float, default=85.0,
                        help="%% of copy expected of 16-bit points with cols >= 1024")
    parser.add_argument("--tuned-target-pct", type=float, default=90.0,
                        help="%% of copy expected of tuned configs (any dtype) with cols >= 1024")
    parser.add_argument("--plot", metavar="PNG",
                        help="also draw GB/s against cols, kerntune and the best peer, into PNG")
    parser.add_argument("--plot-group", default="main", choices=GROUPS,
                        help="the group --plot draws (default main)")
    args = parser.parse_args()
    ours = load(args.kernel_bench)
    torch = load(args.torch_bench)
    if args.plot:
        drawn = plot(ours, torch, args.plot_group, args.plot)
        sys.stderr.write(f"summarize.py: {args.plot}: {drawn} {args.plot_group} points\n")
    peers = peers_of(torch)
    copy = ours["copy_gbps"]
    streams = (ours.get("streams"), torch.get("streams"))
    if streams[0] != streams[1]:
        sys.stderr.write(f"warning: streams {streams[0]} (kt_kernel_bench) against {streams[1]} "
                         "(torch_bench): launch-bound figures may differ by ~0.35 us per "
                         "launch for that reason alone (tuner/measure.h)\n")
    out = sys.stdout
    out.write(f"GPU: {ours['gpu']}; copy roofline {copy:.0f} GB/s (kt_kernel_bench), "
              f"{torch['copy_gbps']:.0f} GB/s (torch_bench); torch {torch['torch']}, "
              f"triton {torch['triton']}; commit {ours['commit']}; {ours['date']}"
              + f"; streams: {streams[0]} / {streams[1]}\n\n")
    out.write("GB/s = (bytes read + bytes written) / median time, the same bytes for both "
              "tools. `vs eager` and `vs compile` are our heuristic's GB/s over theirs on the "
              "same basis (graph replay where both have it, marked g); `best vs peer` is "
              "kerntune's best (tuned when the run had a store, else the heuristic) over the "
              "faster peer that passed its check.\n\n")

    slower_than_eager, below_target, slower_than_compile = [], [], []
    tuned_slower, tuned_below_target, tuned_slower_than_compile = [], [], []
    behind_best_peer, ratios = [], []
    split_rows = []
    for group in GROUPS:
        rows = [r for r in ours["results"] if r["group"] == group]
        if not rows:
            continue
        out.write(f"### {group}\n\n")
        out.write("| op | dtype | rows | cols | inner | config | GB/s | % copy | graph GB/s "
                  "| tuned GB/s | copy same bytes g | eager GB/s | compile GB/s | vs eager "
                  "| vs compile | best peer | best vs peer |\n")
        out.write("|---|---|---|---|---|---|---|---|---|---|---|---|---|---|---|---|---|\n")
        for r in rows:
            inner = r.get("inner", 1)
            key = (r["group"], r["op"], r["dtype"], r["rows"], r["cols"], inner)
            eager = peers.get(key + ("eager",))
            compiled = peers.get(key + ("compile",))
            a, b, basis = ours_pair(r, eager)
            c, d, cbasis = ours_pair(r, compiled)
            graph = number(r.get("graph_gbps"))
            t = r.get("tuned")
            has_tuned = bool(t and t.get("gbps"))
            tuned = f"{t['gbps']:.0f} `{t['config']}`" if has_tuned else "-"
            if has_tuned:
                heuristic = r.get("graph_gbps") if t.get("graph_replay") else r.get("gbps")
                if heuristic and t["gbps"] < heuristic:
                    tuned_slower.append((key, t["gbps"], heuristic))
                if (group == "main" and r["cols"] >= 1024
                        and 100 * t["gbps"] / copy < args.tuned_target_pct):
                    tuned_below_target.append((key, 100 * t["gbps"] / copy))
                if compiled and compiled.get("gbps"):
                    peer = compiled["graph_gbps"] if t.get("graph_replay") and compiled.get(
                        "graph_gbps") else compiled["gbps"]
                    if t["gbps"] < peer:
                        tuned_slower_than_compile.append((key, t["gbps"], peer))
            # kerntune's best against the best peer of the point.
            best = point_best(r, {"eager": eager, "compile": compiled})
            if best:
                x, y, bbasis, mode = best
                best_text = f"{y:.0f} {mode}{' g' if bbasis == 'graph' else ''}"
                vs_best = ratio(x, y, bbasis)
                if x and y:
                    ratios.append(x / y)
                    if x < y:
                        behind_best_peer.append((key, x, y))
            else:
                best_text, vs_best = "-", "-"
            config = f"`{r['config']}`" if r.get("config") else "none"
            out.write(f"| {r['op']} | {r['dtype']} | {r['rows']} | {r['cols']} | {inner} | "
                      f"{config} | {number(r.get('gbps'))} | {number(r.get('pct_copy'), 1)} | "
                      f"{graph} | {tuned} | {number(r.get('copy_same_bytes_graph_gbps'))} | "
                      f"{number(eager.get('gbps') if eager else None)} | "
                      f"{number(compiled.get('gbps') if compiled else None)} | "
                      f"{ratio(a, b, basis)} | {ratio(c, d, cbasis)} | "
                      f"{best_text} | {vs_best} |\n")
            if a and b and a < b:
                slower_than_eager.append((key, a, b))
            if c and d and c < d:
                slower_than_compile.append(key)
            # Split rows (issue 5): >= 80% of copy at rows 1 and 8 x 131072,
            # held against both the 1 GiB copy and the same-size copy.
            same = r.get("copy_same_bytes_graph_gbps")
            if group == "few_rows" and r["rows"] in (1, 8) and r["cols"] == 131072 and same:
                ours_graph = (t["gbps"] if has_tuned and t.get("graph_replay")
                              else r.get("graph_gbps"))
                if ours_graph:
                    split_rows.append((key, ours_graph, 100 * ours_graph / copy,
                                       100 * ours_graph / same))
            if (group == "main" and r["dtype"] != "float32" and r["cols"] >= 1024
                    and r.get("pct_copy") is not None and r["pct_copy"] < args.target_pct):
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
    check("kerntune outputs failing the fp64 check (or with no config)",
          [r for r in ours["results"] if not r["passed"]],
          lambda r: f"{r['group']} {r['op']} {r['dtype']} {r['rows']}x{r['cols']}"
                    f"x{r.get('inner', 1)}: {r.get('detail', '')}")
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
    check("split rows (1 and 8 x 131072) under 80% of the size-matched copy",
          [item for item in split_rows if item[3] < 80],
          lambda item: f"{key_text(item[0])}: {item[1]:.0f} GB/s (graph), {item[2]:.1f}% of "
                       f"the 1 GiB copy, {item[3]:.1f}% of the same-size copy",
          total=f" of {len(split_rows)}")
    check("points where kerntune's best is behind the best peer", behind_best_peer, gbps_pair,
          total=f" of {len(ratios)} compared")
    if ratios:
        geomean = math.exp(sum(math.log(x) for x in ratios) / len(ratios))
        out.write(f"- kerntune's best over the best peer: geometric mean {geomean:.2f}x, "
                  f"min {min(ratios):.2f}x, max {max(ratios):.2f}x over {len(ratios)} points\n")


if __name__ == "__main__":
    main()
