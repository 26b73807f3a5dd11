// Host side of output verification (verify.h): problem generation with its
// fp64 reference, device copies, poisoning and the report.
#include "kernels/verify.h"

#include <algorithm>
#include <cmath>
#include <limits>
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
  const bool squares = op == Op::kLayerNorm || op == Op::kRmsNorm;
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

absl::StatusOr<HostProblem> MakeProblem(Op op, DType dtype, Shape full_shape, uint64_t seed,
                                        InputPattern pattern, bool with_affine, int threads,
                                        int64_t distinct_rows,
                                        const AttentionOptions& attention) {
  if (full_shape.rows < 1 || full_shape.cols < 1 || full_shape.inner < 1) {
    return absl::InvalidArgumentError(absl::StrCat("shape (", full_shape.rows, ", ",
                                                   full_shape.cols, ", ", full_shape.inner,
                                                   ") must be at least (1, 1, 1)"));
  }
  HostProblem p;
  p.op = op;
  p.dtype = dtype;
  p.shape = full_shape;
  p.stored_rows = distinct_rows > 0 ? std::min(full_shape.rows, distinct_rows) : full_shape.rows;
  const bool masked = op == Op::kScaledMaskedSoftmax;
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
      // Whole (batch, head) blocks, so a repeated row keeps its query index.
      p.stored_rows = (p.stored_rows + p.params.mask_rows - 1) / p.params.mask_rows * p.params.mask_rows;
    }
  }
  // Everything below works on the stored rows only.
  const Shape shape{p.stored_rows, full_shape.cols, full_shape.inner};
  const size_t element = DTypeSize(dtype);
  const int64_t n = shape.elements();
  p.x.resize(static_cast<size_t>(n) * element);
  constexpr int64_t kChunk = 1 << 20;
  if (pattern == InputPattern::kNormal) {
    const double mean = op == Op::kLayerNorm ? 3.0 : 0.5;
    ParallelChunks(n, kChunk, threads, [&](int64_t first, int64_t last) {
      FillNormal(dtype, p.x.data(), first, last, seed, mean, 2.0);
    });
  } else {
    const int64_t lines = shape.rows * shape.inner;
    ParallelChunks(lines, std::max<int64_t>(1, kChunk / shape.cols), threads,
                   [&](int64_t first, int64_t last) {
                     for (int64_t line = first; line < last; ++line) {
                       const int64_t row = line / shape.inner;
                       const int64_t i = line % shape.inner;
                       FillSpecialLine(op, dtype, p.x.data(), line,
                                       row * shape.cols * shape.inner + i, shape.cols,
                                       shape.inner, seed);
                     }
                   });
  }
  RowOpArgs args;
  if (with_affine && TakesOperand(op, Operand::kGamma)) {
    p.gamma.resize(shape.cols * element);
    FillNormal(dtype, p.gamma.data(), 0, shape.cols, seed ^ 0x6a6d, 1.0, 0.5);
    args.gamma = p.gamma.data();
  }
  if (with_affine && TakesOperand(op, Operand::kBeta)) {
    p.beta.resize(shape.cols * element);
    FillNormal(dtype, p.beta.data(), 0, shape.cols, seed ^ 0x6265, 0.0, 0.5);
    args.beta = p.beta.data();
  }
  if (op == Op::kLayerNorm) {
    p.mean_ref.resize(shape.rows);
    args.mean = p.mean_ref.data();
  }
  if (op == Op::kLayerNorm || op == Op::kRmsNorm) {
    p.inv_std_ref.resize(shape.rows);
    args.inv_std = p.inv_std_ref.data();
  }
  if (op == Op::kReduceScale) {
    p.row_scale_ref.resize(shape.rows);
    args.row_scale = p.row_scale_ref.data();
  }
  if (masked) {
    args.params.scale = p.params.scale;
    args.params.causal = p.params.causal;
    args.params.mask_rows = p.params.mask_rows;
    if (attention.with_mask) {
      p.mask.resize(p.params.mask_rows * shape.cols * element);
      FillMask(dtype, p.mask.data(), p.params.mask_rows, shape.cols, seed,
               pattern == InputPattern::kSpecialValues);
      args.mask = p.mask.data();
    }
  }
  p.y_ref.resize(n);
  args.x = p.x.data();
  args.y = p.y_ref.data();
  args.params.epsilon = p.params.epsilon;
  if (absl::Status s = RunReference(op, dtype, shape, args, 0, shape.rows, DType::kFloat32,
                                    threads);
      !s.ok()) {
    return s;
  }
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
    args.row_scale = static_cast<float*>(row_scale.data());
  }
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
  const size_t row_bytes = row_elements * DTypeSize(problem.dtype);
  const auto assign = [](DeviceBuffer& target, absl::StatusOr<DeviceBuffer> source) {
    if (!source.ok()) return source.status();
    target = *std::move(source);
    return absl::OkStatus();
  };
  absl::Status s = assign(d.x, UploadRepeated(problem.x.data(), stored, rows, row_bytes, stream));
  if (s.ok()) s = assign(d.y, DeviceBuffer::Allocate(rows * row_bytes));
  if (s.ok()) s = assign(d.gamma, UploadVector(problem.gamma, stream));
  if (s.ok()) s = assign(d.beta, UploadVector(problem.beta, stream));
  if (s.ok()) s = assign(d.mask, UploadVector(problem.mask, stream));
  if (s.ok()) s = assign(d.workspace, DeviceBuffer::Allocate(kMaxWorkspaceBytes));
  if (s.ok()) {
    s = assign(d.y_ref, UploadRepeated(problem.y_ref.data(), stored, rows,
                                       row_elements * sizeof(float), stream));
  }
  // Each per-row output the op has: its reference, and room for the result.
  const std::pair<const std::vector<float>*, std::pair<DeviceBuffer*, DeviceBuffer*>>
      row_outputs[] = {{&problem.mean_ref, {&d.mean_ref, &d.mean}},
                       {&problem.inv_std_ref, {&d.inv_std_ref, &d.inv_std}},
                       {&problem.row_scale_ref, {&d.row_scale_ref, &d.row_scale}}};
  for (const auto& [reference, buffers] : row_outputs) {
    if (!s.ok() || reference->empty()) continue;
    s = assign(*buffers.first,
               UploadRepeated(reference->data(), stored, rows, sizeof(float), stream));
    if (s.ok()) s = assign(*buffers.second, DeviceBuffer::Allocate(rows * sizeof(float)));
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
    // All-ones bits are a NaN in float32, float16 and bfloat16 alike.
    if (absl::Status s = CudaStatus(cudaMemsetAsync(b->data(), 0xff, b->bytes(), stream),
                                    "poison outputs");
        !s.ok()) {
      return s;
    }
  }
  return absl::OkStatus();
}

