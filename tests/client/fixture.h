// The CLI tests' fixture: a scratch directory and a tuning store built
// through TuningStore with two GPU SKUs, a run on each, and points whose
// candidates cover every status (measured, failed check, pruned, skipped for
// occupancy), one of them measured by an older kernel library (stale).
#ifndef KERNTUNE_TESTS_CLIENT_FIXTURE_H_
#define KERNTUNE_TESTS_CLIENT_FIXTURE_H_

#include <cstdint>
#include <string>

#include "absl/status/status.h"
#include "db/records.h"
#include "tests/testing/scoped_temp_dir.h"

namespace kt::client::testing {

using ::kt::testing::ScopedTempDir;

db::GpuSku H100Sku();  // gpu id 1 in the fixture
db::GpuSku A100Sku();  // gpu id 2

inline constexpr char kStaleKernelVersion[] = "0.0.9+k0";
inline constexpr int64_t kFixtureTime = 1714564800;  // 2024-05-01 12:00:00 UTC

// Writes the fixture store at `path`:
//   H100 (id 1), run 1:
//     softmax     float16  49152x4096  7 candidates: 4 measured (one of them
//                                      incorrect), 1 failed_check, 1 pruned,
//                                      1 skipped_occupancy
//     softmax     float32  49152x1024  3 measured
//     log_softmax float16   1024x128   3 measured, graph replay
//     layer_norm  bfloat16 49152x4096  3 measured, kernel version stale
//   A100 (id 2), run 2:
//     softmax     float16  49152x4096  3 measured
//     layer_norm  float32  49152x2048  3 measured
// Every config is legal on its SKU (kernels::EnumerateConfigs on
// kernels::DescribeSku), so an export imports without a skip.
absl::Status BuildFixtureStore(const std::string& path);

std::string ReadFile(const std::string& path);
void WriteFile(const std::string& path, const std::string& contents);

}  // namespace kt::client::testing

#endif  // KERNTUNE_TESTS_CLIENT_FIXTURE_H_
