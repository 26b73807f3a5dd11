#!/usr/bin/env bash
# Installs everything kerntune builds and tests with on Debian 12, from
# Debian's own packages. The CUDA 13 toolkit is expected at /usr/local/cuda
# (NVIDIA's packages; Debian ships none that new).
set -euo pipefail

if [ "$(id -u)" -ne 0 ]; then
  exec sudo --preserve-env=DEBIAN_FRONTEND "$0" "$@"
fi
if [ ! -x /usr/local/cuda/bin/nvcc ]; then
  echo "install_deps: the CUDA 13 toolkit is missing (/usr/local/cuda/bin/nvcc)." >&2
  echo "              Install it from NVIDIA's Debian 12 repository first." >&2
  exit 1
fi

export DEBIAN_FRONTEND=noninteractive
apt-get update -qq
apt-get install -y -qq --no-install-recommends \
  build-essential cmake ninja-build file \
  libabsl-dev libgtest-dev libgmock-dev libbenchmark-dev libsqlite3-dev sqlite3 \
  libgrpc++-dev protobuf-compiler-grpc libprotobuf-dev protobuf-compiler \
  prometheus-cpp-dev python3-prometheus-client \
  python3 python3-grpcio python3-protobuf python3-numpy python3-venv python3-yaml \
  python3-matplotlib python3-torch \
  systemd openssl > /dev/null
echo "install_deps: done"