absl::StatusOr<CheckReport> CheckOutputs(const DeviceProblem& problem, bool check_stats,
                                         cudaStream_t stream) {
  struct Output {
    const char* name;
    DType dtype;
    const DeviceBuffer* got;
    const DeviceBuffer* want;
    int64_t count;
    Tolerance tolerance;
    int64_t row_length;  // for (row, col) in messages
    int64_t inner;       // for (row, col, inner) in messages
  };
  const Shape& shape = problem.shape;
  std::vector<Output> outputs = {{"y", problem.dtype, &problem.y, &problem.y_ref,
                                  shape.elements(), OutputTolerance(problem.op, problem.dtype),
                                  shape.cols * shape.inner, shape.inner}};
  if (check_stats) {
    for (const auto& [name, got, want] :
         {std::tuple{"mean", &problem.mean, &problem.mean_ref},
          std::tuple{"inv_std", &problem.inv_std, &problem.inv_std_ref},
          std::tuple{"row_scale", &problem.row_scale, &problem.row_scale_ref}}) {
      if (want->bytes() == 0) continue;
      outputs.push_back(
          {name, DType::kFloat32, got, want, shape.rows, StatsTolerance(), 1, 1});
    }
  }
  // LayerNorm's y: slack for float32's rounding of x - mean (verify.h).
  LayerNormInputs layer_norm;
  const bool condition_y = problem.op == Op::kLayerNorm && problem.mean_ref.bytes() > 0 &&
                           problem.inv_std_ref.bytes() > 0;
  if (condition_y) {
    layer_norm = {problem.x.data(), problem.gamma.bytes() > 0 ? problem.gamma.data() : nullptr,
                  static_cast<const float*>(problem.mean_ref.data()),
                  static_cast<const float*>(problem.inv_std_ref.data()), shape.cols};
  }
  CheckReport report;
  for (const Output& o : outputs) {
    absl::StatusOr<DeviceCompareResult> r = CompareOnDevice(
        o.dtype, o.got->data(), static_cast<const float*>(o.want->data()), o.count, o.tolerance,
        stream, condition_y && o.got == &problem.y ? &layer_norm : nullptr);
    if (!r.ok()) return r.status();
    if (r->bad == 0) continue;
    report.passed = false;
    report.bad_elements += r->bad;
    if (report.detail.empty()) {
      const double got = ReadElement(o.dtype, o.got->data(), r->first_bad);
      const double want = ReadElement(DType::kFloat32, o.want->data(), r->first_bad);
      const int64_t in_row = r->first_bad % o.row_length;
      report.detail = absl::StrCat(
          r->bad, " bad ", o.name, " elements; first at (row ", r->first_bad / o.row_length,
          ", col ", in_row / o.inner,
          o.inner > 1 ? absl::StrCat(", inner ", in_row % o.inner) : std::string(), "): got ",
          got, ", want ", want, " (rtol ", o.tolerance.rtol, ", atol ", o.tolerance.atol, ")");
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
  if (!std::isfinite(slack)) slack = 0;  // a pathological row: the fixed tolerance only
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
  const size_t bytes = static_cast<size_t>(n) * DTypeSize(p.dtype);
  if (got.y.size() != bytes || p.stored_rows != shape.rows) {
    CountBad(report, n, absl::StrCat("the output has ", got.y.size(), " bytes, want ", bytes));
    return report;
  }
  const Tolerance tolerance = OutputTolerance(p.op, p.dtype);
  int64_t bad = 0;
  std::string first;
  for (int64_t i = 0; i < n; ++i) {
    const double value = LoadAsDouble(p.dtype, got.y.data(), i);
    double slack = 0;
    if (p.op == Op::kLayerNorm) {  // verify.h LayerNormInputs
      const int64_t row = i / shape.cols;
      const double gamma =
          p.gamma.empty() ? 1.0 : LoadAsDouble(p.dtype, p.gamma.data(), i % shape.cols);
      slack = kLayerNormRoundings * 0x1p-24 *
              (std::fabs(LoadAsDouble(p.dtype, p.x.data(), i)) + std::fabs(p.mean_ref[row])) *
              p.inv_std_ref[row] * std::fabs(gamma);
    }
    if (HostWithin(value, p.y_ref[i], p.dtype, tolerance, slack)) continue;
    if (bad++ > 0) continue;
    const int64_t row = i / (shape.cols * shape.inner);
    const int64_t col = i / shape.inner % shape.cols;
    first = shape.inner == 1
                ? absl::StrFormat("y[%d, %d] = %g, want %g", row, col, value, p.y_ref[i])
                : absl::StrFormat("y[%d, %d, %d] = %g, want %g", row, col, i % shape.inner, value,
                                  p.y_ref[i]);
  }
  CountBad(report, bad, first);
  const char* inv_std_name = p.op == Op::kRmsNorm ? "inv_rms" : "inv_std";
  for (const auto& [name, values, reference] :
       {std::tuple{"mean", &got.mean, &p.mean_ref},
        std::tuple{inv_std_name, &got.inv_std, &p.inv_std_ref},
        std::tuple{"row_scale", &got.row_scale, &p.row_scale_ref}}) {
    if (reference->empty()) continue;
    if (values->size() != reference->size()) {
      CountBad(report, static_cast<int64_t>(reference->size()),
               absl::StrCat(name, ": ", values->size(), " values, want ", reference->size()));
      continue;
    }
    bad = 0;
    for (size_t r = 0; r < reference->size(); ++r) {
      if (HostWithin((*values)[r], (*reference)[r], DType::kFloat32, StatsTolerance(), 0)) {
        continue;
      }
      if (bad++ == 0) {
        first = absl::StrFormat("%s[%d] = %g, want %g", name, r, (*values)[r], (*reference)[r]);
      }
    }
    CountBad(report, bad, first);
  }
  return report;
}

}  // namespace kt::kernels
