// Host side of output verification (verify.h): problem generation with its
// fp64 reference, device copies, poisoning and the report.
#include "kernels/verify.h"

#include <algorithm>
#include <cmath>
#include <cstring>
#include <limits>
#include <numeric>
#include <random>
#include <thread>
#include <tuple>
#include <utility>

#include "absl/status/status.h"
#include "absl/strings/str_cat.h"
#include "absl/strings/str_format.h"
#include "kernels/host_dtype.h"
#include "kernels/parallel.h"
#include "kernels/reference.h"

namespace kt::kernels {
namespace {

absl::Status CudaStatus(cudaError_t err, absl::string_view what) {
  if (err == cudaSuccess) return absl::OkStatus();
  cudaGetLastError();
  return absl::InternalError(absl::StrCat(what, ": ", cudaGetErrorString(err)));
}

uint64_t SplitMix64(uint64_t x) {
  x += 0x9e3779b97f4a7c15ull;
  x = (x ^ (x >> 30)) * 0xbf58476d1ce4e5b9ull;
  x = (x ^ (x >> 27)) * 0x94d049bb133111ebull;
  return x ^ (x >> 31);
}

// Runs fn(first, last) over [0, n) in chunks of `chunk` on `threads` threads.
template <typename Fn>
void ParallelChunks(int64_t n, int64_t chunk, int threads, Fn fn) {
  const int64_t chunks = (n + chunk - 1) / chunk;
  if (threads <= 0) threads = static_cast<int>(std::max(1u, std::thread::hardware_concurrency()));
  threads = static_cast<int>(std::min<int64_t>(threads, std::max<int64_t>(chunks, 1)));
  RunOnThreads(threads, [&](int t) {
    for (int64_t c = t; c < chunks; c += threads) fn(c * chunk, std::min(n, (c + 1) * chunk));
  });
}

// Normal values for elements [first, last) of a buffer, from a generator
// seeded by the chunk, so the data do not depend on the thread count.
void FillNormal(DType dtype, void* data, int64_t first, int64_t last, uint64_t seed,
                double mean, double stddev) {
  std::mt19937_64 rng(SplitMix64(seed ^ SplitMix64(static_cast<uint64_t>(first))));
  std::normal_distribution<double> normal(mean, stddev);
  for (int64_t i = first; i < last; ++i) StoreFromDouble(dtype, data, i, normal(rng));
}

// Special-value lines (a row, or a strided line of a middle-axis problem),
// cycling with the line index:
//   0: -inf everywhere but one finite value   1: all equal
//   2: huge magnitudes                         3: normal values and one NaN
//   4: all -inf                                5: large offset, small spread
// ReduceScale also meets all zeros (case 1 is 0 there).
void FillSpecialLine(Op op, DType dtype, void* data, int64_t line, int64_t base, int64_t cols,
                     int64_t stride, uint64_t seed) {
  const double inf = std::numeric_limits<double>::infinity();
  std::mt19937_64 rng(SplitMix64(seed ^ static_cast<uint64_t>(line)));
  std::normal_distribution<double> normal(0.0, 1.0);
  std::uniform_real_distribution<double> uniform(0.5, 1.0);
  const int64_t chosen = static_cast<int64_t>(rng() % static_cast<uint64_t>(cols));
  // Largest magnitude whose squares and exps stay meaningful in float
  // compute: LayerNorm squares deviations, softmax subtracts the max first.
  // The masked softmax adds an O(1) mask to x * scale, which neither float
  // nor the fp64 reference resolves at 1e30: two equal bfloat16 inputs
  // (frequent, with 8 mantissa bits) then tie or not on rounding alone (the
  // fused x * scale + mask rounds a product that lies exactly between two
  // floats up or down by the mask's sign: 1 and 0 where the reference has
  // 0.5 and 0.5). At 6e4 float resolves the mask, well within bfloat16's
  // tolerance. (Float32 keeps 1e30: its inputs practically never tie, and
  // at 6e4 float's rounding of x * scale alone exceeds its tolerance.)
  const bool squares = IsLayerNormFamily(op) || IsRmsNormFamily(op);
  const bool masked_bf16 = op == Op::kScaledMaskedSoftmax && dtype == DType::kBFloat16;
  const double huge =
      dtype == DType::kFloat16 || masked_bf16 ? 6e4 : (squares ? 1e15 : 1e30);
  for (int64_t c = 0; c < cols; ++c) {
    double v = 0;
    switch (line % 6) {
      case 0:
        v = c == chosen ? normal(rng) : -inf;
        break;
      case 1:
        v = op == Op::kReduceScale ? 0.0 : 3.25;
        break;
      case 2:
        v = (rng() % 2 ? huge : -huge) * uniform(rng);
        break;
      case 3:
        v = c == chosen ? std::numeric_limits<double>::quiet_NaN() : normal(rng);
        break;
      case 4:
        v = -inf;
        break;
      case 5:
        v = 100.0 + normal(rng);
        break;
    }
    StoreFromDouble(dtype, data, base + c * stride, v);
  }
}

// The scaled-masked softmax's (mask_rows, cols) additive mask: N(0, 1) with
// 1 in 8 entries -inf; with special values, every third query row is -inf
// but for one column (the output must be exactly one-hot there).
void FillMask(DType dtype, void* data, int64_t mask_rows, int64_t cols, uint64_t seed,
              bool special) {
  const double inf = std::numeric_limits<double>::infinity();
  std::mt19937_64 rng(SplitMix64(seed ^ 0x6d61736bull));
  std::normal_distribution<double> normal(0.0, 1.0);
  for (int64_t q = 0; q < mask_rows; ++q) {
    const int64_t kept = static_cast<int64_t>(rng() % static_cast<uint64_t>(cols));
    for (int64_t c = 0; c < cols; ++c) {
      double v = rng() % 8 == 0 ? -inf : normal(rng);
      if (special && q % 3 == 0) v = c == kept ? 0.0 : -inf;
      StoreFromDouble(dtype, data, q * cols + c, v);
    }
  }
}

// The largest divisor of rows that is <= cols: square attention blocks.
int64_t DefaultQueryLength(int64_t rows, int64_t cols) {
  for (int64_t q = std::min(rows, cols); q > 1; --q) {
    if (rows % q == 0) return q;
  }
  return 1;
}

absl::StatusOr<DeviceBuffer> UploadBytes(const void* host, size_t bytes, cudaStream_t stream) {
  absl::StatusOr<DeviceBuffer> buffer = DeviceBuffer::Allocate(bytes);
  if (!buffer.ok() || bytes == 0) return buffer;
  if (absl::Status s = CudaStatus(
          cudaMemcpyAsync(buffer->data(), host, bytes, cudaMemcpyHostToDevice, stream), "upload");
      !s.ok()) {
    return s;
  }
  return buffer;
}

template <typename T>
absl::StatusOr<DeviceBuffer> UploadVector(const std::vector<T>& v, cudaStream_t stream) {
  return UploadBytes(v.data(), v.size() * sizeof(T), stream);
}

// One element of a device buffer, as double, for failure messages.
double ReadElement(DType dtype, const void* device_data, int64_t index) {
  const size_t size = DTypeSize(dtype);
  uint8_t bytes[4] = {0, 0, 0, 0};
  if (cudaMemcpy(bytes, static_cast<const uint8_t*>(device_data) + index * size, size,
                 cudaMemcpyDeviceToHost) != cudaSuccess) {
    cudaGetLastError();
    return std::numeric_limits<double>::quiet_NaN();
  }
  return LoadAsDouble(dtype, bytes, 0);
}

}  // namespace

absl::StatusOr<DeviceBuffer> DeviceBuffer::Allocate(size_t bytes) {
  DeviceBuffer buffer;
  if (bytes == 0) return buffer;
  if (absl::Status s = CudaStatus(cudaMalloc(&buffer.data_, bytes),
                                  absl::StrCat("cudaMalloc(", bytes, ")"));
      !s.ok()) {
    return s;
  }
  buffer.bytes_ = bytes;
  return buffer;
}

DeviceBuffer::DeviceBuffer(DeviceBuffer&& other) noexcept
    : data_(std::exchange(other.data_, nullptr)), bytes_(std::exchange(other.bytes_, 0)) {}

DeviceBuffer& DeviceBuffer::operator=(DeviceBuffer&& other) noexcept {
  if (this != &other) {
    if (data_ != nullptr) cudaFree(data_);
    data_ = std::exchange(other.data_, nullptr);
    bytes_ = std::exchange(other.bytes_, 0);
  }
  return *this;
}

DeviceBuffer::~DeviceBuffer() {
  if (data_ != nullptr) cudaFree(data_);
}

Tolerance OutputTolerance(Op op, DType dtype) {
  // rtol: a few units of the storage rounding (float32 compute adds ~1e-6).
  // atol: softmax outputs can be tiny, so only a floor under the smallest
  // representable steps; log-softmax and LayerNorm outputs are O(1)
  // differences, so their absolute error scales with the storage step at 1.
  const bool probabilities = op == Op::kSoftmax || op == Op::kScaledMaskedSoftmax;
  switch (dtype) {
    case DType::kFloat32:
      return {1e-4, probabilities ? 1e-12 : 1e-4};
    case DType::kFloat16:
      return {2e-3, probabilities ? 1e-7 : 2e-3};
    case DType::kBFloat16:
      return {1.6e-2, probabilities ? 1e-12 : 1.6e-2};
  }
  return {};
}

Tolerance StatsTolerance() { return {1e-4, 1e-4}; }

Tolerance QuantScaleTolerance() { return {1e-4, 0}; }

RankedFormat RankedFormatOf(DType dtype) {
  switch (dtype) {
    case DType::kFloat32:
      return RankedFormat::kFloat32;
    case DType::kFloat16:
      return RankedFormat::kFloat16;
    case DType::kBFloat16:
      return RankedFormat::kBFloat16;
  }
  return RankedFormat::kFloat32;
}

RankedFormat RankedFormatOf(QuantDType dtype) {
  switch (dtype) {
    case QuantDType::kFp8E4M3:
      return RankedFormat::kFp8E4M3;
    case QuantDType::kFp8E5M2:
      return RankedFormat::kFp8E5M2;
    case QuantDType::kInt8:
      return RankedFormat::kInt8;
  }
  return RankedFormat::kInt8;
}

namespace {

// Scales a quantizing op writes per row: one, or one per group.
int64_t ScalesPerRow(const OpParams& params, int64_t cols) {
  return params.scale_mode == ScaleMode::kPerGroup && params.group_size > 0
             ? cols / params.group_size
             : 1;
}

// The scales a quantizing op's codes were written with: the static one, or
// the dynamic ones it wrote (`written`).
CodeScales CodeScalesOf(const OpParams& params, int64_t cols, const float* static_scale,
                        const float* written) {
  const bool is_static = params.scale_mode == ScaleMode::kStatic;
  const int64_t per_row = ScalesPerRow(params, cols);
  return {is_static ? static_scale : written, is_static, per_row, cols / per_row};
}

// Bytes of an operand's extent for the first `rows` rows of `p`.
size_t ExtentBytes(const HostProblem& p, Operand operand, int64_t rows) {
  return static_cast<size_t>(
      OperandBytes(p.op, operand, p.dtype, {rows, p.shape.cols, p.shape.inner}, p.params));
}

}  // namespace

absl::Status ComputeReference(HostProblem& p, int threads) {
  const Shape stored{p.stored_rows, p.shape.cols, p.shape.inner};
  const int64_t n = stored.elements();
  RowOpArgs args;
  args.params = p.params;
  args.x = p.x.data();
  if (QuantizesOutput(p.op)) {
    p.code_ref.assign(n, 0);
    args.y = p.code_ref.data();
  } else {
    p.code_ref.clear();
    p.y_ref.assign(n, 0.f);
    args.y = p.y_ref.data();
  }
  // The references are dense whatever y's layout.
  args.params.y_row_stride = 0;
  args.params.y_group_stride = 0;
  args.gamma = p.gamma.empty() ? nullptr : p.gamma.data();
  args.beta = p.beta.empty() ? nullptr : p.beta.data();
  args.mask = p.mask.empty() ? nullptr : p.mask.data();
  const auto output = [&](Operand operand, std::vector<float>& values, int64_t per_row) {
    if (!TakesOperand(p.op, operand)) return;
    values.assign(stored.rows * per_row, 0.f);
    args.set_operand(operand, values.data());
  };
  output(Operand::kMean, p.mean_ref, 1);
  output(Operand::kInvStd, p.inv_std_ref, 1);
  if (p.op == Op::kReduceScale ||
      (QuantizesOutput(p.op) && p.params.scale_mode != ScaleMode::kStatic)) {
    output(Operand::kRowScale, p.row_scale_ref, ScalesPerRow(p.params, stored.cols));
  } else {
    p.row_scale_ref.clear();
  }
  if (QuantizesOutput(p.op) && p.params.scale_mode == ScaleMode::kStatic) {
    args.quant_scale = p.quant_scale.empty() ? nullptr : p.quant_scale.data();
  }
  if (AddsResidual(p.op)) {
    p.residual_ref = p.residual;  // the reference adds into it
    args.residual = p.residual_ref.data();
  }
  if (absl::Status s =
          RunReference(p.op, p.dtype, stored, args, 0, stored.rows, DType::kFloat32, threads);
      !s.ok() || !QuantizesOutput(p.op)) {
    return s;
  }
  // A quantizing op's y before its codes (CodeWithin): the base norm of
  // what the op normalized (the residual written back, for the add forms).
  RowOpArgs base;
  base.params = p.params;
  base.params.quant_dtype = OpParams{}.quant_dtype;
  base.params.scale_mode = OpParams{}.scale_mode;
  base.params.group_size = 0;
  base.params.scale_ub = 0;
  base.params.y_row_stride = 0;
  if (AddsResidual(p.op)) {
    base.params.x_row_stride = p.params.residual_row_stride;
    base.params.residual_row_stride = 0;
  }
  base.x = AddsResidual(p.op) ? p.residual_ref.data() : p.x.data();
  base.gamma = args.gamma;
  base.beta = args.beta;
  p.y_ref.assign(n, 0.f);
  base.y = p.y_ref.data();
  return RunReference(BaseNormOp(p.op), p.dtype, stored, base, 0, stored.rows, DType::kFloat32,
                      threads);
}

absl::StatusOr<HostProblem> MakeProblem(Op op, DType dtype, Shape full_shape, uint64_t seed,
                                        InputPattern pattern, bool with_affine, int threads,
                                        int64_t distinct_rows, const AttentionOptions& attention) {
  ProblemOptions options;
  options.attention = attention;
  return MakeProblem(op, dtype, full_shape, seed, pattern, with_affine, threads, distinct_rows,
                     options);
}

absl::StatusOr<HostProblem> MakeProblem(Op op, DType dtype, Shape full_shape, uint64_t seed,
                                        InputPattern pattern, bool with_affine, int threads,
                                        int64_t distinct_rows, const ProblemOptions& options) {
  if (full_shape.rows < 1 || full_shape.cols < 1 || full_shape.inner < 1) {
    return absl::InvalidArgumentError(absl::StrCat("shape (", full_shape.rows, ", ",
                                                   full_shape.cols, ", ", full_shape.inner,
                                                   ") must be at least (1, 1, 1)"));
  }
  const AttentionOptions& attention = options.attention;
  HostProblem p;
  p.op = op;
  p.dtype = dtype;
  p.shape = full_shape;
  p.params = options.params;
  p.params.scale = 1.0;
  p.params.mask_rows = 0;
  p.params.causal = false;
  p.stored_rows = distinct_rows > 0 ? std::min(full_shape.rows, distinct_rows) : full_shape.rows;
  const bool masked = op == Op::kScaledMaskedSoftmax;
  // Repeated rows must keep their query index and their place in a group:
  // whole blocks of both (each divides rows, so their lcm does).
  int64_t block = p.params.group_rows > 0 ? p.params.group_rows : 1;
  if (masked) {
    p.params.scale = attention.scale != 0 ? attention.scale
                                          : 1.0 / std::sqrt(static_cast<double>(full_shape.cols));
    p.params.causal = attention.causal;
    if (attention.with_mask || attention.causal) {
      p.params.mask_rows = attention.mask_rows > 0
                               ? attention.mask_rows
                               : DefaultQueryLength(full_shape.rows, full_shape.cols);
      if (full_shape.rows % p.params.mask_rows != 0) {
        return absl::InvalidArgumentError(absl::StrCat(
            "mask_rows=", p.params.mask_rows, " does not divide rows=", full_shape.rows));
      }
      block = std::lcm(block, p.params.mask_rows);
    }
  }
  if (full_shape.rows % block == 0) {
    p.stored_rows = std::min(full_shape.rows, (p.stored_rows + block - 1) / block * block);
  }
  // Everything below works on the stored rows only.
  const Shape shape{p.stored_rows, full_shape.cols, full_shape.inner};
  const size_t element = DTypeSize(dtype);
  const int64_t n = shape.elements();
  // x where its layout puts the rows, NaN between them.
  const RowLayout x_layout = RowLayoutOf(Operand::kInput, p.params, shape);
  const bool dense_x = shape.inner > 1 || x_layout.contiguous(shape.cols);
  p.x.assign(
      dense_x ? static_cast<size_t>(n) * element : ExtentBytes(p, Operand::kInput, shape.rows),
      0xff);
  constexpr int64_t kChunk = 1 << 20;
  const double x_mean = IsLayerNormFamily(op) ? 3.0 : 0.5;
  if (pattern == InputPattern::kNormal && dense_x) {
    ParallelChunks(n, kChunk, threads, [&](int64_t first, int64_t last) {
      FillNormal(dtype, p.x.data(), first, last, seed, x_mean, 2.0);
    });
  } else if (pattern == InputPattern::kNormal) {
    // Strided rows: row by row, each from its own seed (the same for every
    // thread count).
    ParallelChunks(shape.rows, std::max<int64_t>(1, kChunk / shape.cols), threads,
                   [&](int64_t first, int64_t last) {
                     for (int64_t row = first; row < last; ++row) {
                       std::vector<uint8_t> line(shape.cols * element);
                       FillNormal(dtype, line.data(), 0, shape.cols,
                                  seed ^ SplitMix64(static_cast<uint64_t>(row)), x_mean, 2.0);
                       std::copy(line.begin(), line.end(),
                                 p.x.begin() + x_layout.Offset(row) * element);
                     }
                   });
  } else {
    const int64_t lines = shape.rows * shape.inner;
    ParallelChunks(lines, std::max<int64_t>(1, kChunk / shape.cols), threads,
                   [&](int64_t first, int64_t last) {
                     for (int64_t line = first; line < last; ++line) {
                       const int64_t row = line / shape.inner;
                       const int64_t i = line % shape.inner;
                       const int64_t base = shape.inner > 1 ? row * shape.cols * shape.inner + i
                                                            : x_layout.Offset(row);
                       FillSpecialLine(op, dtype, p.x.data(), line, base, shape.cols, shape.inner,
                                       seed);
                     }
                   });
  }
  if (with_affine && TakesOperand(op, Operand::kGamma)) {
    p.gamma.resize(shape.cols * element);
    // With an offset, the weight w of (offset + w) is drawn around 1 - offset
    // (Gemma stores it around 0), so the effective weight stays N(1, 0.5).
    FillNormal(dtype, p.gamma.data(), 0, shape.cols, seed ^ 0x6a6d, 1.0 - p.params.weight_offset,
               0.5);
  }
  if (with_affine && TakesOperand(op, Operand::kBeta)) {
    p.beta.resize(shape.cols * element);
    FillNormal(dtype, p.beta.data(), 0, shape.cols, seed ^ 0x6265, 0.0, 0.5);
  }
  if (AddsResidual(op)) {
    const RowLayout layout = RowLayoutOf(Operand::kResidual, p.params, shape);
    p.residual.assign(ExtentBytes(p, Operand::kResidual, shape.rows), 0xff);
    ParallelChunks(shape.rows, std::max<int64_t>(1, kChunk / shape.cols), threads,
                   [&](int64_t first, int64_t last) {
                     for (int64_t row = first; row < last; ++row) {
                       FillNormal(dtype, p.residual.data(), layout.Offset(row),
                                  layout.Offset(row) + shape.cols, seed ^ 0x7265736964ull, 0.0,
                                  1.0);
                     }
                   });
  }
  if (masked && attention.with_mask && p.params.mask_rows > 0) {
    p.mask.resize(p.params.mask_rows * shape.cols * element);
    FillMask(dtype, p.mask.data(), p.params.mask_rows, shape.cols, seed,
             pattern == InputPattern::kSpecialValues);
  }
  if (QuantizesOutput(op) && p.params.scale_mode == ScaleMode::kStatic) {
    float scale = options.static_scale;
    if (scale == 0) {
      // The largest per-row dynamic scale of the stored rows: amax / QuantMax.
      HostProblem dynamic = p;
      dynamic.params.scale_mode = ScaleMode::kPerRow;
      dynamic.params.scale_ub = 0;
      if (absl::Status s = ComputeReference(dynamic, threads); !s.ok()) return s;
      for (float row_scale : dynamic.row_scale_ref) scale = std::fmax(scale, row_scale);
    }
    p.quant_scale = {scale};
  }
  if (absl::Status s = ComputeReference(p, threads); !s.ok()) return s;
  return p;
}

RowOpArgs DeviceProblem::Args(bool with_stats) const {
  RowOpArgs args;
  args.x = x.data();
  args.y = y.data();
  args.gamma = gamma.data();
  args.beta = beta.data();
  if (with_stats) {
    args.mean = static_cast<float*>(mean.data());
    args.inv_std = static_cast<float*>(inv_std.data());
  }
  // ReduceScale's row_scale is optional like the statistics; a dynamic
  // quantization's scales are half of its result.
  if (with_stats || QuantizesOutput(op)) args.row_scale = static_cast<float*>(row_scale.data());
  args.residual = residual.data();
  args.quant_scale = static_cast<const float*>(quant_scale.data());
  args.params = params;
  args.mask = mask.data();
  args.workspace = workspace.data();
  args.workspace_bytes = static_cast<int64_t>(workspace.bytes());
  return args;
}

namespace {

// Allocates `rows` rows of `row_bytes` and fills them by repeating the
// `stored_rows` rows of `host`: one upload, then doubling device copies, all
// on `stream`.
absl::StatusOr<DeviceBuffer> UploadRepeated(const void* host, int64_t stored_rows,
                                            int64_t rows, size_t row_bytes,
                                            cudaStream_t stream) {
  absl::StatusOr<DeviceBuffer> buffer = DeviceBuffer::Allocate(rows * row_bytes);
  if (!buffer.ok() || rows * row_bytes == 0) return buffer;
  auto* base = static_cast<uint8_t*>(buffer->data());
  absl::Status s = CudaStatus(cudaMemcpyAsync(base, host, stored_rows * row_bytes,
                                              cudaMemcpyHostToDevice, stream),
                              "upload");
  for (int64_t filled = stored_rows; s.ok() && filled < rows;) {
    const int64_t count = std::min(filled, rows - filled);
    s = CudaStatus(cudaMemcpyAsync(base + filled * row_bytes, base, count * row_bytes,
                                   cudaMemcpyDeviceToDevice, stream),
                   "replicate rows");
    filled += count;
  }
  if (!s.ok()) return s;
  return buffer;
}

// x or the residual of `p` on the device: every row where its layout puts
// it, 0xff between rows. Contiguous rows repeat by UploadRepeated; strided
// ones upload the stored rows' extent (their offsets are the same in the
// full layout), then RepeatRowsOnDevice fills the rest.
absl::StatusOr<DeviceBuffer> UploadLaidOut(const HostProblem& p, Operand operand,
                                           const std::vector<uint8_t>& host, cudaStream_t stream) {
  const Shape& shape = p.shape;
  const size_t element = DTypeSize(p.dtype);
  const CheckedRows rows_at{shape.cols, RowLayoutOf(operand, p.params, shape)};
  if (shape.inner > 1 || rows_at.layout.contiguous(shape.cols)) {
    return UploadRepeated(host.data(), p.stored_rows, shape.rows,
                          shape.cols * shape.inner * element, stream);
  }
  const size_t bytes = static_cast<size_t>(OperandBytes(p.op, operand, p.dtype, shape, p.params));
  absl::StatusOr<DeviceBuffer> buffer = DeviceBuffer::Allocate(bytes);
  if (!buffer.ok()) return buffer;
  auto* base = static_cast<uint8_t*>(buffer->data());
  absl::Status s = CudaStatus(
      cudaMemsetAsync(base + host.size(), 0xff, bytes - host.size(), stream), "fill gaps");
  if (s.ok()) {
    s = CudaStatus(cudaMemcpyAsync(base, host.data(), host.size(), cudaMemcpyHostToDevice, stream),
                   "upload");
  }
  if (s.ok()) s = RepeatRowsOnDevice(base, rows_at, p.stored_rows, shape.rows, element, stream);
  if (!s.ok()) return s;
  return buffer;
}

absl::StatusOr<DeviceBuffer> CopyOnDevice(const DeviceBuffer& source, cudaStream_t stream) {
  absl::StatusOr<DeviceBuffer> copy = DeviceBuffer::Allocate(source.bytes());
  if (!copy.ok() || source.bytes() == 0) return copy;
  if (absl::Status s = CudaStatus(cudaMemcpyAsync(copy->data(), source.data(), source.bytes(),
                                                  cudaMemcpyDeviceToDevice, stream),
                                  "copy");
      !s.ok()) {
    return s;
  }
  return copy;
}

}  // namespace

absl::StatusOr<DeviceProblem> Upload(const HostProblem& problem, cudaStream_t stream) {
  DeviceProblem d;
  d.op = problem.op;
  d.dtype = problem.dtype;
  d.shape = problem.shape;
  d.params = problem.params;
  const int64_t rows = problem.shape.rows;
  const int64_t stored = problem.stored_rows;
  const int64_t row_elements = problem.shape.cols * problem.shape.inner;
  const auto assign = [](DeviceBuffer& target, absl::StatusOr<DeviceBuffer> source) {
    if (!source.ok()) return source.status();
    target = *std::move(source);
    return absl::OkStatus();
  };
  absl::Status s = assign(d.x, UploadLaidOut(problem, Operand::kInput, problem.x, stream));
  if (s.ok()) {
    s = assign(d.y,
               DeviceBuffer::Allocate(static_cast<size_t>(OperandBytes(
                   problem.op, Operand::kOutput, problem.dtype, problem.shape, problem.params))));
  }
  if (s.ok()) s = assign(d.gamma, UploadVector(problem.gamma, stream));
  if (s.ok()) s = assign(d.beta, UploadVector(problem.beta, stream));
  if (s.ok()) s = assign(d.mask, UploadVector(problem.mask, stream));
  if (s.ok()) s = assign(d.quant_scale, UploadVector(problem.quant_scale, stream));
  if (s.ok()) s = assign(d.workspace, DeviceBuffer::Allocate(kMaxWorkspaceBytes));
  if (s.ok() && !problem.residual.empty()) {
    s = assign(d.residual, UploadLaidOut(problem, Operand::kResidual, problem.residual, stream));
    if (s.ok()) s = assign(d.residual_init, CopyOnDevice(d.residual, stream));
    if (s.ok()) {
      s = assign(d.residual_ref,
                 UploadLaidOut(problem, Operand::kResidual, problem.residual_ref, stream));
    }
  }
  if (s.ok() && !problem.y_ref.empty()) {
    s = assign(d.y_ref, UploadRepeated(problem.y_ref.data(), stored, rows,
                                       row_elements * sizeof(float), stream));
  }
  if (s.ok() && !problem.code_ref.empty()) {
    s = assign(d.code_ref,
               UploadRepeated(problem.code_ref.data(), stored, rows, row_elements, stream));
  }
  // Each per-row output the op has: its reference, and room for the result.
  const int64_t scales_per_row =
      QuantizesOutput(problem.op) ? ScalesPerRow(problem.params, problem.shape.cols) : 1;
  const std::tuple<const std::vector<float>*, DeviceBuffer*, DeviceBuffer*, int64_t> row_outputs[] =
      {{&problem.mean_ref, &d.mean_ref, &d.mean, 1},
       {&problem.inv_std_ref, &d.inv_std_ref, &d.inv_std, 1},
       {&problem.row_scale_ref, &d.row_scale_ref, &d.row_scale, scales_per_row}};
  for (const auto& [reference, want, got, per_row] : row_outputs) {
    if (!s.ok() || reference->empty()) continue;
    const size_t row_bytes = per_row * sizeof(float);
    s = assign(*want, UploadRepeated(reference->data(), stored, rows, row_bytes, stream));
    if (s.ok()) s = assign(*got, DeviceBuffer::Allocate(rows * row_bytes));
  }
  // The device-to-device copies that replicate rows are asynchronous to the
  // host: finish them before anyone launches or checks, on whatever stream.
  if (s.ok()) s = CudaStatus(cudaStreamSynchronize(stream), "upload sync");
  if (!s.ok()) return s;
  return d;
}

absl::Status PoisonOutputs(DeviceProblem& problem, cudaStream_t stream) {
  for (DeviceBuffer* b : {&problem.y, &problem.mean, &problem.inv_std, &problem.row_scale}) {
    if (b->bytes() == 0) continue;
    // All-ones bits are a NaN in float32, float16 and bfloat16 alike (and
    // in both fp8 formats; int8 -1).
    if (absl::Status s = CudaStatus(cudaMemsetAsync(b->data(), 0xff, b->bytes(), stream),
                                    "poison outputs");
        !s.ok()) {
      return s;
    }
  }
  if (problem.residual.bytes() == 0) return absl::OkStatus();
  return CudaStatus(cudaMemcpyAsync(problem.residual.data(), problem.residual_init.data(),
                                    problem.residual.bytes(), cudaMemcpyDeviceToDevice, stream),
                    "restore the residual");
}

namespace {

// A value of `bytes` bytes (1, 2 or 4) as raw bits.
uint32_t LoadBits(const void* data, int64_t index, size_t bytes) {
  uint32_t bits = 0;
  std::memcpy(&bits, static_cast<const uint8_t*>(data) + index * bytes, bytes);
  return bits;
}

size_t FormatBytes(RankedFormat format) {
  switch (format) {
    case RankedFormat::kFloat32:
      return 4;
    case RankedFormat::kFloat16:
    case RankedFormat::kBFloat16:
      return 2;
    case RankedFormat::kFp8E4M3:
    case RankedFormat::kFp8E5M2:
    case RankedFormat::kInt8:
      return 1;
  }
  return 1;
}

// "code 0x5c (3.5)" for a quantized code (`quant`), the value of a
// storage-dtype element (`dtype`) for the others.
std::string DescribeBits(RankedFormat format, DType dtype, QuantDType quant, uint32_t bits) {
  if (FormatBytes(format) == 1) {
    return absl::StrFormat("code 0x%02x (%g)", bits,
                           DecodeQuant(quant, static_cast<uint8_t>(bits)));
  }
  uint8_t raw[4];
  std::memcpy(raw, &bits, sizeof(raw));
  return absl::StrFormat("%g", LoadAsDouble(dtype, raw, 0));
}

// One value of a device buffer as raw bits, for failure messages.
uint32_t ReadDeviceBits(const void* device_data, int64_t index, size_t bytes) {
  uint32_t bits = 0;
  if (cudaMemcpy(&bits, static_cast<const uint8_t*>(device_data) + index * bytes, bytes,
                 cudaMemcpyDeviceToHost) != cudaSuccess) {
    cudaGetLastError();
  }
  return bits;
}

// "(row 3, col 17)", with the inner index of a middle-axis problem.
std::string Where(int64_t index, int64_t cols, int64_t inner) {
  const int64_t in_row = index % (cols * inner);
  return absl::StrCat("(row ", index / (cols * inner), ", col ", in_row / inner,
                      inner > 1 ? absl::StrCat(", inner ", in_row % inner) : std::string(), ")");
}

}  // namespace

absl::StatusOr<CheckReport> CheckOutputs(const DeviceProblem& problem, bool check_stats,
                                         cudaStream_t stream) {
  const Shape& shape = problem.shape;
  CheckReport report;
  const auto count = [&](const DeviceCompareResult& r, const std::string& first) {
    if (r.bad == 0) return;
    report.passed = false;
    report.bad_elements += r.bad;
    if (report.detail.empty()) report.detail = first;
  };
  // y where its layout puts it (middle-axis problems are contiguous).
  const CheckedRows y_rows =
      shape.inner > 1
          ? CheckedRows{shape.cols * shape.inner, {shape.cols * shape.inner, 0, 0}}
          : CheckedRows{shape.cols, RowLayoutOf(Operand::kOutput, problem.params, shape)};
  const int64_t n = shape.elements();
  // LayerNorm's y: slack for float32's rounding of x - mean (verify.h), x
  // being the residual written back for the add forms.
  LayerNormInputs layer_norm;
  const bool condition_y = IsLayerNormFamily(problem.op) && problem.mean_ref.bytes() > 0 &&
                           problem.inv_std_ref.bytes() > 0;
  if (condition_y) {
    const bool adds = AddsResidual(problem.op);
    layer_norm = {
        adds ? problem.residual_ref.data() : problem.x.data(),
        problem.gamma.bytes() > 0 ? problem.gamma.data() : nullptr,
        static_cast<const float*>(problem.mean_ref.data()),
        static_cast<const float*>(problem.inv_std_ref.data()),
        shape.cols,
        RowLayoutOf(adds ? Operand::kResidual : Operand::kInput, problem.params, shape)};
  }
  const Tolerance tolerance = OutputTolerance(problem.op, problem.dtype);
  if (QuantizesOutput(problem.op)) {
    const RankedFormat format = RankedFormatOf(problem.params.quant_dtype);
    // The scales the kernel wrote (checked against the reference's below).
    const CodeScales scales = CodeScalesOf(problem.params, shape.cols,
                                           static_cast<const float*>(problem.quant_scale.data()),
                                           static_cast<const float*>(problem.row_scale.data()));
    absl::StatusOr<DeviceCompareResult> r = CompareCodesOnDevice(
        format, problem.dtype, problem.y.data(), problem.code_ref.data(),
        static_cast<const float*>(problem.y_ref.data()), n, shape.cols, scales, tolerance, stream,
        condition_y ? &layer_norm : nullptr, &y_rows);
    if (!r.ok()) return r.status();
    if (r->bad > 0) {
      const int64_t i = r->first_bad;
      const auto describe = [&](uint32_t bits) {
        return DescribeBits(format, problem.dtype, problem.params.quant_dtype, bits);
      };
      const uint32_t got = ReadDeviceBits(problem.y.data(),
                                          y_rows.layout.Offset(i / shape.cols) + i % shape.cols, 1);
      const uint32_t want = ReadDeviceBits(problem.code_ref.data(), i, 1);
      count(*r, absl::StrCat(r->bad, " bad y codes; first at ", Where(i, shape.cols, 1), ": got ",
                             describe(got), ", want ", describe(want), " (", kCodeSteps,
                             " code apart allowed, or y within rtol ", tolerance.rtol, ", atol ",
                             tolerance.atol, " of ",
                             ReadElement(DType::kFloat32, problem.y_ref.data(), i), ")"));
    }
  } else {
    absl::StatusOr<DeviceCompareResult> r = CompareOnDevice(
        problem.dtype, problem.y.data(), static_cast<const float*>(problem.y_ref.data()), n,
        tolerance, stream, condition_y ? &layer_norm : nullptr, &y_rows);
    if (!r.ok()) return r.status();
    if (r->bad > 0) {
      const int64_t i = r->first_bad;
      const int64_t at = y_rows.layout.Offset(i / y_rows.cols) + i % y_rows.cols;
      const double got = ReadElement(problem.dtype, problem.y.data(), at);
      const double want = ReadElement(DType::kFloat32, problem.y_ref.data(), i);
      count(*r, absl::StrCat(r->bad, " bad y elements; first at ",
                             Where(i, shape.cols, shape.inner), ": got ", got, ", want ", want,
                             " (rtol ", tolerance.rtol, ", atol ", tolerance.atol, ")"));
    }
  }
  if (problem.residual.bytes() > 0) {
    const RankedFormat format = RankedFormatOf(problem.dtype);
    const size_t element = DTypeSize(problem.dtype);
    const int64_t extent = static_cast<int64_t>(problem.residual.bytes() / element);
    absl::StatusOr<DeviceCompareResult> r = CompareRanksOnDevice(
        format, problem.residual.data(), problem.residual_ref.data(), extent, kCodeSteps, stream);
    if (!r.ok()) return r.status();
    if (r->bad > 0) {
      const int64_t i = r->first_bad;
      count(*r, absl::StrCat(r->bad, " bad residual elements; first at element ", i, ": got ",
                             ReadElement(problem.dtype, problem.residual.data(), i), ", want ",
                             ReadElement(problem.dtype, problem.residual_ref.data(), i)));
    }
  }
  // The per-row outputs: a dynamic quantization's scales always, the
  // optional ones when asked.
  const bool dynamic_scales = QuantizesOutput(problem.op);
  for (const auto& [name, got, want, checked, tolerance] :
       {std::tuple{"mean", &problem.mean, &problem.mean_ref, check_stats, StatsTolerance()},
        std::tuple{"inv_std", &problem.inv_std, &problem.inv_std_ref, check_stats,
                   StatsTolerance()},
        std::tuple{"row_scale", &problem.row_scale, &problem.row_scale_ref,
                   check_stats || dynamic_scales,
                   dynamic_scales ? QuantScaleTolerance() : StatsTolerance()}}) {
    if (!checked || want->bytes() == 0) continue;
    const int64_t values = static_cast<int64_t>(want->bytes() / sizeof(float));
    absl::StatusOr<DeviceCompareResult> r =
        CompareOnDevice(DType::kFloat32, got->data(), static_cast<const float*>(want->data()),
                        values, tolerance, stream);
    if (!r.ok()) return r.status();
    if (r->bad > 0) {
      const int64_t i = r->first_bad;
      count(*r, absl::StrCat(r->bad, " bad ", name, " values; first at ", i, " (row ",
                             i / (values / shape.rows), "): got ",
                             ReadElement(DType::kFloat32, got->data(), i), ", want ",
                             ReadElement(DType::kFloat32, want->data(), i), " (rtol ",
                             tolerance.rtol, ", atol ", tolerance.atol, ")"));
    }
  }
  return report;
}

namespace {

// One element of CompareKernel's rule (compare.cu), on the host.
bool HostWithin(double got, float ref, DType dtype, const Tolerance& tolerance, double slack) {
  // A reference beyond the output dtype's range must come out as the
  // infinity it rounds to.
  float rounded = ref;
  if (dtype == DType::kFloat16) rounded = HalfBitsToFloat(FloatToHalfBits(ref));
  if (dtype == DType::kBFloat16) rounded = BFloat16BitsToFloat(FloatToBFloat16Bits(ref));
  const double want = std::isinf(rounded) ? rounded : ref;
  if (std::isnan(want)) return std::isnan(got);
  if (std::isinf(want)) return got == want;
  return std::isfinite(got) &&
         std::fabs(got - want) <= tolerance.atol + tolerance.rtol * std::fabs(want) + slack;
}

void CountBad(CheckReport& report, int64_t bad, const std::string& first) {
  if (bad == 0) return;
  report.passed = false;
  report.bad_elements += bad;
  if (report.detail.empty()) report.detail = first;
}

}  // namespace

CheckReport CheckHostOutputs(const HostProblem& p, const HostOutputs& got) {
  CheckReport report;
  const Shape& shape = p.shape;
  const int64_t n = shape.elements();
  const size_t bytes = static_cast<size_t>(
      shape.inner > 1 ? n * OutputElementBytes(p.op, p.dtype)
                      : OperandBytes(p.op, Operand::kOutput, p.dtype, shape, p.params));
  if (got.y.size() != bytes || p.stored_rows != shape.rows) {
    CountBad(report, n, absl::StrCat("the output has ", got.y.size(), " bytes, want ", bytes));
    return report;
  }
  const RowLayout y_layout = shape.inner > 1 ? RowLayout{shape.cols * shape.inner, 0, 0}
                                             : RowLayoutOf(Operand::kOutput, p.params, shape);
  const int64_t row_length = shape.cols * shape.inner;
  const auto y_at = [&](int64_t i) { return y_layout.Offset(i / row_length) + i % row_length; };
  const auto where = [&](int64_t i) {
    const int64_t row = i / row_length;
    const int64_t col = i / shape.inner % shape.cols;
    return shape.inner == 1 ? absl::StrFormat("y[%d, %d]", row, col)
                            : absl::StrFormat("y[%d, %d, %d]", row, col, i % shape.inner);
  };
  int64_t bad = 0;
  std::string first;
  const Tolerance tolerance = OutputTolerance(p.op, p.dtype);
  const bool adds = AddsResidual(p.op);
  const RowLayout x_layout =
      RowLayoutOf(adds ? Operand::kResidual : Operand::kInput, p.params, shape);
  // LayerNorm's slack for element i (verify.h LayerNormInputs).
  const auto slack = [&](int64_t i) {
    if (!IsLayerNormFamily(p.op)) return 0.0;
    const int64_t row = i / shape.cols;
    const int64_t col = i % shape.cols;
    const double gamma = p.gamma.empty() ? 1.0 : LoadAsDouble(p.dtype, p.gamma.data(), col);
    const double x = LoadAsDouble(p.dtype, adds ? p.residual_ref.data() : p.x.data(),
                                  x_layout.Offset(row) + col);
    return LayerNormSlack(x, p.mean_ref[row], p.inv_std_ref[row], gamma);
  };
  if (QuantizesOutput(p.op)) {
    const RankedFormat format = RankedFormatOf(p.params.quant_dtype);
    // The scales the op wrote where they came back whole, else the
    // reference's (a missing or short row_scale fails below).
    const std::vector<float>& written =
        got.row_scale.size() == p.row_scale_ref.size() ? got.row_scale : p.row_scale_ref;
    const CodeScales scales =
        CodeScalesOf(p.params, shape.cols, p.quant_scale.data(), written.data());
    for (int64_t i = 0; i < n; ++i) {
      const uint32_t value = LoadBits(got.y.data(), y_at(i), 1);
      if (CodeWithin(format, value, p.code_ref[i], kCodeSteps,
                     scales.Of(i / shape.cols, i % shape.cols), p.y_ref[i], tolerance.rtol,
                     tolerance.atol, slack(i))) {
        continue;
      }
      if (bad++ > 0) continue;
      first = absl::StrCat(where(i), " = ",
                           DescribeBits(format, p.dtype, p.params.quant_dtype, value), ", want ",
                           DescribeBits(format, p.dtype, p.params.quant_dtype, p.code_ref[i]));
    }
  } else {
    for (int64_t i = 0; i < n; ++i) {
      const double value = LoadAsDouble(p.dtype, got.y.data(), y_at(i));
      if (HostWithin(value, p.y_ref[i], p.dtype, tolerance, slack(i))) continue;
      if (bad++ > 0) continue;
      first = absl::StrFormat("%s = %g, want %g", where(i), value, p.y_ref[i]);
    }
  }
  CountBad(report, bad, first);
  if (AddsResidual(p.op)) {
    const RankedFormat format = RankedFormatOf(p.dtype);
    const size_t element = DTypeSize(p.dtype);
    if (got.residual.size() != p.residual_ref.size()) {
      CountBad(report, static_cast<int64_t>(p.residual_ref.size() / element),
               absl::StrCat("the residual has ", got.residual.size(), " bytes, want ",
                            p.residual_ref.size()));
    } else {
      bad = 0;
      const int64_t extent = static_cast<int64_t>(p.residual_ref.size() / element);
      for (int64_t i = 0; i < extent; ++i) {
        const uint32_t value = LoadBits(got.residual.data(), i, element);
        const uint32_t want = LoadBits(p.residual_ref.data(), i, element);
        if (RanksWithin(format, value, want, kCodeSteps)) continue;
        if (bad++ == 0) {
          first =
              absl::StrCat("residual element ", i, " = ",
                           DescribeBits(format, p.dtype, p.params.quant_dtype, value), ", want ",
                           DescribeBits(format, p.dtype, p.params.quant_dtype, want));
        }
      }
      CountBad(report, bad, first);
    }
  }
  const char* inv_std_name = IsRmsNormFamily(p.op) ? "inv_rms" : "inv_std";
  const Tolerance scale_tolerance =
      QuantizesOutput(p.op) ? QuantScaleTolerance() : StatsTolerance();
  for (const auto& [name, values, reference, tolerance] :
       {std::tuple{"mean", &got.mean, &p.mean_ref, StatsTolerance()},
        std::tuple{inv_std_name, &got.inv_std, &p.inv_std_ref, StatsTolerance()},
        std::tuple{"row_scale", &got.row_scale, &p.row_scale_ref, scale_tolerance}}) {
    if (reference->empty()) continue;
    if (values->size() != reference->size()) {
      CountBad(report, static_cast<int64_t>(reference->size()),
               absl::StrCat(name, ": ", values->size(), " values, want ", reference->size()));
      continue;
    }
    bad = 0;
    for (size_t r = 0; r < reference->size(); ++r) {
      if (HostWithin((*values)[r], (*reference)[r], DType::kFloat32, tolerance, 0)) continue;
      if (bad++ == 0) {
        first = absl::StrFormat("%s[%d] = %g, want %g", name, r, (*values)[r], (*reference)[r]);
      }
    }
    CountBad(report, bad, first);
  }
  return report;
}

absl::StatusOr<HostOutputs> RunReferenceOnHost(const HostProblem& p, int threads) {
  if (p.stored_rows != p.shape.rows) {
    return absl::InvalidArgumentError(absl::StrCat("the problem stores ", p.stored_rows,
                                                   " of its ", p.shape.rows, " rows"));
  }
  HostOutputs out;
  out.y.assign(
      static_cast<size_t>(OperandBytes(p.op, Operand::kOutput, p.dtype, p.shape, p.params)),
      '\xff');
  out.residual.assign(p.residual.begin(), p.residual.end());
  RowOpArgs args;
  args.params = p.params;
  args.x = p.x.data();
  args.y = out.y.data();
  args.gamma = p.gamma.empty() ? nullptr : p.gamma.data();
  args.beta = p.beta.empty() ? nullptr : p.beta.data();
  args.mask = p.mask.empty() ? nullptr : p.mask.data();
  args.residual = out.residual.empty() ? nullptr : out.residual.data();
  args.quant_scale = p.quant_scale.empty() ? nullptr : p.quant_scale.data();
  for (auto [values, reference, operand] :
       {std::tuple{&out.mean, &p.mean_ref, Operand::kMean},
        std::tuple{&out.inv_std, &p.inv_std_ref, Operand::kInvStd},
        std::tuple{&out.row_scale, &p.row_scale_ref, Operand::kRowScale}}) {
    if (reference->empty()) continue;
    values->assign(reference->size(), -1.f);
    args.set_operand(operand, values->data());
  }
  if (absl::Status s =
          RunReference(p.op, p.dtype, p.shape, args, 0, p.shape.rows, p.dtype, threads);
      !s.ok()) {
    return s;
  }
  return out;
}

}  // namespace kt::kernels
