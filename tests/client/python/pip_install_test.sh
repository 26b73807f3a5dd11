#!/usr/bin/env bash
# The Python client installs with one command: `pip install PACKAGE_DIR`
# (client/python of the source tree, or a bundle's python/) into a fresh
# venv, with no package index (--no-index: the build backend needs nothing,
# and grpcio, protobuf and numpy come from the system's site packages).
# Then, from a directory outside the tree and without PYTHONPATH, the
# installed package must be the one imported, carry its generated protobuf
# modules, answer `python3 -m kerntune status` from a kerntuned --cpu (text
# and JSON, exit 0), run a softmax checked against NumPy, and exit 1 when no
# daemon listens.
#   pip_install_test.sh PYTHON PACKAGE_DIR KERNTUNED
set -euo pipefail
python=$1 package=$(realpath "$2") kerntuned=$(realpath "$3")

"$python" -c "import grpc, google.protobuf, numpy" 2> /dev/null || {
  echo "skipped: $python lacks grpc, protobuf or numpy (python3-grpcio python3-protobuf python3-numpy)"
  exit 77
}
work=$(mktemp -d)
daemon=""
cleanup() {
  if [ -n "$daemon" ]; then kill -TERM "$daemon" 2> /dev/null || true; wait "$daemon" || true; fi
  rm -rf "$work"
}
trap cleanup EXIT
unset PYTHONPATH
export PIP_DISABLE_PIP_VERSION_CHECK=1 PYTHONDONTWRITEBYTECODE=1

"$python" -m venv --system-site-packages "$work/venv"
venv_python="$work/venv/bin/python3"
"$venv_python" -m pip install --quiet --no-index "$package"
echo "ok: pip install --no-index $package"

cd "$work"
"$venv_python" - "$work/venv" <<'PY'
import os, sys
import kerntune
from kerntune.v1 import kerntune_pb2, kerntune_pb2_grpc
venv = os.path.realpath(sys.argv[1])
where = os.path.realpath(kerntune.__file__)
assert where.startswith(venv + os.sep), "kerntune imported from %s, not the venv" % where
assert kerntune.__version__ and "@" not in kerntune.__version__, kerntune.__version__
assert hasattr(kerntune_pb2_grpc, "KernTuneStub")
print("ok: kerntune %s from %s" % (kerntune.__version__, os.path.dirname(where)))
PY

socket="$work/run/kerntune.sock"
mkdir -p "$work/run"
"$kerntuned" --cpu --socket="$socket" --db="$work/missing.db" > "$work/kerntuned.log" 2>&1 &
daemon=$!
for _ in $(seq 100); do [ -S "$socket" ] && break; sleep 0.1; done
[ -S "$socket" ] || { cat "$work/kerntuned.log"; echo "FAIL: kerntuned made no socket"; exit 1; }

"$venv_python" -m kerntune status --server="unix:$socket" | tee "$work/status.txt"
grep -q '^backend: *cpu' "$work/status.txt" || { echo "FAIL: status shows no cpu backend"; exit 1; }
"$venv_python" -m kerntune status --server="$socket" --json > "$work/status.json"
"$venv_python" - "$work/status.json" "$socket" <<'PY'
import json, sys
status = json.load(open(sys.argv[1]))
assert status["backend"] == "cpu", status
assert status["target"] == "unix:" + sys.argv[2], status["target"]
print("ok: python3 -m kerntune status --json")
PY
"$venv_python" - "$socket" <<'PY'
import sys
import numpy as np
import kerntune
x = np.random.default_rng(1).standard_normal((8, 300)).astype(np.float32)
with kerntune.Client(sys.argv[1]) as client:
    y = client.softmax(x)
e = np.exp(x - x.max(axis=1, keepdims=True))
np.testing.assert_allclose(y, e / e.sum(axis=1, keepdims=True), rtol=1e-5, atol=1e-7)
print("ok: softmax through the installed package")
PY

kill -TERM "$daemon"
wait "$daemon"
daemon=""
if "$venv_python" -m kerntune status --server="unix:$socket" --timeout=2 2> "$work/err.txt"; then
  echo "FAIL: status exited 0 with no daemon"; exit 1
fi
grep -q "kerntune: unix:$socket" "$work/err.txt" || { cat "$work/err.txt"; echo "FAIL: no error naming the socket"; exit 1; }
echo "ok: status exits 1 naming the socket when no daemon listens"
echo "pip_install_test: passed"
