#!/usr/bin/env python3
"""The Python client's own time per small Run, three versions side by side.

Each version runs in its own process against one kerntuned --cpu; its
queue's run() is replaced by one that serializes the request (unless the
client passed it serialized) and returns a response recorded from the real
queue, so what is timed is the client's
code alone: softmax(x, out=out) and run("softmax", x, out=out, dim=-1) on a
1 x 1024 float16 shared array, 20000 calls after 1000, rounds alternating.

    client_overhead.py SOCKET OUT.json NAME=PYTHONPATH...
"""
import json
import subprocess
import sys

CHILD = r'''
import json, sys, time
import numpy as np
sys.path.insert(0, sys.argv[2])
import kerntune
c = kerntune.Client("unix:" + sys.argv[1])
x = kerntune.shared_array(np.random.default_rng(0).standard_normal((1, 1024)).astype(np.float16))
out = kerntune.shared_empty((1, 1024), np.float16)
c.softmax(x, out=out)
q = c._queue
real, box = q.run, []
q.run = lambda *args: box.append(real(*args)) or box[-1]
c.softmax(x, out=out)
canned = box[-1]
def answer_at_once(request, timeout, data=None):
    if data is None:  # the queue serializes what the client did not
        request.SerializeToString()
    return canned
q.run = answer_at_once
times = {}
for name, call in (("softmax", lambda: c.softmax(x, out=out)),
                   ("run", lambda: c.run("softmax", x, out=out, dim=-1))):
    for _ in range(1000):
        call()
    samples = []
    for _ in range(20000):
        start = time.perf_counter_ns()
        call()
        samples.append(time.perf_counter_ns() - start)
    samples.sort()
    times[name] = {"p50_us": samples[len(samples) // 2] / 1e3, "min_us": samples[0] / 1e3}
print(json.dumps(times))
'''


def main():
    socket, out_path, versions = sys.argv[1], sys.argv[2], sys.argv[3:]
    rounds = []
    for round_ in range(3):
        for version in versions:
            name, path = version.split("=", 1)
            done = subprocess.run([sys.executable, "-c", CHILD, socket, path], check=True,
                                  capture_output=True, text=True)
            result = json.loads(done.stdout)
            result.update(version=name, round=round_ + 1)
            rounds.append(result)
            print(name, round_ + 1, result["softmax"], result["run"], flush=True)
    with open(out_path, "w") as f:
        json.dump({"shape": [1, 1024], "dtype": "float16", "calls": 20000, "rounds": rounds},
                  f, indent=1)


if __name__ == "__main__":
    main()
