// Fuzzes opening a damaged tuning store: the input is a whole SQLite file
// (the seeds are valid stores, which the fuzzer mutates). The harness opens
// it as the CLI and the daemon do, read-only without the integrity check
// and read-write with it (which migrates old schemas), reads everything
// they read, and writes once. Errors are expected; crashes and undefined
// behaviour are not.
#include <stdlib.h>

#include <cstddef>
#include <cstdint>
#include <cstdio>
#include <filesystem>
#include <fstream>
#include <memory>
#include <string>
#include <vector>

#include "db/records.h"
#include "db/tuning_store.h"
#include "tests/fuzz/fuzz_check.h"

namespace kt::fuzz {
namespace {

// At most this many rows of each listing are read one by one.
constexpr size_t kRowsFollowed = 8;

const std::string& StorePath() {
  static const std::string* path = [] {
    const std::string base = std::filesystem::exists("/dev/shm") ? "/dev/shm" : "/tmp";
    std::string dir = base + "/kt-fuzz-tuning-store-XXXXXX";
    if (mkdtemp(dir.data()) == nullptr) PropertyFailed("mkdtemp", dir);
    static const std::string kept = dir;
    std::atexit([] { std::filesystem::remove_all(kept); });
    return new std::string(dir + "/tuning.db");
  }();
  return *path;
}

// Everything `kerntune configs list/show`, `kerntune gpus` and the daemon
// read from a store; errors are the answers expected of a damaged file.
void ReadAll(db::TuningStore& store) {
  (void)store.DataVersion();
  if (absl::StatusOr<std::vector<db::GpuSummary>> gpus = store.ListGpus(); gpus.ok()) {
    for (size_t i = 0; i < gpus->size() && i < kRowsFollowed; ++i) {
      if (absl::StatusOr<db::Gpu> gpu = store.GetGpu((*gpus)[i].gpu.id); gpu.ok()) {
        (void)store.BestConfigsForSku(gpu->sku);
        (void)store.FindGpu(gpu->sku);
      }
    }
  }
  if (absl::StatusOr<std::vector<db::TuningRun>> runs = store.ListRuns(std::nullopt);
      runs.ok()) {
    for (size_t i = 0; i < runs->size() && i < kRowsFollowed; ++i) {
      (void)store.GetRun((*runs)[i].id);
    }
  }
  if (absl::StatusOr<std::vector<db::BestConfig>> best = store.ListBestConfigs({}); best.ok()) {
    for (size_t i = 0; i < best->size() && i < kRowsFollowed; ++i) {
      const db::PointKey& point = (*best)[i].point;
      (void)store.GetBestConfig(point);
      (void)store.ListCandidates(point, std::nullopt);
      (void)store.IsPointComplete(point, (*best)[i].env.kernel_version);
    }
  }
}

// One entry as `kerntune configs import` writes it.
void WriteOnce(db::TuningStore& store) {
  const db::GpuSku sku{"NVIDIA H100 80GB HBM3", 9, 0, 132, 85017493504};
  db::BestConfig row;
  row.point = {0, "softmax", "float16", 4096, 1024, 1};
  row.config = {"warp", 128, 8, 32, 1, 0, "warp/b128/p8/g32/r1/w0", 1};
  row.median_us = 10;
  row.env = {13000, 13000, "0.1.0+k9"};
  (void)store.ImportBestConfigs(sku, {row});
}

}  // namespace
}  // namespace kt::fuzz

extern "C" int LLVMFuzzerTestOneInput(const uint8_t* data, size_t size) {
  using namespace kt;  // NOLINT: the harness's own namespace
  const std::string& path = fuzz::StorePath();
  for (const char* suffix : {"", "-wal", "-shm", "-journal"}) {
    std::filesystem::remove(path + suffix);
  }
  {
    std::ofstream file(path, std::ios::binary);
    file.write(reinterpret_cast<const char*>(data), static_cast<std::streamsize>(size));
  }

  db::OpenOptions read_only;
  read_only.read_only = true;
  read_only.check_integrity = false;
  read_only.busy_timeout_ms = 0;
  if (absl::StatusOr<std::unique_ptr<db::TuningStore>> store =
          db::TuningStore::Open(path, read_only);
      store.ok()) {
    fuzz::ReadAll(**store);
  }

  db::OpenOptions read_write;
  read_write.busy_timeout_ms = 0;
  if (absl::StatusOr<std::unique_ptr<db::TuningStore>> store =
          db::TuningStore::Open(path, read_write);
      store.ok()) {
    fuzz::ReadAll(**store);
    fuzz::WriteOnce(**store);
    (void)(*store)->CheckIntegrity();
  }
  return 0;
}
