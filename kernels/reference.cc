// fp64 CPU reference (reference.h): plain two-pass formulas in double.
#include "kernels/reference.h"

#include <algorithm>
#include <cmath>
#include <limits>
#include <new>
#include <thread>
#include <vector>

#include "absl/strings/str_cat.h"
#include "kernels/host_dtype.h"
#include "kernels/parallel.h"

namespace kt::kernels {

void ReferenceRow(Op op, int64_t cols, const double* x, const double* gamma, const double* beta,
                  double epsilon, double* y, double* mean, double* inv_std, double* row_scale,
                  double weight_offset) {
  const double n = static_cast<double>(cols);
  if (IsLayerNormFamily(op)) {
    double sum = 0;
    for (int64_t c = 0; c < cols; ++c) sum += x[c];
    const double row_mean = sum / n;
    double squares = 0;
    for (int64_t c = 0; c < cols; ++c) squares += (x[c] - row_mean) * (x[c] - row_mean);
    const double row_inv_std = 1.0 / std::sqrt(squares / n + epsilon);
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
  if (IsRmsNormFamily(op)) {
    double squares = 0;
    for (int64_t c = 0; c < cols; ++c) squares += x[c] * x[c];
    const double inv_rms = 1.0 / std::sqrt(squares / n + epsilon);
    for (int64_t c = 0; c < cols; ++c) {
      y[c] = x[c] * inv_rms * (gamma != nullptr ? weight_offset + gamma[c] : 1.0);
    }
    if (inv_std != nullptr) *inv_std = inv_rms;
    return;
  }
  if (op == Op::kReduceScale) {
    // max ignores NaN like fmax; a NaN element stays NaN in y.
    double abs_max = 0;
    for (int64_t c = 0; c < cols; ++c) abs_max = std::fmax(abs_max, std::fabs(x[c]));
    const double inv = abs_max > 0 ? 1.0 / abs_max : 0.0;
    for (int64_t c = 0; c < cols; ++c) y[c] = x[c] * inv;
    if (row_scale != nullptr) *row_scale = abs_max;
    return;
  }
  // The softmax family. max ignores NaN like fmax; NaN still reaches every
  // output through the sum.
  double row_max = -std::numeric_limits<double>::infinity();
  for (int64_t c = 0; c < cols; ++c) row_max = std::fmax(row_max, x[c]);
  double sum = 0;
  for (int64_t c = 0; c < cols; ++c) sum += std::exp(x[c] - row_max);
  for (int64_t c = 0; c < cols; ++c) {
    y[c] = op == Op::kLogSoftmax ? x[c] - row_max - std::log(sum)
                                 : std::exp(x[c] - row_max) / sum;
  }
}

namespace {

// A quantizing op's codes and dynamic scales for one row of its fp64 norm
// output y (RunReference states the rules). `scales` gets one float per
// row, or one per group, unless the scale is static.
void QuantizeRow(const OpParams& params, int64_t cols, const double* y, float static_scale,
                 uint8_t* codes, float* scales) {
  const double qmax = QuantMax(params.quant_dtype);
  const int64_t group = params.scale_mode == ScaleMode::kPerGroup ? params.group_size : cols;
  for (int64_t first = 0; first < cols; first += group) {
    const int64_t last = std::min(cols, first + group);
    float scale = static_scale;
    if (params.scale_mode != ScaleMode::kStatic) {
      double amax = 0;
      for (int64_t c = first; c < last; ++c) amax = std::fmax(amax, std::fabs(y[c]));
      if (params.scale_ub > 0) amax = std::min(amax, params.scale_ub);
      scale = static_cast<float>(std::max(amax / qmax, 1.0 / (qmax * 512)));
      if (scales != nullptr) scales[first / group] = scale;
    }
    for (int64_t c = first; c < last; ++c) {
      codes[c] = EncodeQuant(params.quant_dtype, y[c] / static_cast<double>(scale));
    }
  }
}

}  // namespace

absl::Status RunReference(Op op, DType dtype, Shape shape, const RowOpArgs& args,
                          int64_t row_begin, int64_t row_end, DType y_dtype, int threads) {
  if (shape.rows < 1 || shape.cols < 1 || shape.inner < 1) {
    return absl::InvalidArgumentError(absl::StrCat("shape (", shape.rows, ", ", shape.cols,
                                                   ", ", shape.inner,
                                                   ") must be at least (1, 1, 1)"));
  }
  if (shape.inner > 1 && !SupportsInnerAxis(op)) {
    return absl::InvalidArgumentError(
        absl::StrCat(OpName(op), " reduces the last axis only (inner=", shape.inner, ")"));
  }
  if (row_begin < 0 || row_end > shape.rows || row_begin > row_end) {
    return absl::InvalidArgumentError(absl::StrCat("row range [", row_begin, ", ", row_end,
                                                   ") is outside rows=", shape.rows));
  }
  if (absl::Status s = ValidateOpArgs(op, dtype, shape, args); !s.ok()) return s;
  const bool masked = op == Op::kScaledMaskedSoftmax;
  const int64_t cols = shape.cols;
  const int64_t inner = shape.inner;
  const int64_t rows = row_end - row_begin;
  // Small problems are not worth a thread each. They run here before the
  // core count is asked for: glibc reads it from sysfs on every call, which
  // was a third of a CPU-backend daemon's time on small queued Runs.
  const int64_t min_elements_per_thread = 1 << 16;
  const int64_t wanted = std::min(rows * cols * inner / min_elements_per_thread, rows);
  if (wanted > 1 && threads <= 0) {
    threads = static_cast<int>(std::max(1u, std::thread::hardware_concurrency()));
  }
  threads = wanted > 1 ? static_cast<int>(std::min<int64_t>(wanted, threads)) : 1;

  // Every line buffer in one allocation: gamma, beta, then each thread's x
  // and y. Its size follows cols, which a daemon's client picks (up to what
  // it registered), so a refusal is ResourceExhausted, not std::bad_alloc
  // thrown out of a Run.
  const int64_t lines = 2 + 2 * int64_t{threads};
  std::vector<double> scratch;
  if (cols <= static_cast<int64_t>(scratch.max_size()) / lines) {
    try {
      scratch.resize(static_cast<size_t>(lines * cols));
    } catch (const std::bad_alloc&) {
    }
  }
  if (scratch.empty()) {
    return absl::ResourceExhaustedError(absl::StrCat(
        "the CPU reference could not allocate ", lines, " lines of cols=", cols, " doubles"));
  }
  const auto load_vector = [&](const void* data, double* v) -> const double* {
    if (data == nullptr) return nullptr;
    for (int64_t c = 0; c < cols; ++c) v[c] = LoadAsDouble(dtype, data, c);
    return v;
  };
  const double* gamma = load_vector(args.gamma, scratch.data());
  const double* beta = load_vector(args.beta, scratch.data() + cols);
  const double neg_inf = -std::numeric_limits<double>::infinity();

  // Where each row of x, y and the residual starts: their layouts, or for
  // inner > 1 (never strided) contiguous outer slices of cols * inner.
  const OpParams& params = args.params;
  const auto layout_of = [&](Operand operand) {
    return inner > 1 ? RowLayout{cols * inner, 0, 0} : RowLayoutOf(operand, params, shape);
  };
  const RowLayout x_layout = layout_of(Operand::kInput);
  const RowLayout y_layout = layout_of(Operand::kOutput);
  const RowLayout residual_layout = layout_of(Operand::kResidual);
  const bool adds = AddsResidual(op);
  const bool quantizes = QuantizesOutput(op);
  const float static_scale =
      quantizes && params.scale_mode == ScaleMode::kStatic ? args.quant_scale[0] : 0.0f;
  const int64_t scales_per_row =
      params.scale_mode == ScaleMode::kPerGroup ? cols / params.group_size : 1;

  // A "line" is what one reduction sees: a row, or for inner > 1 the cols
  // elements (o, *, i) of stride inner. Thread `t` works in its own x and y.
  auto run_rows = [&](int t, int64_t first, int64_t last) {
    double* x = scratch.data() + (2 + 2 * int64_t{t}) * cols;
    double* y = x + cols;
    for (int64_t row = first; row < last; ++row) {
      const int64_t query = masked && params.mask_rows > 0 ? row % params.mask_rows : 0;
      for (int64_t i = 0; i < inner; ++i) {
        const int64_t x_base = x_layout.Offset(row) + i;
        const int64_t y_base = y_layout.Offset(row) + i;
        for (int64_t c = 0; c < cols; ++c) x[c] = LoadAsDouble(dtype, args.x, x_base + c * inner);
        if (masked) {
          for (int64_t c = 0; c < cols; ++c) {
            x[c] *= params.scale;
            if (args.mask != nullptr) x[c] += LoadAsDouble(dtype, args.mask, query * cols + c);
            if (params.causal && c > query) x[c] = neg_inf;
          }
        }
        if (adds) {
          // The norm sees r as the residual stores it: rounded.
          const int64_t base = residual_layout.Offset(row);
          for (int64_t c = 0; c < cols; ++c) {
            StoreFromDouble(dtype, args.residual, base + c,
                            x[c] + LoadAsDouble(dtype, args.residual, base + c));
            x[c] = LoadAsDouble(dtype, args.residual, base + c);
          }
        }
        double mean = 0, inv_std = 0, row_scale = 0;
        ReferenceRow(op, cols, x, gamma, beta, params.epsilon, y, &mean, &inv_std, &row_scale,
                     params.weight_offset);
        if (quantizes) {
          QuantizeRow(params, cols, y, static_scale, static_cast<uint8_t*>(args.y) + y_base,
                      args.row_scale != nullptr ? args.row_scale + row * scales_per_row : nullptr);
        } else {
          for (int64_t c = 0; c < cols; ++c) {
            StoreFromDouble(y_dtype, args.y, y_base + c * inner, y[c]);
          }
        }
        // ValidateOpArgs let through only the per-row outputs the op has.
        if (args.mean != nullptr) args.mean[row] = static_cast<float>(mean);
        if (args.inv_std != nullptr) args.inv_std[row] = static_cast<float>(inv_std);
        if (op == Op::kReduceScale && args.row_scale != nullptr) {
          args.row_scale[row] = static_cast<float>(row_scale);
        }
      }
    }
  };

  if (threads <= 1) {
    run_rows(0, row_begin, row_end);
    return absl::OkStatus();
  }
  const int64_t chunk = (rows + threads - 1) / threads;
  RunOnThreads(threads, [&](int t) {
    const int64_t first = row_begin + t * chunk;
    const int64_t last = std::min(row_end, first + chunk);
    if (first < last) run_rows(t, first, last);
  });
  return absl::OkStatus();
}

}  // namespace kt::kernels
