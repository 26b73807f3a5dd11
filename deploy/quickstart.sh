#!/usr/bin/env bash
# The README's first command: installs the build dependencies (through
# sudo unless run as root), builds kerntune, and runs its main job on the
# embedded defaults; its arguments go to `kerntune demo` (--op, --dtype,
# --rows, --cols, --cpu):
#  1. `kerntune demo` (softmax, float16, 4096 x 1024) on this machine: on
#     the GPU with the heuristic config when there is one, else on the CPU
#     reference backend; checked against the fp64 reference;
#  2. the daemon, `kerntuned`, on the default tuning database
#     ($KERNTUNE_DB, else ~/.local/share/kerntune/tuning.db) and a socket in
#     a temporary directory, sent one request by `kerntune run` (a CUDA IPC
#     buffer when there is a GPU, else inline) and asked `kerntune status`;
#     then stopped.
set -euo pipefail
cd "$(dirname "$0")/.."

bash deploy/install_deps.sh
cmake -S . -B build -G Ninja -DCMAKE_BUILD_TYPE=Release \
  -DCMAKE_CUDA_ARCHITECTURES="${CUDA_ARCHITECTURES:-90}" > /dev/null
cmake --build build -j"$(nproc)"
./build/client/kerntune demo "$@"

echo
run_dir=$(mktemp -d)
socket="$run_dir/kerntune.sock"
./build/server/kerntuned --socket="$socket" > "$run_dir/kerntuned.log" 2>&1 &
daemon=$!
trap 'kill -TERM "$daemon" 2>/dev/null; wait "$daemon" 2>/dev/null; rm -rf "$run_dir"' EXIT
for _ in $(seq 100); do [ -S "$socket" ] && break; sleep 0.1; done
head -1 "$run_dir/kerntuned.log"
./build/client/kerntune run softmax --server="unix:$socket" --dtype=float16 --rows=4096 --cols=1024
./build/client/kerntune status --server="unix:$socket"
