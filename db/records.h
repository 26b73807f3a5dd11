// Plain records the tuning store reads and writes. They mirror the kernel
// library's vocabulary as strings and ints (op "softmax", impl "warp", config
// key "warp/b128/p8/g32/r1/w0") because db/ must not depend on kernels/; the
// tuner converts with kernels::OpName / ImplName / ConfigKey.
#ifndef KERNTUNE_DB_RECORDS_H_
#define KERNTUNE_DB_RECORDS_H_

#include <cstdint>
#include <optional>
#include <string>

#include "absl/status/statusor.h"
#include "absl/strings/string_view.h"

namespace kt::db {

// What makes two GPUs interchangeable for tuning: results are shared by
// every device with the same SKU key.
struct GpuSku {
  std::string name;  // cudaDeviceProp::name, e.g. "NVIDIA H100 80GB HBM3"
  int cc_major = 0;
  int cc_minor = 0;
  int sm_count = 0;
  int64_t total_memory_bytes = 0;

  friend bool operator==(const GpuSku& a, const GpuSku& b) {
    return a.name == b.name && a.cc_major == b.cc_major &&
           a.cc_minor == b.cc_minor && a.sm_count == b.sm_count &&
           a.total_memory_bytes == b.total_memory_bytes;
  }
};

struct Gpu {
  int64_t id = 0;
  GpuSku sku;
};

// A GPU with how much the store knows about it (`kerntune gpus`).
struct GpuSummary {
  Gpu gpu;
  int64_t runs = 0;
  int64_t best_configs = 0;
  int64_t candidates = 0;
};

// The software a result was measured with. A result whose kernel_version
// differs from the running library is stale. Versions as the CUDA API gives
// them (cudaDriverGetVersion: 12040 = 12.4); 0 / "" = unknown (rows migrated
// from schema v1).
struct Environment {
  int driver_version = 0;
  int runtime_version = 0;
  std::string kernel_version;  // e.g. "0.1.0+k1"

  friend bool operator==(const Environment& a, const Environment& b) {
    return a.driver_version == b.driver_version &&
           a.runtime_version == b.runtime_version &&
           a.kernel_version == b.kernel_version;
  }
};

// One tuning problem on one GPU SKU: kernels::Shape as stored. inner > 1 is
// a middle-axis problem, an (outer = rows, dim = cols, inner) tensor reduced
// along cols; 1 for every last-axis problem (and for rows written before
// schema v3).
struct PointKey {
  int64_t gpu_id = 0;
  std::string op;     // "softmax", "log_softmax", "layer_norm", "rms_norm", ...
  std::string dtype;  // "float32", "float16", "bfloat16"
  int64_t rows = 0;
  int64_t cols = 0;
  int64_t inner = 1;

  friend bool operator==(const PointKey& a, const PointKey& b) {
    return a.gpu_id == b.gpu_id && a.op == b.op && a.dtype == b.dtype &&
           a.rows == b.rows && a.cols == b.cols && a.inner == b.inner;
  }
  friend bool operator!=(const PointKey& a, const PointKey& b) {
    return !(a == b);
  }
};

// "softmax float16 49152x4096"; "softmax float16 512x896x48" when inner > 1:
// a point as logs, errors and the CLI name it.
std::string DescribePoint(absl::string_view op, absl::string_view dtype, int64_t rows,
                          int64_t cols, int64_t inner = 1);

// kernels::LaunchConfig as stored, plus its ConfigKey.
struct ConfigRecord {
  // "warp", "block_smem", "block_uncached", "split_row", "axis", "split_grid",
  // "split_two_pass", "block_regs", "split_regs", "block_reread"
  std::string impl;
  int block_size = 0;
  int pack_size = 0;
  int thread_group_width = 0;
  int rows_per_access = 0;
  int grid_waves = 0;
  std::string key;  // kernels::ConfigKey, e.g. "warp/b128/p8/g32/r1/w0"
  // Blocks sharing one row (split_row's cluster size, split_grid's and
  // split_two_pass's blocks per row); 1 for every other impl and for rows written before schema v3. Last so that the older
  // brace initialisers keep meaning what they did.
  int split = 1;

