// Correctness checking of kernel outputs against the fp64 CPU reference:
// random problems with their references, device copies, output poisoning and
// an on-device comparison (so checking a 2^28-element output costs a kernel,
// not a copy to the host). Used by the GPU tests, the benchmark and the tuner.
#ifndef KERNTUNE_KERNELS_VERIFY_H_
#define KERNTUNE_KERNELS_VERIFY_H_

#include <cuda_runtime_api.h>

#include <cmath>
#include <cstdint>
#include <memory>
#include <string>
#include <vector>

#include "absl/status/statusor.h"
#include "kernels/launch.h"
#include "kernels/op_args.h"
#include "kernels/types.h"

namespace kt::kernels {

// Owns one cudaMalloc allocation on the current device.
class DeviceBuffer {
 public:
  DeviceBuffer() = default;
  static absl::StatusOr<DeviceBuffer> Allocate(size_t bytes);
  DeviceBuffer(DeviceBuffer&& other) noexcept;
  DeviceBuffer& operator=(DeviceBuffer&& other) noexcept;
  DeviceBuffer(const DeviceBuffer&) = delete;
  DeviceBuffer& operator=(const DeviceBuffer&) = delete;
  ~DeviceBuffer();

  void* data() const { return data_; }
  size_t bytes() const { return bytes_; }

