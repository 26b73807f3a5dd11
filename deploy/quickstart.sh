#!/usr/bin/env bash
# The README's first command: installs the build dependencies, builds
# kerntune, and runs its main job on the embedded defaults — `kerntune demo`
# (softmax, float16, 4096 x 1024): on the GPU with the heuristic config when
# there is one, else on the CPU reference backend; either way checked
# against the fp64 reference.
set -euo pipefail
cd "$(dirname "$0")/.."

bash deploy/install_deps.sh
cmake -S . -B build -G Ninja -DCMAKE_BUILD_TYPE=Release \
  -DCMAKE_CUDA_ARCHITECTURES="${CUDA_ARCHITECTURES:-90}" > /dev/null
cmake --build build -j"$(nproc)"
./build/client/kerntune demo "$@"