  friend bool operator==(const ConfigRecord& a, const ConfigRecord& b) {
    return a.impl == b.impl && a.block_size == b.block_size &&
           a.pack_size == b.pack_size &&
           a.thread_group_width == b.thread_group_width &&
           a.rows_per_access == b.rows_per_access &&
           a.grid_waves == b.grid_waves && a.key == b.key &&
           a.split == b.split;
  }
};

enum class RunStatus { kRunning, kFinished, kInterrupted };
absl::string_view RunStatusName(RunStatus status);  // "running", ...
absl::StatusOr<RunStatus> ParseRunStatus(absl::string_view name);

// One `kerntune tune` invocation: who, when, which grid, how far it got.
struct TuningRun {
  int64_t id = 0;  // assigned by CreateRun
  int64_t gpu_id = 0;
  int64_t started_at = 0;                  // unix seconds
  std::optional<int64_t> finished_at;      // unix seconds; empty while running
  std::string host;
  std::string user;
  std::string command_line;
  std::string grid;  // the grid's description, e.g. "ops=softmax rows=49152 ..."
  RunStatus status = RunStatus::kRunning;
  int64_t points_total = 0;
  int64_t points_done = 0;  // points this run committed (WritePoint bumps it)
  std::optional<double> copy_gbps;  // D2D copy roofline measured by the run
  Environment env;
};

enum class CandidateStatus {
  kMeasured,          // timed (correct or not: see Candidate::correct)
  kSkippedOccupancy,  // 0 resident blocks per SM: cannot launch
  kFailedCheck,       // output differed from the reference
  kPruned,            // timing stopped early: clearly slower than the best
  kLaunchError,       // the launch returned an error (message says which)
};
absl::string_view CandidateStatusName(CandidateStatus status);
absl::StatusOr<CandidateStatus> ParseCandidateStatus(absl::string_view name);

// One config measured (or ruled out) for one point in one run. Its
// environment is its run's.
struct Candidate {
  int64_t id = 0;  // assigned on insert
  int64_t run_id = 0;
  PointKey point;
  ConfigRecord config;
  CandidateStatus status = CandidateStatus::kMeasured;
  std::string message;  // why it was skipped / failed; may be empty
  int occupancy = 0;    // resident blocks per SM
  // Times in microseconds; empty when not timed. The spread is the tuner's
  // choice of low/high percentile of the repetitions (README says which).
  std::optional<double> median_us;
  std::optional<double> spread_low_us;
  std::optional<double> spread_high_us;
  int repetitions = 0;
  std::optional<double> gbps;
  std::optional<double> pct_of_copy;  // gbps / run copy bandwidth * 100
  bool graph_replay = false;          // timed under CUDA-graph replay
  bool correct = false;               // passed the reference check
};

// The chosen config of one point, the one the daemon launches.
struct BestConfig {
  PointKey point;
  ConfigRecord config;
  double median_us = 0;
  std::optional<double> spread_low_us;
  std::optional<double> spread_high_us;
  double gbps = 0;
  double pct_of_copy = 0;
  bool graph_replay = false;
  std::string heuristic_key;  // kernels::HeuristicConfig's key
  std::optional<double> heuristic_us;  // empty when it could not be timed
  std::optional<int64_t> run_id;  // empty for rows imported from a file
  Environment env;
  int64_t updated_at = 0;  // unix seconds

  // heuristic time / tuned time (> 1: the tuned config is faster).
  std::optional<double> Speedup() const;
};

// Filters of ListBestConfigs; an empty field matches everything.
struct BestConfigFilter {
  std::optional<int64_t> gpu_id;
  std::optional<std::string> gpu_name;  // case-insensitive substring
  std::optional<std::string> op;
  std::optional<std::string> dtype;
  std::optional<int64_t> rows;
  std::optional<int64_t> cols;
  std::optional<int64_t> inner;
};

}  // namespace kt::db

#endif  // KERNTUNE_DB_RECORDS_H_