 private:
  void* data_ = nullptr;
  size_t bytes_ = 0;
};

// |out - ref| <= atol + rtol * |ref|; NaN must meet NaN, +-Inf the same Inf.
struct Tolerance {
  double rtol = 0;
  double atol = 0;
};

// Per op and dtype: the storage rounding of the output (2^-24, 2^-11, 2^-8
// relative) with headroom for float32 compute, and an absolute floor for
// outputs that are differences of O(1) values (log-softmax, the norms; the
// fused forms as their base norm). Quantized codes are checked by code
// instead (kCodeSteps).
Tolerance OutputTolerance(Op op, DType dtype);
// For the float32 per-row outputs (mean, inv_std, ReduceScale's row_scale).
Tolerance StatsTolerance();
// For the dynamic quantization scales, amax(y) / QuantMax: y's own float32
// compute error, relative (LayerNorm's rows of large offset and small
// spread put 1.6e-5 of amax on it), and no absolute floor (scales of small
// rows are small).
Tolerance QuantScaleTolerance();
// Codes may differ from the fp64 reference's by this many representable
// values: the kernel multiplies by 1 / scale in float32, so a value at or
// next to a rounding tie may round the other way (CodeWithin states the
// one exception). The written-back residual gets the same allowance in its
// storage dtype.
inline constexpr int64_t kCodeSteps = 1;

// The value formats a bit-for-bit rank comparison reads: the storage dtypes
// and the one-byte codes.
enum class RankedFormat { kFloat32, kFloat16, kBFloat16, kFp8E4M3, kFp8E5M2, kInt8 };
RankedFormat RankedFormatOf(DType dtype);
RankedFormat RankedFormatOf(QuantDType dtype);
// Where a value stands among its format's values, in order: consecutive
// representable values have consecutive ranks (sign-magnitude formats rank
// -x as -rank(x), so -0 and +0 are both 0; int8 codes rank as their value).
// NaN has no rank: `nan` says so.
struct Ranked {
  bool nan = false;
  int64_t rank = 0;
};
__host__ __device__ inline Ranked RankOf(RankedFormat format, uint32_t bits) {
  uint32_t sign_bit = 0x80000000u, nan_above = 0x7f800000u;
  switch (format) {
    case RankedFormat::kFloat32:
      break;
    case RankedFormat::kFloat16:
      sign_bit = 0x8000u, nan_above = 0x7c00u;
      break;
    case RankedFormat::kBFloat16:
      sign_bit = 0x8000u, nan_above = 0x7f80u;
      break;
    case RankedFormat::kFp8E4M3:
      sign_bit = 0x80u, nan_above = 0x7eu;  // 0x7f is e4m3fn's only NaN
      break;
    case RankedFormat::kFp8E5M2:
      sign_bit = 0x80u, nan_above = 0x7cu;
      break;
    case RankedFormat::kInt8:
      return {false, static_cast<int8_t>(static_cast<uint8_t>(bits))};
  }
  const uint32_t magnitude = bits & (sign_bit - 1);
  if (magnitude > nan_above) return {true, 0};
  return {false, (bits & sign_bit) ? -static_cast<int64_t>(magnitude) : magnitude};
}
// |value| of an fp8 code (e4m3fn or e5m2), NaN and e5m2's infinities aside.
__host__ __device__ inline double Fp8Magnitude(RankedFormat format, uint32_t bits) {
  const bool e4m3 = format == RankedFormat::kFp8E4M3;
  const int mantissa_bits = e4m3 ? 3 : 2;
  const int bias = e4m3 ? 7 : 15;
  const uint32_t exponent = (bits & 0x7fu) >> mantissa_bits;
  const double mantissa = static_cast<double>(bits & ((1u << mantissa_bits) - 1)) /
                          static_cast<double>(1u << mantissa_bits);
  const int power = exponent == 0 ? 1 - bias : static_cast<int>(exponent) - bias;
  double magnitude = exponent == 0 ? mantissa : 1.0 + mantissa;
  for (int i = 0; i < (power < 0 ? -power : power); ++i) magnitude *= power < 0 ? 0.5 : 2.0;
  return magnitude;
}

// NaN meets NaN; other values are at most `steps` ranks apart.
__host__ __device__ inline bool RanksWithin(RankedFormat format, uint32_t got, uint32_t want,
                                            int64_t steps) {
  const Ranked g = RankOf(format, got), w = RankOf(format, want);
  if (g.nan || w.nan) return g.nan && w.nan;
  const int64_t apart = g.rank > w.rank ? g.rank - w.rank : w.rank - g.rank;
  return apart <= steps;
}

// The value of a one-byte code before its scale: int8's integer, an fp8
// code's signed value (e5m2's infinities as +-2^16: never written, the
// kernels saturate). NaN codes have none: RankOf tells them.
__host__ __device__ inline double CodeValue(RankedFormat format, uint32_t bits) {
  if (format == RankedFormat::kInt8) return static_cast<int8_t>(static_cast<uint8_t>(bits));
  const double magnitude = Fp8Magnitude(format, bits);
  return (bits & 0x80u) ? -magnitude : magnitude;
}

// The slack LayerNormInputs describe, for one element of y: four float32
// roundings of |x| + |mean|, times inv_std * |gamma|.
__host__ __device__ inline double LayerNormSlack(double x, double mean, double inv_std,
                                                 double gamma) {
  const double slack = 4 * 0x1p-24 * (fabs(x) + fabs(mean)) * inv_std * fabs(gamma);
  // Infinite or NaN on a pathological row: the fixed tolerance only.
  return slack - slack == 0 ? slack : 0;
}

// A quantizing op's code against the reference's: within `steps` codes, or
// its value times the scale the kernel wrote (`scale`) within the op's y
// tolerance (and LayerNorm's slack) of the reference's y before
// quantization. The second rule covers codes finer than float32 resolves
// y: on a constant row float32 LayerNorm leaves x - mean of ~1e-7 where the
// reference has 0, which the plain y check accepts but a dynamic scale
// (amax / QuantMax, no lower than 1 / (QuantMax * 512)) stretches over many
// codes. Where a code step is wider than y's tolerance (any row of ordinary
// spread) the codes must be within `steps`.
__host__ __device__ inline bool CodeWithin(RankedFormat format, uint32_t got, uint32_t want,
                                           int64_t steps, double scale, double y_ref,
                                           double rtol, double atol, double slack) {
  if (RanksWithin(format, got, want, steps)) return true;  // NaN meets NaN there
  if (RankOf(format, got).nan || RankOf(format, want).nan) return false;
  const double value = CodeValue(format, got) * scale;
  return fabs(value - y_ref) <= atol + rtol * fabs(y_ref) + slack;
}

// Input generator for a problem's rows.
enum class InputPattern {
  kNormal,         // N(0.5, 2) in every row (LayerNorm: N(3, 2))
  kSpecialValues,  // rows cycle through the special cases listed in verify.cc
};

// The scaled-masked softmax's extra inputs.
struct AttentionOptions {
  double scale = 0;        // 0: 1 / sqrt(cols), as attention uses
  bool with_mask = true;   // an additive (mask_rows, cols) mask: N(0, 1), 1 in 8 -inf
  bool causal = false;
  int64_t mask_rows = 0;   // the query length; 0: the largest divisor of rows <= cols
};

// What a problem exercises beyond an op's defaults.
struct ProblemOptions {
  AttentionOptions attention;  // the scaled-masked softmax
  // Everything else the op reads from OpParams, as the kernel will get it:
  // epsilon, weight_offset, the quantization (quant_dtype, scale_mode,
  // group_size, scale_ub) and the row layouts (x / y / residual row
  // strides, group_rows, group strides). Its scale, mask_rows and causal
  // are ignored: `attention` sets them.
  OpParams params;
  // A static quantization's scale; 0: the largest per-row dynamic scale of
  // the stored rows (amax / QuantMax), so the codes use their whole range.
  float static_scale = 0;
};

// A problem on the host: inputs in the storage dtype, references in float
// (fp64 results rounded once to float). Only the first `stored_rows` rows are
// held here; Upload repeats them to fill `shape.rows` (benchmarks use a few
// hundred distinct random rows so huge shapes need no huge reference).
// A masked problem stores a multiple of mask_rows rows, so repeated rows
// keep their query index, and a grouped one a multiple of group_rows. Rows
// of a middle-axis problem (inner > 1) are its outer slices of cols * inner
// elements.
//
// x and the residual hold the stored rows where their RowLayoutOf puts them
// (OperandBytes of the stored rows), the bytes between rows 0xff (NaN in
// every storage dtype: a kernel that reads them spoils its row). The
// references are dense (stored_rows, cols), whatever y's layout.
struct HostProblem {
  Op op = Op::kSoftmax;
  DType dtype = DType::kFloat32;
  Shape shape;
  int64_t stored_rows = 0;
  // Everything the kernel reads from OpParams: the scaled-masked softmax's
  // scale, query length and causal flag as drawn, epsilon, weight_offset,
  // the quantization and the row layouts.
  OpParams params;
  std::vector<uint8_t> x;
  std::vector<uint8_t> gamma;      // with_affine: the norms; else empty
  std::vector<uint8_t> beta;       // with_affine: the LayerNorm family
  std::vector<uint8_t> mask;       // scaled-masked softmax with a mask
  std::vector<uint8_t> residual;   // kAdd*: as given, N(0, 1)
  std::vector<float> quant_scale;  // static quantization: its one scale
  std::vector<float> y_ref;        // every op (the quantizing ones: y before the codes)
  std::vector<uint8_t> code_ref;   // the quantizing ops: their codes
  // kAdd*: the residual the op leaves (x + residual rounded, in the
  // residual's layout, the gaps as they were).
  std::vector<uint8_t> residual_ref;
  std::vector<float> mean_ref;     // the LayerNorm family
  std::vector<float> inv_std_ref;  // every norm (the RMSNorm family: 1 / rms)
  // ReduceScale's max |x| per row; a dynamic quantization's scales (rows x
  // cols / group_size per_group).
  std::vector<float> row_scale_ref;
};

// Draws inputs from `seed` (the same seed gives the same data whatever the
// thread count) and computes the fp64 reference on `threads` threads, for
// min(shape.rows, distinct_rows) distinct rows (0 = every row distinct).
// The op's operands and parameters come from `options`; what they get
// wrong (a stride < cols, a group size not dividing cols) is the reference's
// InvalidArgument.
absl::StatusOr<HostProblem> MakeProblem(Op op, DType dtype, Shape shape, uint64_t seed,
                                        InputPattern pattern, bool with_affine, int threads = 0,
                                        int64_t distinct_rows = 0,
                                        const ProblemOptions& options = {});
// The same with only the attention options (the callers from before
// ProblemOptions).
absl::StatusOr<HostProblem> MakeProblem(Op op, DType dtype, Shape shape, uint64_t seed,
                                        InputPattern pattern, bool with_affine, int threads,
                                        int64_t distinct_rows, const AttentionOptions& attention);

// Recomputes every reference of `p` from its inputs and params: after a
// caller wrote its own inputs (x, gamma, mask, residual) or changed a
// parameter (epsilon). The stored rows only, on `threads` threads.
absl::Status ComputeReference(HostProblem& p, int threads = 0);

// A problem on the device, with room for outputs and the references. x,
// y and the residual span their layouts' extents (OperandBytes) for every
// row, 0xff between rows; the references are dense (rows, cols).
struct DeviceProblem {
  Op op = Op::kSoftmax;
  DType dtype = DType::kFloat32;
  Shape shape;
  OpParams params;
  DeviceBuffer x, y, gamma, beta, mask, mean, inv_std, row_scale, residual, quant_scale;
  // The residual as given: PoisonOutputs puts it back before each launch
  // (an add op overwrites it).
  DeviceBuffer residual_init;
  DeviceBuffer y_ref, code_ref, residual_ref, mean_ref, inv_std_ref, row_scale_ref;
  // kMaxWorkspaceBytes of scratch for configs that need it: launches of one
  // problem must share a stream.
  DeviceBuffer workspace;

