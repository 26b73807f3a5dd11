// fp64 CPU reference (reference.h): plain two-pass formulas in double.
#include "kernels/reference.h"

#include <algorithm>
#include <cmath>
#include <limits>
#include <thread>
#include <vector>

#include "absl/strings/str_cat.h"
#include "kernels/host_dtype.h"

namespace kt::kernels {

void ReferenceRow(Op op, int64_t cols, const double* x, const double* gamma,
                  const double* beta, double epsilon, double* y, double* mean,
                  double* inv_std) {
  if (op == Op::kLayerNorm) {
    double sum = 0;
    for (int64_t c = 0; c < cols; ++c) sum += x[c];
    const double row_mean = sum / static_cast<double>(cols);
    double squares = 0;
    for (int64_t c = 0; c < cols; ++c) squares += (x[c] - row_mean) * (x[c] - row_mean);
    const double row_inv_std = 1.0 / std::sqrt(squares / static_cast<double>(cols) + epsilon);
    for (int64_t c = 0; c < cols; ++c) {
      double v = (x[c] - row_mean) * row_inv_std;
      if (gamma != nullptr) v *= gamma[c];
      if (beta != nullptr) v += beta[c];
      y[c] = v;
    }
    if (mean != nullptr) *mean = row_mean;
    if (inv_std != nullptr) *inv_std = row_inv_std;
    return;
  }
  // max ignores NaN like fmax; NaN still reaches every output through the sum.
  double row_max = -std::numeric_limits<double>::infinity();
  for (int64_t c = 0; c < cols; ++c) row_max = std::fmax(row_max, x[c]);
  double sum = 0;
  for (int64_t c = 0; c < cols; ++c) sum += std::exp(x[c] - row_max);
  for (int64_t c = 0; c < cols; ++c) {
    y[c] = op == Op::kSoftmax ? std::exp(x[c] - row_max) / sum
                              : x[c] - row_max - std::log(sum);
  }
}

absl::Status RunReference(Op op, DType dtype, Shape shape, const HostRowOpArgs& args,
                          int64_t row_begin, int64_t row_end, DType y_dtype, int threads) {
  if (args.x == nullptr || args.y == nullptr) {
    return absl::InvalidArgumentError("x and y must not be null");
  }
  if (shape.rows < 1 || shape.cols < 1) {
    return absl::InvalidArgumentError(
        absl::StrCat("shape (", shape.rows, ", ", shape.cols, ") must be at least (1, 1)"));
  }
  if (row_begin < 0 || row_end > shape.rows || row_begin > row_end) {
    return absl::InvalidArgumentError(absl::StrCat("row range [", row_begin, ", ", row_end,
                                                   ") is outside rows=", shape.rows));
  }
  const int64_t cols = shape.cols;
  const bool layer_norm = op == Op::kLayerNorm;
  std::vector<double> gamma, beta;
  if (layer_norm && args.gamma != nullptr) {
    gamma.resize(cols);
    for (int64_t c = 0; c < cols; ++c) gamma[c] = LoadAsDouble(dtype, args.gamma, c);
  }
  if (layer_norm && args.beta != nullptr) {
    beta.resize(cols);
    for (int64_t c = 0; c < cols; ++c) beta[c] = LoadAsDouble(dtype, args.beta, c);
  }

  auto run_rows = [&](int64_t first, int64_t last) {
    std::vector<double> x(cols), y(cols);
    for (int64_t row = first; row < last; ++row) {
      const int64_t base = row * cols;
      for (int64_t c = 0; c < cols; ++c) x[c] = LoadAsDouble(dtype, args.x, base + c);
      double mean = 0, inv_std = 0;
      ReferenceRow(op, cols, x.data(), gamma.empty() ? nullptr : gamma.data(),
                   beta.empty() ? nullptr : beta.data(), args.epsilon, y.data(), &mean,
                   &inv_std);
      for (int64_t c = 0; c < cols; ++c) StoreFromDouble(y_dtype, args.y, base + c, y[c]);
      if (layer_norm && args.mean != nullptr) args.mean[row] = static_cast<float>(mean);
      if (layer_norm && args.inv_std != nullptr) args.inv_std[row] = static_cast<float>(inv_std);
    }
  };

  if (threads <= 0) threads = static_cast<int>(std::max(1u, std::thread::hardware_concurrency()));
  const int64_t rows = row_end - row_begin;
  // Small problems are not worth a thread each.
  const int64_t min_elements_per_thread = 1 << 16;
  threads = static_cast<int>(std::clamp<int64_t>(
      rows * cols / min_elements_per_thread, 1, std::min<int64_t>(threads, rows)));
  if (threads <= 1) {
    run_rows(row_begin, row_end);
    return absl::OkStatus();
  }
  std::vector<std::thread> workers;
  const int64_t chunk = (rows + threads - 1) / threads;
  for (int t = 0; t < threads; ++t) {
    const int64_t first = row_begin + t * chunk;
    const int64_t last = std::min(row_end, first + chunk);
    if (first >= last) break;
    workers.emplace_back(run_rows, first, last);
  }
  for (std::thread& w : workers) w.join();
  return absl::OkStatus();
}

}  // namespace kt::kernels
