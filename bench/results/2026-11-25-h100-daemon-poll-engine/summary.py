import json, os, sys
print("%-24s %8s %8s %9s %8s %8s %8s %8s %8s %7s %7s %7s %7s %7s" % (
    "config", "run_p50", "echo_p50", "overhead", "handler", "launch", "gpuwait", "outside",
    "cfg_p50", "sync%", "pipeN%", "rps1", "rps4", "rps16"))
for path in sys.argv[1:]:
    try:
        d = json.load(open(path))
    except Exception as e:
        print("%-24s (no results: %s)" % (os.path.basename(path), e)); continue
    lat, bw = d["latency"], d["bandwidth"]
    rps = {t["clients"]: t["runs_per_s"] for t in d.get("throughput", [])}
    s = lat["server"]
    print("%-24s %8.1f %8.1f %9.1f %8.1f %8.1f %8.1f %8.1f %8.1f %7.1f %7.1f %7.0f %7.0f %7.0f" % (
        os.path.basename(path)[:-5], lat["run_p50_us"], lat["echo_p50_us"], lat["overhead_p50_us"],
        s["handler_p50_us"], s["kernel_launch_p50_us"], s["gpu_wait_p50_us"],
        s["outside_handler_p50_us"], lat["getconfig_p50_us"], bw["sync_pct_of_kernel"],
        bw["pipelined_deep"]["pct_of_kernel"], rps.get(1, 0), rps.get(4, 0), rps.get(16, 0)))