  // Launch arguments: every input present (the residual and the static
  // scale too), the workspace, and a dynamic quantization's scales; the
  // optional per-row outputs (mean, inv_std, ReduceScale's row_scale) only
  // if `with_stats` (the kernels must also work without them).
  RowOpArgs Args(bool with_stats = true) const;
};

// Copies `problem` to the device. Every copy runs on `stream` and is finished
// on return. A timing process passes its measuring stream: device work on a
// second stream makes every later launch in the process slower (see
// tuner/measure.h).
absl::StatusOr<DeviceProblem> Upload(const HostProblem& problem, cudaStream_t stream);

// Fills every output (y, between its rows too, and the per-row outputs) with
// NaN bit patterns so an element a kernel forgets to write fails the check,
// and puts the residual back as it was given.
absl::Status PoisonOutputs(DeviceProblem& problem, cudaStream_t stream);

// Where the rows of a checked output lie: row r at layout.Offset(r), cols
// long. Null where the comparisons take one: n contiguous elements.
struct CheckedRows {
  int64_t cols = 1;
  RowLayout layout{1, 0, 0};
};

// Raw on-device comparison of n outputs (in `dtype`) with float references.
// Returns the number of elements outside `tolerance` and the first such index
// (-1 if none). Defined in kernels/compare.cu.
struct DeviceCompareResult {
  int64_t bad = 0;
  int64_t first_bad = -1;
};
// LayerNorm's y = (x - mean) * inv_std * gamma + beta cannot be computed in
// float32 to better than a few roundings of x (and of the mean) times
// inv_std * |gamma|: where a row's spread is tiny beside its values (two
// close values in a row of 2: float32 LayerNorm of 49152 random rows of 2
// missed 1e-4 by 20%), that exceeds any fixed tolerance. With these, each y
// element also gets 4 * 2^-24 * (|x| + |mean|) * inv_std * |gamma| of slack
// (LayerNormSlack: four roundings), from the reference's mean and inv_std.
struct LayerNormInputs {
  const void* x = nullptr;      // in the output dtype (kAdd*: the residual written back)
  const void* gamma = nullptr;  // in the output dtype; null: 1
  const float* mean = nullptr;  // the reference's, per row
  const float* inv_std = nullptr;
  int64_t cols = 0;
  RowLayout x_layout{0, 0, 0};  // where x's rows are; stride 0: contiguous
};
// `rows`: where out's elements are (ref is dense); null: contiguous.
absl::StatusOr<DeviceCompareResult> CompareOnDevice(DType dtype, const void* out, const float* ref,
                                                    int64_t n, Tolerance tolerance,
                                                    cudaStream_t stream,
                                                    const LayerNormInputs* layer_norm = nullptr,
                                                    const CheckedRows* rows = nullptr);
// The scales a quantizing op's codes were written with: its one static
// scale, or `per_row` scales a row, each for `group` columns.
struct CodeScales {
  const float* scales = nullptr;
  bool is_static = false;
  int64_t per_row = 1;
  int64_t group = 1;
  __host__ __device__ float Of(int64_t row, int64_t col) const {
    return is_static ? scales[0] : scales[row * per_row + col / group];
  }
};
// n one-byte codes (out where `rows` puts them; code_ref and y_ref, the
// reference's y before quantization, dense (n / cols, cols)) compared by
// CodeWithin(kCodeSteps) with the op's y tolerance; `scales` and
// `layer_norm`'s pointers on the device, LayerNorm's in `dtype`. Defined in
// kernels/compare.cu.
absl::StatusOr<DeviceCompareResult> CompareCodesOnDevice(
    RankedFormat format, DType dtype, const void* out, const void* code_ref, const float* y_ref,
    int64_t n, int64_t cols, const CodeScales& scales, Tolerance tolerance, cudaStream_t stream,
    const LayerNormInputs* layer_norm = nullptr, const CheckedRows* rows = nullptr);
// n values of `format` (out where `rows` puts them, ref dense) compared by
// RanksWithin(steps). Defined in kernels/compare.cu.
absl::StatusOr<DeviceCompareResult> CompareRanksOnDevice(RankedFormat format, const void* out,
                                                         const void* ref, int64_t n, int64_t steps,
                                                         cudaStream_t stream,
                                                         const CheckedRows* rows = nullptr);
// Fills rows [stored_rows, rows) of a buffer laid out as `rows_at` with
// copies of rows r % stored_rows (element_bytes each), on `stream`: Upload
// repeats strided rows so. Defined in kernels/compare.cu.
absl::Status RepeatRowsOnDevice(void* data, const CheckedRows& rows_at, int64_t stored_rows,
                                int64_t rows, size_t element_bytes, cudaStream_t stream);

struct CheckReport {
  bool passed = true;
  int64_t bad_elements = 0;
  std::string detail;  // first failure: which output, (row, col), got, want
};

// Compares y (codes within kCodeSteps for the quantizing ops), the written-
// back residual (within kCodeSteps of its storage dtype, over its whole
// extent: the gaps between rows must still be NaN), a dynamic
// quantization's scales
// and, when `check_stats`, the op's optional per-row outputs with the
// references on the device. The stream is synchronized.
absl::StatusOr<CheckReport> CheckOutputs(const DeviceProblem& problem, bool check_stats,
                                         cudaStream_t stream);

// Outputs read back on the host: from a daemon's reply, or copied out of the
// memory a daemon wrote. Per-row outputs the caller did not get stay empty.
struct HostOutputs {
  std::string y;         // the storage dtype (codes: one byte), y's whole extent
  std::string residual;  // kAdd*: the residual's whole extent after the op
  std::vector<float> mean, inv_std, row_scale;
};

// What the CPU backend writes for `p`: the reference in the storage dtype
// on copies of its buffers (y's gaps 0xff, the residual as given then
// written back), every per-row output the problem has a reference for.
// Needs every row stored (stored_rows == shape.rows).
absl::StatusOr<HostOutputs> RunReferenceOnHost(const HostProblem& p, int threads = 0);

// CheckOutputs on the host, by the same rules (tolerances, the float16
// overflow, LayerNorm's slack, codes and the residual by rank): y, the
// residual and every per-row reference the problem has. `problem` must
// store every row (stored_rows == shape.rows); a wrong size counts every
// value of that output as bad. The detail names the first bad value only:
// "y[3, 17] = 0.25, want 0.5", "y[0, 2] = code 0x5c (3.5), want 0x5e (4)",
// "mean: 0 values, want 16" (the RMSNorm family's inv_std is "inv_rms").
CheckReport CheckHostOutputs(const HostProblem& problem, const HostOutputs& got);

}  // namespace kt::kernels

#endif  // KERNTUNE_KERNELS_VERIFY_H_
