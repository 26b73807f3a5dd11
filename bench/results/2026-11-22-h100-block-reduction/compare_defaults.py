# Default (heuristic) configs of two kt_kernel_bench builds, two runs each:
# the faster run of each side per point (graph figures where present).
import json, statistics, sys
r = sys.argv[1]
def load(f):
    d = json.load(open(f))
    return {(x['group'], x['op'], x['dtype'], x['rows'], x['cols'], x.get('inner', 1)): x for x in d['results']}
def us(x):
    return x.get('graph_median_us') or x.get('median_us')
b = [load(f"{r}/default_before_{i}.json") for i in (1, 2)]
a = [load(f"{r}/default_after_{i}.json") for i in (1, 2)]
ratios, same_config = [], []
for k in sorted(b[0]):
    if k not in a[0] or us(b[0][k]) is None or us(a[0][k]) is None:
        continue
    bu = min(us(x[k]) for x in b)
    au = min(us(x[k]) for x in a)
    ratio = bu / au
    ratios.append(ratio)
    if b[0][k]['config'] == a[0][k]['config']:
        same_config.append(ratio)
    print("%-9s %-22s %-8s %7d x %6d  before %-36s %9.2f us  after %-40s %9.2f us  x%.3f" % (
        k[0], k[1], k[2], k[3], k[4], b[0][k]['config'], bu, a[0][k]['config'], au, ratio))
def line(name, xs):
    print("%s: geomean x%.3f, min x%.3f, max x%.3f over %d points" % (
        name, statistics.geometric_mean(xs), min(xs), max(xs), len(xs)))
line("all points (after over before)", ratios)
line("points whose default config did not change (the kernel change alone)", same_config)
