// Correctness checking of kernel outputs against the fp64 CPU reference:
// random problems with their references, device copies, output poisoning and
// an on-device comparison (so checking a 2^28-element output costs a kernel,
// not a copy to the host). Used by the GPU tests, the benchmark and the tuner.
#ifndef KERNTUNE_KERNELS_VERIFY_H_
#define KERNTUNE_KERNELS_VERIFY_H_

#include <cuda_runtime_api.h>

#include <cstdint>
#include <memory>
#include <string>
#include <vector>

#include "absl/status/statusor.h"
#include "kernels/launch.h"
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
// outputs that are differences of O(1) values (log-softmax, the norms).
Tolerance OutputTolerance(Op op, DType dtype);
// For the float32 per-row outputs (mean, inv_std, row_scale).
Tolerance StatsTolerance();

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

// A problem on the host: inputs in the storage dtype, references in float
// (fp64 results rounded once to float). Only the first `stored_rows` rows are
// held here; Upload repeats them to fill `shape.rows` (benchmarks use a few
// hundred distinct random rows so huge shapes need no huge reference).
// A masked problem stores a multiple of mask_rows rows, so repeated rows
// keep their query index. Rows of a middle-axis problem (inner > 1) are its
// outer slices of cols * inner elements.
struct HostProblem {
  Op op = Op::kSoftmax;
  DType dtype = DType::kFloat32;
  Shape shape;
  int64_t stored_rows = 0;
  // The scaled-masked softmax's scale, query length and causal flag as drawn.
  OpParams params;
  std::vector<uint8_t> x;
  std::vector<uint8_t> gamma;  // with_affine: LayerNorm, RMSNorm; else empty
  std::vector<uint8_t> beta;   // with_affine: LayerNorm
  std::vector<uint8_t> mask;   // scaled-masked softmax with a mask
  std::vector<float> y_ref;
  std::vector<float> mean_ref;       // LayerNorm only
  std::vector<float> inv_std_ref;    // LayerNorm, RMSNorm (1 / rms)
  std::vector<float> row_scale_ref;  // ReduceScale only
};

// Draws inputs from `seed` (the same seed gives the same data whatever the
// thread count) and computes the fp64 reference on `threads` threads, for
// min(shape.rows, distinct_rows) distinct rows (0 = every row distinct).
absl::StatusOr<HostProblem> MakeProblem(Op op, DType dtype, Shape shape, uint64_t seed,
                                        InputPattern pattern, bool with_affine,
                                        int threads = 0, int64_t distinct_rows = 0,
                                        const AttentionOptions& attention = {});

// A problem on the device, with room for outputs and the references.
struct DeviceProblem {
  Op op = Op::kSoftmax;
  DType dtype = DType::kFloat32;
  Shape shape;
  OpParams params;
  DeviceBuffer x, y, gamma, beta, mask, mean, inv_std, row_scale;
  DeviceBuffer y_ref, mean_ref, inv_std_ref, row_scale_ref;
  // kMaxWorkspaceBytes of scratch for configs that need it: launches of one
  // problem must share a stream.
  DeviceBuffer workspace;

  // Launch arguments: every input present, and the workspace; the per-row
  // outputs (mean, inv_std, row_scale) only if `with_stats` (the kernels
  // must also work without them).
  RowOpArgs Args(bool with_stats = true) const;
};

// Copies `problem` to the device. Every copy runs on `stream` and is finished
// on return. A timing process passes its measuring stream: device work on a
// second stream makes every later launch in the process slower (see
// tuner/measure.h).
absl::StatusOr<DeviceProblem> Upload(const HostProblem& problem, cudaStream_t stream);

// Fills every output (y and the per-row outputs) with NaN bit patterns so an element a
// kernel forgets to write fails the check.
absl::Status PoisonOutputs(DeviceProblem& problem, cudaStream_t stream);

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
// element also gets kLayerNormRoundings * 2^-24 * (|x| + |mean|) * inv_std *
// |gamma| of slack, from the reference's mean and inv_std.
struct LayerNormInputs {
  const void* x = nullptr;      // in the output dtype
  const void* gamma = nullptr;  // in the output dtype; null: 1
  const float* mean = nullptr;  // the reference's, per row
  const float* inv_std = nullptr;
  int64_t cols = 0;
};
inline constexpr double kLayerNormRoundings = 4;
absl::StatusOr<DeviceCompareResult> CompareOnDevice(DType dtype, const void* out,
                                                    const float* ref, int64_t n,
                                                    Tolerance tolerance, cudaStream_t stream,
                                                    const LayerNormInputs* layer_norm = nullptr);

struct CheckReport {
  bool passed = true;
  int64_t bad_elements = 0;
  std::string detail;  // first failure: which output, (row, col), got, want
};

// Compares y (and the op's per-row outputs when `check_stats`) with the
// references on the device. The stream is synchronized.
absl::StatusOr<CheckReport> CheckOutputs(const DeviceProblem& problem, bool check_stats,
                                         cudaStream_t stream);

// Outputs read back on the host: from a daemon's reply, or copied out of the
// memory a daemon wrote. Per-row outputs the caller did not get stay empty.
struct HostOutputs {
  std::string y;  // the storage dtype
  std::vector<float> mean, inv_std, row_scale;
};

// CheckOutputs on the host, by the same rules (tolerances, the float16
// overflow, LayerNorm's slack): y and every per-row reference the problem
// has. `problem` must store every row (stored_rows == shape.rows); a wrong
// size counts every value of that output as bad. The detail names the
// first bad value only: "y[3, 17] = 0.25, want 0.5", "mean: 0 values, want
// 16" (RMSNorm's inv_std is "inv_rms").
CheckReport CheckHostOutputs(const HostProblem& problem, const HostOutputs& got);

}  // namespace kt::kernels

#endif  // KERNTUNE_KERNELS_VERIFY_H_
