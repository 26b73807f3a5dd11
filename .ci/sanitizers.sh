#!/usr/bin/env bash
# CI's sanitizer jobs, run by .ci/run after the normal build and tests:
#  1. ASan + UBSan (clang): every CPU test (ctest -LE gpu), then each
#     libFuzzer harness of tests/fuzz for $KT_FUZZ_SECONDS (60) from its
#     seeds;
#  2. TSan: the daemon's tests (kt_server_test), whose service, worker
#     pools, queue poller and drains run on threads.
# The CUDA kernels compile as in the normal build (nvcc, not instrumented:
# device code cannot be, and no CPU test launches it); ccache hands the
# sanitizer builds the normal build's objects when .ci/run set it up.
# Usage: .ci/sanitizers.sh [asan|tsan]... (default: both)
set -euo pipefail
cd "$(dirname "$0")/.."
fuzz_seconds=${KT_FUZZ_SECONDS:-60}
jobs=("$@")
[ ${#jobs[@]} -gt 0 ] || jobs=(asan tsan)

if ! command -v clang++-14 > /dev/null || [ ! -d /usr/lib/llvm-14/lib/clang/14.0.6/lib/linux ]; then
  DEBIAN_FRONTEND=noninteractive apt-get install -y -qq --no-install-recommends \
    clang-14 libclang-rt-14-dev > /dev/null
fi
configure=(-G Ninja -DCMAKE_BUILD_TYPE=Release -DCMAKE_CUDA_ARCHITECTURES=90
  -DCMAKE_C_COMPILER=clang-14 -DCMAKE_CXX_COMPILER=clang++-14)
if command -v ccache > /dev/null; then
  configure+=(-DCMAKE_CUDA_COMPILER_LAUNCHER=ccache)
fi
# A finding fails the job: ASan and UBSan stop at the first (the build has
# -fno-sanitize-recover), with a stack; so does a leak. The TSan
# suppressions are for third-party code only; the file says why each is.
export ASAN_OPTIONS=detect_leaks=1:abort_on_error=1:strict_string_checks=1
export UBSAN_OPTIONS=print_stacktrace=1:halt_on_error=1
export TSAN_OPTIONS=halt_on_error=1:second_deadlock_stack=1:suppressions=$PWD/.ci/tsan.supp

took() { echo "sanitizers: $1 took $((SECONDS - $2)) s"; }

asan() {
  local start=$SECONDS
  cmake -S . -B build-asan "${configure[@]}" -DKT_SANITIZE=address,undefined -DKT_FUZZ=ON \
    > /dev/null
  cmake --build build-asan -j"$(nproc)"
  took "the ASan+UBSan build" "$start"

  start=$SECONDS
  # The soak (16 client processes for a minute) runs in the normal build's
  # tests; under ASan its timing and memory checks would measure ASan.
  ctest --test-dir build-asan -LE 'gpu|soak' --output-on-failure -j"$(nproc)"
  took "the CPU tests under ASan+UBSan" "$start"

  start=$SECONDS
  local harness corpus log artifacts=build-asan/fuzz-artifacts
  mkdir -p "$artifacts"
  for harness in build-asan/tests/fuzz/kt_*_fuzzer; do
    harness=$(basename "$harness")
    corpus=$(mktemp -d)  # new inputs; the seeds stay as committed
    log="$artifacts/$harness.log"
    local dict=()
    case "$harness" in
      kt_config_file_fuzzer) dict=(-dict=tests/fuzz/config_file.dict) ;;
      kt_run_request_fuzzer) dict=(-dict=tests/fuzz/run_request.dict) ;;
    esac
    if ! "build-asan/tests/fuzz/$harness" -max_total_time="$fuzz_seconds" -print_final_stats=1 \
        -artifact_prefix="$artifacts/$harness-" "${dict[@]}" "$corpus" \
        "tests/fuzz/corpus/$harness" > "$log" 2>&1; then
      tail -n 80 "$log" >&2
      echo "sanitizers: $harness failed; its input is in $artifacts" >&2
      return 1
    fi
    rm -rf "$corpus"
    echo "sanitizers: $harness ran $(grep -o 'number_of_executed_units: [0-9]*' "$log" \
      | grep -o '[0-9]*$') inputs in ${fuzz_seconds} s"
  done
  took "fuzzing" "$start"
}

tsan() {
  local start=$SECONDS
  cmake -S . -B build-tsan "${configure[@]}" -DKT_SANITIZE=thread > /dev/null
  cmake --build build-tsan -j"$(nproc)" --target kt_server_test
  took "the TSan build" "$start"
  start=$SECONDS
  # Left out: the tests that shrink shared memory under the daemon. Its
  # SIGBUS guard jumps out of the faulting copy, and when the fault comes
  # inside TSan's memcpy interceptor the jump leaves TSan's own lock held:
  # the next allocation on that thread deadlocks (seen here). They run under
  # ASan and in the normal build.
  build-tsan/tests/server/kt_server_test --gtest_filter="-ClientMemoryTest.CopiesFromAShrunk*:\
RunQueueTest.ARegionTruncated*:ServiceQueueTest.HostileQueueStates*"
  took "kt_server_test under TSan" "$start"
}

for job in "${jobs[@]}"; do
  "$job"
done
