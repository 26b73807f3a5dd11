// What a backend returns for one Run, and its counters.
#ifndef KERNTUNE_SERVER_RUN_RESULT_H_
#define KERNTUNE_SERVER_RUN_RESULT_H_

#include <cstdint>
#include <optional>
#include <string>
#include <vector>

#include "absl/strings/string_view.h"

#include "kernels/op_args.h"
#include "tuner/config_lookup.h"

namespace kt::server {

// Where a GPU backend spent one Execute, in microseconds (RunTiming's GPU
// stages); all zero on the CPU.
struct ExecuteTiming {
  double lane_wait_us = 0;
  double launch_us = 0;
  // Parts of launch_us.
  double lookup_us = 0;
  double timing_events_us = 0;
  double kernel_launch_us = 0;
  double gpu_wait_us = 0;
};

struct RunResult {
  // The bytes of the outputs returned inline, by kernels::Operand
  // (inline_output()): rows * cols * inner elements of the request's dtype
  // for the output, rows float32 values for each per-row output (inv_std
  // holds RMSNorm's 1/rms, row_scale ReduceScale's scales). Empty for
  // outputs written to client memory.
  // Empty until one is set (most Runs return none), so that a RunResult
  // costs little to make and move on the queue's path.
  std::vector<std::string> inline_outputs;
  // Empty on the CPU backend (no launch config there).
  std::optional<tuner::ConfigChoice> config;
  double kernel_time_us = 0;
  ExecuteTiming timing;
  // Answered once queued (done_event), before the GPU finished.
  bool answered_early = false;
  // The device that ran it: -1 and empty on the CPU backend. The UUID is
  // the backend's, which outlives every Run.
  int device_ordinal = -1;
  absl::string_view device_uuid;

  std::string& inline_output(kernels::Operand operand) {
    if (inline_outputs.empty()) inline_outputs.resize(kernels::kOperandCount);
    return inline_outputs[static_cast<size_t>(operand)];
  }
};

// Kernel-time counters since the backend (or device) was created.
struct BackendStats {
  int64_t kernels_timed = 0;
  double kernel_us = 0;
};

}  // namespace kt::server

#endif  // KERNTUNE_SERVER_RUN_RESULT_H_
