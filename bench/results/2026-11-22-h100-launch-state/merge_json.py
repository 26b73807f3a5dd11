# Merges torch_bench JSON files of one run into one (results concatenated).
import json, sys
out, paths = sys.argv[1], sys.argv[2:]
merged = None
for p in paths:
    try: d = json.load(open(p))
    except Exception as e: print(f"skip {p}: {e}"); continue
    if merged is None: merged = d
    else: merged["results"] += d["results"]
if merged: json.dump(merged, open(out, "w"))
