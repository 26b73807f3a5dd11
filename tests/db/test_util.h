// Shared helpers of the db tests: a scratch directory, sample records, and raw
// SQLite access for building fixtures and damaging files on purpose.
#ifndef KERNTUNE_TESTS_DB_TEST_UTIL_H_
#define KERNTUNE_TESTS_DB_TEST_UTIL_H_

#include <cstdint>
#include <string>
#include <vector>

#include "absl/status/status.h"
#include "absl/status/statusor.h"
#include "db/records.h"
#include "tests/testing/scoped_temp_dir.h"

namespace kt::db::testing {

using ::kt::testing::ScopedTempDir;

GpuSku H100Sku();
GpuSku A100Sku();
Environment TestEnvironment(const std::string& kernel_version = "0.1.0+k1");
TuningRun SampleRun(int64_t gpu_id);
PointKey SamplePoint(int64_t gpu_id, int64_t cols,
                     const std::string& op = "softmax",
                     const std::string& dtype = "float16",
                     int64_t rows = 49152);

// `count` candidates of `point`: the first count-1 measured with times
// growing from 10 us (reverse order, so ordering is exercised), the last one
// skipped for occupancy (no time).
std::vector<Candidate> SampleCandidates(int64_t run_id, const PointKey& point,
                                        int count);
// The best row of `point` chosen among SampleCandidates (the fastest).
BestConfig SampleBest(int64_t run_id, const PointKey& point,
                      const std::string& kernel_version = "0.1.0+k1");

// Raw SQLite on a file, bypassing TuningStore (fixtures, inspection).
absl::Status ExecSql(const std::string& db_path, const std::string& sql);
absl::StatusOr<std::string> QueryText(const std::string& db_path,
                                      const std::string& sql);
std::string ReadFileOrDie(const std::string& path);
void WriteFileOrDie(const std::string& path, const std::string& contents);

}  // namespace kt::db::testing

#endif  // KERNTUNE_TESTS_DB_TEST_UTIL_H_
