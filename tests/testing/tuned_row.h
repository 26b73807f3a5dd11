// A tuning-store row of one tuned point, for the tests of the config lookup
// and its users (the daemon's cache, the in-process runtime).
#ifndef KERNTUNE_TESTS_TESTING_TUNED_ROW_H_
#define KERNTUNE_TESTS_TESTING_TUNED_ROW_H_

#include <string>

#include "db/records.h"
#include "kernels/launch_config.h"
#include "kernels/types.h"
#include "kernels/version.h"
#include "tuner/backend.h"

namespace kt::testing {

inline db::BestConfig TunedRow(kernels::Op op, kernels::DType dtype, kernels::Shape shape,
                               const kernels::LaunchConfig& config, double median_us = 10,
                               const std::string& kernel_version =
                                   kernels::kKernelLibraryVersion) {
  db::BestConfig row;
  row.point.op = std::string(kernels::OpName(op));
  row.point.dtype = std::string(kernels::DTypeName(dtype));
  row.point.rows = shape.rows;
  row.point.cols = shape.cols;
  row.point.inner = shape.inner;
  row.config = tuner::ConfigRecordOf(config);
  row.median_us = median_us;
  row.gbps = 1000;
  row.pct_of_copy = 50;
  row.heuristic_key = row.config.key;
  row.env.kernel_version = kernel_version;
  row.updated_at = 1700000000;
  return row;
}

}  // namespace kt::testing

#endif  // KERNTUNE_TESTS_TESTING_TUNED_ROW_H_
