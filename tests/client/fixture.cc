// The CLI tests' fixture store.
#include "tests/client/fixture.h"

#include <unistd.h>

#include <cstdlib>
#include <filesystem>
#include <fstream>
#include <memory>
#include <sstream>
#include <vector>

#include "absl/strings/str_cat.h"
#include "db/tuning_store.h"
#include "tuner/backend.h"
#include "kernels/device_info.h"
#include "kernels/launch_config.h"
#include "kernels/op_args.h"
#include "kernels/types.h"
#include "kernels/version.h"

namespace kt::client::testing {
namespace {

#define FIXTURE_ASSIGN_OR_RETURN(lhs, expr) \
  auto lhs##_or = (expr);                   \
  if (!lhs##_or.ok()) return lhs##_or.status(); \
  auto lhs = *std::move(lhs##_or)

struct CandidateSpec {
  db::CandidateStatus status;
  std::optional<double> median_us;  // empty: not timed
  bool correct = true;
  std::string message;
};

db::Environment Env(const std::string& kernel_version) {
  return {12040, 12030, kernel_version};
}

// Writes one point: candidates from the legal configs of the point, in the
// order of `specs`; the best is the fastest correct measured one.
absl::Status WriteFixturePoint(db::TuningStore& store, int64_t run_id,
                               int64_t gpu_id, const db::GpuSku& sku,
                               const std::string& op_name,
                               const std::string& dtype_name, int64_t rows,
                               int64_t cols,
                               const std::vector<CandidateSpec>& specs,
                               const std::string& kernel_version,
                               bool graph_replay = false) {
  FIXTURE_ASSIGN_OR_RETURN(op, kernels::ParseOp(op_name));
  FIXTURE_ASSIGN_OR_RETURN(dtype, kernels::ParseDType(dtype_name));
  FIXTURE_ASSIGN_OR_RETURN(
      device, kernels::DescribeSku(sku.name, sku.cc_major, sku.cc_minor,
                                   sku.sm_count, sku.total_memory_bytes));
  const kernels::Shape shape{rows, cols};
  FIXTURE_ASSIGN_OR_RETURN(configs,
                           kernels::EnumerateConfigs(op, dtype, shape, device));
  FIXTURE_ASSIGN_OR_RETURN(heuristic,
                           kernels::HeuristicConfig(op, dtype, shape, device));
  if (configs.size() < specs.size()) {
    return absl::InternalError("fixture: not enough legal configs");
  }
  const double bytes = static_cast<double>(
      kernels::MinimumBytesMoved(op, dtype, shape, op == kernels::Op::kLayerNorm,
                                 op == kernels::Op::kLayerNorm, false));
  const db::PointKey point{gpu_id, op_name, dtype_name, rows, cols};
  std::vector<db::Candidate> candidates;
  const db::Candidate* best = nullptr;
  // Spread configs over the enumerated list so impls differ.
  const size_t stride = configs.size() / specs.size();
  for (size_t i = 0; i < specs.size(); ++i) {
    const kernels::LaunchConfig& config = configs[i * stride];
    db::Candidate candidate;
    candidate.run_id = run_id;
    candidate.point = point;
    candidate.config = tuner::ConfigRecordOf(config);
    candidate.status = specs[i].status;
    candidate.message = specs[i].message;
    candidate.occupancy =
        specs[i].status == db::CandidateStatus::kSkippedOccupancy ? 0 : 8;
    candidate.median_us = specs[i].median_us;
    if (specs[i].median_us) {
      candidate.spread_low_us = *specs[i].median_us * 0.98;
      candidate.spread_high_us = *specs[i].median_us * 1.03;
      candidate.repetitions = 50;
      candidate.gbps = bytes / (*specs[i].median_us * 1e3);
      candidate.pct_of_copy = *candidate.gbps / 3000.0 * 100.0;
    }
    candidate.graph_replay = graph_replay;
    candidate.correct = specs[i].correct;
    candidates.push_back(candidate);
  }
  for (const db::Candidate& candidate : candidates) {
    if (candidate.status == db::CandidateStatus::kMeasured && candidate.correct &&
        (best == nullptr || *candidate.median_us < *best->median_us)) {
      best = &candidate;
    }
  }
  db::BestConfig row;
  row.point = point;
  row.config = best->config;
  row.median_us = *best->median_us;
  row.spread_low_us = best->spread_low_us;
  row.spread_high_us = best->spread_high_us;
  row.gbps = *best->gbps;
  row.pct_of_copy = *best->pct_of_copy;
  row.graph_replay = graph_replay;
  row.heuristic_key = kernels::ConfigKey(heuristic);
  row.heuristic_us = *best->median_us * 1.25;
  row.run_id = run_id;
  row.env = Env(kernel_version);
  row.updated_at = kFixtureTime;
  return store.WritePoint(row, candidates);
}

absl::StatusOr<int64_t> CreateFixtureRun(db::TuningStore& store, int64_t gpu_id) {
  db::TuningRun run;
  run.gpu_id = gpu_id;
  run.started_at = kFixtureTime - 600;
  run.host = "fixture-host";
  run.user = "tester";
  run.command_line = "kerntune tune --ops=softmax";
  run.grid = "fixture";
  run.points_total = 4;
  run.copy_gbps = 3000.0;
  run.env = Env(kernels::kKernelLibraryVersion);
  return store.CreateRun(run);
}

}  // namespace

db::GpuSku H100Sku() { return {"NVIDIA H100 80GB HBM3", 9, 0, 132, 85520809984}; }
db::GpuSku A100Sku() { return {"NVIDIA A100-SXM4-80GB", 8, 0, 108, 85899345920}; }

absl::Status BuildFixtureStore(const std::string& path) {
  db::OpenOptions options;
  options.create_if_missing = true;
  FIXTURE_ASSIGN_OR_RETURN(store, db::TuningStore::Open(path, options));
  FIXTURE_ASSIGN_OR_RETURN(h100, store->UpsertGpu(H100Sku()));
  FIXTURE_ASSIGN_OR_RETURN(a100, store->UpsertGpu(A100Sku()));
  FIXTURE_ASSIGN_OR_RETURN(h100_run, CreateFixtureRun(*store, h100));
  FIXTURE_ASSIGN_OR_RETURN(a100_run, CreateFixtureRun(*store, a100));
  const std::string current = kernels::kKernelLibraryVersion;
  using S = db::CandidateStatus;
  const std::vector<CandidateSpec> three = {
      {S::kMeasured, 30.0, true, ""},
      {S::kMeasured, 20.0, true, ""},
      {S::kMeasured, 25.0, true, ""}};

  absl::Status status = WriteFixturePoint(
      *store, h100_run, h100, H100Sku(), "softmax", "float16", 49152, 4096,
      {
          {S::kSkippedOccupancy, std::nullopt, false, "0 resident blocks per SM"},
          {S::kMeasured, 41.5, true, ""},
          {S::kPruned, 90.0, true, "stopped after 5 repetitions"},
          {S::kMeasured, 38.25, true, ""},
          {S::kFailedCheck, std::nullopt, false, "max error 0.5 at row 7"},
          {S::kMeasured, 35.0, false, "incorrect"},
          {S::kMeasured, 39.0, true, ""},
      },
      current);
  if (status.ok()) {
    status = WriteFixturePoint(*store, h100_run, h100, H100Sku(), "softmax",
                               "float32", 49152, 1024, three, current);
  }
  if (status.ok()) {
    status = WriteFixturePoint(*store, h100_run, h100, H100Sku(), "log_softmax",
                               "float16", 1024, 128, three, current,
                               /*graph_replay=*/true);
  }
  if (status.ok()) {
    status = WriteFixturePoint(*store, h100_run, h100, H100Sku(), "layer_norm",
                               "bfloat16", 49152, 4096, three,
                               kStaleKernelVersion);
  }
  if (status.ok()) {
    status = WriteFixturePoint(*store, a100_run, a100, A100Sku(), "softmax",
                               "float16", 49152, 4096, three, current);
  }
  if (status.ok()) {
    status = WriteFixturePoint(*store, a100_run, a100, A100Sku(), "layer_norm",
                               "float32", 49152, 2048, three, current);
  }
  return status;
}

std::string ReadFile(const std::string& path) {
  std::ifstream in(path, std::ios::binary);
  std::ostringstream contents;
  contents << in.rdbuf();
  return contents.str();
}

void WriteFile(const std::string& path, const std::string& contents) {
  std::ofstream(path, std::ios::binary) << contents;
}

}  // namespace kt::client::testing

#undef FIXTURE_ASSIGN_OR_RETURN  // local to this file, also in a unity batch
