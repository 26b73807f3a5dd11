// GpuBackend (gpu_backend.h): checked, timed launches on a CUDA device.
#include "tuner/gpu_backend.h"

#include <algorithm>
#include <limits>
#include <utility>
#include <vector>

#include "absl/status/status.h"
#include "absl/strings/str_cat.h"
#include "kernels/launch.h"
#include "kernels/launch_config.h"
#include "kernels/types.h"
#include "kernels/verify.h"
#include "kernels/version.h"

namespace kt::tuner {
namespace {

// Distinct random rows per problem, repeated to fill the shape: the fp64
// reference stays cheap while every timed row is real data.
constexpr int64_t kDistinctRows = 256;
// Rotate over enough input/output sets that the bytes touched between two
// launches on one set exceed L2 this many times.
constexpr int kL2Multiple = 4;
constexpr int kMaxRotationSets = 64;
// The copy roofline's size (source and target each), as PERF.md measures it;
// a memory limit may make it smaller.
constexpr int64_t kCopyRooflineBytes = int64_t{1} << 30;
constexpr int64_t kMiB = int64_t{1} << 20;

// An upper bound of the device bytes kernels::Upload takes for `point`:
// input (at its row layout's extent), output and (with a mask) a mask as
// large as the input, the fp32 reference of the output and the codes', up
// to three fp32 per-row outputs with their references, the quantization's
// scales and their references, the residual with its initial value and
// reference, gamma and beta, and the workspace. Known before anything is
// allocated.
int64_t ProblemBytesBound(const GridPoint& point) {
  const kernels::OpParams params = ParamsOf(point);
  const auto extent = [&](kernels::Operand operand) {
    return kernels::TakesOperand(point.op, operand)
               ? kernels::OperandBytes(point.op, operand, point.dtype, point.shape, params)
               : 0;
  };
  const int64_t elements = point.shape.rows * point.shape.cols * point.shape.inner;
  const int64_t dtype_bytes = static_cast<int64_t>(kernels::DTypeSize(point.dtype));
  return extent(kernels::Operand::kInput) * (point.with_mask ? 2 : 1) +
         extent(kernels::Operand::kOutput) + elements * 5 + point.shape.rows * 24 +
         2 * extent(kernels::Operand::kRowScale) + 3 * extent(kernels::Operand::kResidual) +
         2 * point.shape.cols * point.shape.inner * dtype_bytes + kernels::kMaxWorkspaceBytes;
}

// What the problem took on the device.
int64_t DeviceBytes(const kernels::DeviceProblem& p) {
  size_t bytes = 0;
  for (const kernels::DeviceBuffer* b :
       {&p.x, &p.y, &p.gamma, &p.beta, &p.mask, &p.mean, &p.inv_std, &p.row_scale, &p.residual,
        &p.quant_scale, &p.residual_init, &p.y_ref, &p.code_ref, &p.residual_ref, &p.mean_ref,
        &p.inv_std_ref, &p.row_scale_ref, &p.workspace}) {
    bytes += b->bytes();
  }
  return static_cast<int64_t>(bytes);
}

// A problem on the device plus extra input/output sets to rotate through.
class GpuPointMeasurer final : public PointMeasurer {
 public:
  GpuPointMeasurer(const GridPoint& point, const kernels::DeviceInfo& device,
                   cudaStream_t stream, kernels::DeviceProblem problem,
                   const L2Flusher& l2_flusher)
      : point_(point),
        device_(device),
        stream_(stream),
        problem_(std::move(problem)),
        l2_flusher_(l2_flusher) {}

  // Rotation sets in at most half of the free memory and `memory_left`
  // bytes.
  absl::Status AddRotationSets(int64_t memory_left) {
    const size_t set_bytes = problem_.x.bytes() + problem_.y.bytes();
    size_t free_bytes = 0, total_bytes = 0;
    if (cudaMemGetInfo(&free_bytes, &total_bytes) != cudaSuccess) {
      cudaGetLastError();
      return absl::InternalError("cudaMemGetInfo failed");
    }
    const size_t wanted =
        (kL2Multiple * static_cast<size_t>(device_.l2_bytes) + set_bytes - 1) / set_bytes;
    const size_t affordable =
        std::min(free_bytes / 2, static_cast<size_t>(std::max<int64_t>(memory_left, 0))) /
        set_bytes;
    const int sets =
        static_cast<int>(std::clamp<size_t>(std::min(wanted, affordable), 1, kMaxRotationSets));
    for (int i = 1; i < sets; ++i) {
      absl::StatusOr<kernels::DeviceBuffer> x = kernels::DeviceBuffer::Allocate(problem_.x.bytes());
      if (!x.ok()) return x.status();
      absl::StatusOr<kernels::DeviceBuffer> y = kernels::DeviceBuffer::Allocate(problem_.y.bytes());
      if (!y.ok()) return y.status();
      if (cudaMemcpyAsync(x->data(), problem_.x.data(), problem_.x.bytes(),
                          cudaMemcpyDeviceToDevice, stream_) != cudaSuccess) {
        cudaGetLastError();
        return absl::InternalError("copying a rotation set failed");
      }
      extra_x_.push_back(*std::move(x));
      extra_y_.push_back(*std::move(y));
    }
    // Sets that together fit in L2 several times over would be read from
    // L2: flush it before each timed launch instead.
    if (static_cast<size_t>(sets) * set_bytes <
        kL2Multiple * static_cast<size_t>(device_.l2_bytes)) {
      flush_ = &l2_flusher_;
    }
    // On the measuring stream, like all of the tuner's device work (the
    // one-stream rule in measure.h); finished before anything is timed.
    if (cudaStreamSynchronize(stream_) != cudaSuccess) {
      cudaGetLastError();
      return absl::InternalError("synchronizing after the rotation-set copies failed");
    }
    return absl::OkStatus();
  }

  absl::StatusOr<CandidateMeasurement> Measure(const kernels::LaunchConfig& config,
                                               const MeasureOptions& options) override {
    CandidateMeasurement m;
    absl::StatusOr<int> occupancy = kernels::ActiveBlocksPerSm(
        point_.op, point_.dtype, point_.shape, config, device_);
    if (!occupancy.ok()) return occupancy.status();
    m.occupancy = *occupancy;
    if (m.occupancy == 0) {
      m.status = db::CandidateStatus::kSkippedOccupancy;
      m.message = "0 resident blocks per SM";
      return m;
    }
    if (absl::Status s = kernels::PoisonOutputs(problem_, stream_); !s.ok()) return s;
    if (absl::Status s = Launch(config, 0); !s.ok()) {
      m.status = db::CandidateStatus::kLaunchError;
      m.message = std::string(s.message());
      return m;
    }
    absl::StatusOr<kernels::CheckReport> report =
        kernels::CheckOutputs(problem_, TimedWithRowOutputs(point_.op), stream_);
    if (!report.ok()) return report.status();  // a kernel fault: stop the run
    m.correct = report->passed;
    if (!m.correct) {
      m.status = db::CandidateStatus::kFailedCheck;
      m.message = report->detail;
      return m;
    }
    const LaunchFn launch = [&](int rep) { return Launch(config, rep); };
    const auto time = [&](int reps) -> absl::StatusOr<TimingStats> {
      if (options.graph_replay) {
        return TimeGraphReplay(launch, std::max(Sets(), kLaunchesPerGraph), reps, stream_,
                               flush_);
      }
      return TimeLaunches(launch, options.warmup, reps, stream_, flush_);
    };
    m.graph_replay = options.graph_replay;
    if (options.prune_above_us) {
      absl::StatusOr<TimingStats> probe = time(options.probe_repetitions);
      if (!probe.ok()) return probe.status();
      if (probe->min_us > *options.prune_above_us) {
        m.status = db::CandidateStatus::kPruned;
        m.message = absl::StrCat("probe of ", probe->repetitions, ": fastest ", probe->min_us,
                                 " us > ", *options.prune_above_us, " us");
        m.timing = *probe;
        return m;
      }
    }
    absl::StatusOr<TimingStats> timing = time(options.repetitions);
    if (!timing.ok()) return timing.status();
    m.timing = *timing;
    return m;
  }

  absl::StatusOr<TimingStats> TimeInputCopy(const MeasureOptions& options) override {
    // The dense input's bytes (a strided x spans more; one-byte codes fill
    // less of y than x's elements): each set's y takes them when it is as
    // large, else a target of their own (made once, outside the timing).
    const size_t bytes =
        static_cast<size_t>(point_.shape.elements()) * kernels::DTypeSize(point_.dtype);
    if (problem_.y.bytes() < bytes && copy_targets_.empty()) {
      for (int i = 0; i < Sets(); ++i) {
        absl::StatusOr<kernels::DeviceBuffer> target = kernels::DeviceBuffer::Allocate(bytes);
        if (!target.ok()) return target.status();
        copy_targets_.push_back(*std::move(target));
      }
    }
    const LaunchFn copy = [&](int rep) -> absl::Status {
      const int set = rep % Sets();
      const void* x = set == 0 ? problem_.x.data() : extra_x_[set - 1].data();
      void* y = !copy_targets_.empty() ? copy_targets_[set].data()
                : set == 0             ? problem_.y.data()
                                       : extra_y_[set - 1].data();
      if (cudaMemcpyAsync(y, x, bytes, cudaMemcpyDeviceToDevice, stream_) != cudaSuccess) {
        cudaGetLastError();
        return absl::InternalError("size-matched copy failed");
      }
      return absl::OkStatus();
    };
    if (options.graph_replay) {
      return TimeGraphReplay(copy, std::max(Sets(), kLaunchesPerGraph), options.repetitions,
                             stream_, flush_);
    }
    return TimeLaunches(copy, options.warmup, options.repetitions, stream_, flush_);
  }

 private:
  int Sets() const { return 1 + static_cast<int>(extra_x_.size()); }

  // Launch on rotation set rep % Sets(). The per-row outputs are written
  // only when they are the op's result (TimedWithRowOutputs: ReduceScale's
  // scale), so bytes match the peers'.
  absl::Status Launch(const kernels::LaunchConfig& config, int rep) {
    kernels::RowOpArgs args = problem_.Args(TimedWithRowOutputs(point_.op));
    const int set = rep % Sets();
    if (set > 0) {
      args.x = extra_x_[set - 1].data();
      args.y = extra_y_[set - 1].data();
    }
    return kernels::Launch(point_.op, point_.dtype, point_.shape, args, config, device_, stream_)
        .status();
  }

  GridPoint point_;
  const kernels::DeviceInfo& device_;
  cudaStream_t stream_;
  kernels::DeviceProblem problem_;
  std::vector<kernels::DeviceBuffer> extra_x_, extra_y_;
  std::vector<kernels::DeviceBuffer> copy_targets_;  // TimeInputCopy's, when y is smaller
  const L2Flusher& l2_flusher_;
  const L2Flusher* flush_ = nullptr;  // &l2_flusher_ when the sets fit in L2
};

}  // namespace

db::ConfigRecord ConfigRecordOf(const kernels::LaunchConfig& c) {
  return {std::string(kernels::ImplName(c.impl)), c.block_size, c.pack_size,
          c.thread_group_width, c.rows_per_access, c.grid_waves, kernels::ConfigKey(c),
          c.split};
}

absl::StatusOr<std::unique_ptr<GpuBackend>> GpuBackend::Create(int ordinal,
                                                               const GpuBackendOptions& options) {
  if (kernels::CudaDeviceCount() == 0) {
    return absl::FailedPreconditionError("no CUDA device found: tuning needs a GPU");
  }
  if (cudaSetDevice(ordinal) != cudaSuccess) {
    cudaGetLastError();
    return absl::NotFoundError(absl::StrCat("cannot use CUDA device ", ordinal));
  }
  absl::StatusOr<kernels::DeviceInfo> device = kernels::GetDeviceInfo(ordinal);
  if (!device.ok()) return device.status();
  db::Environment environment;
  cudaDriverGetVersion(&environment.driver_version);
  cudaRuntimeGetVersion(&environment.runtime_version);
  environment.kernel_version = kernels::kKernelLibraryVersion;
  const int64_t flush_bytes = device->l2_bytes * kL2Multiple;
  if (options.memory_limit_bytes > 0 && flush_bytes > options.memory_limit_bytes) {
    return absl::ResourceExhaustedError(absl::StrCat(
        "the L2 flush buffer alone takes ", flush_bytes / kMiB, " MiB, over the memory limit of ",
        options.memory_limit_bytes / kMiB, " MiB"));
  }
  // Priority 0 is the default and, on current GPUs, also the lowest; asked
  // for by name all the same.
  int lowest = 0, highest = 0;
  if (options.low_priority && cudaDeviceGetStreamPriorityRange(&lowest, &highest) != cudaSuccess) {
    cudaGetLastError();
    return absl::InternalError("cudaDeviceGetStreamPriorityRange failed");
  }
  cudaStream_t stream = nullptr;
  if (cudaStreamCreateWithPriority(&stream, cudaStreamNonBlocking, lowest) != cudaSuccess) {
    cudaGetLastError();
    return absl::InternalError("cudaStreamCreate failed");
  }
  absl::StatusOr<std::unique_ptr<L2Flusher>> l2_flusher =
      L2Flusher::Create(device->l2_bytes, kL2Multiple, stream);
  if (!l2_flusher.ok()) {
    cudaStreamDestroy(stream);
    return l2_flusher.status();
  }
  return std::unique_ptr<GpuBackend>(
      new GpuBackend(*std::move(device), std::move(environment), stream, *std::move(l2_flusher),
                     options.memory_limit_bytes));
}

int64_t GpuBackend::MemoryLeft() const {
  if (memory_limit_bytes_ <= 0) return std::numeric_limits<int64_t>::max();
  return memory_limit_bytes_ - device_.l2_bytes * kL2Multiple;
}

GpuBackend::~GpuBackend() {
  if (stream_ != nullptr) cudaStreamDestroy(stream_);
}

absl::StatusOr<double> GpuBackend::MeasureCopyGbps() {
  // Under a memory limit a smaller copy, whole MiB: still far larger than L2.
  const int64_t bytes = std::min(kCopyRooflineBytes, MemoryLeft() / 2 / kMiB * kMiB);
  if (bytes < kMiB) {
    return absl::ResourceExhaustedError("the memory limit leaves no room for the copy roofline");
  }
  return tuner::MeasureCopyGbps(static_cast<size_t>(bytes), 20, stream_);
}

kernels::AttentionOptions AttentionOf(const GridPoint& point) {
  kernels::AttentionOptions attention;
  attention.with_mask = point.with_mask;
  attention.causal = point.causal;
  attention.mask_rows = point.mask_rows;
  return attention;
}

absl::StatusOr<std::unique_ptr<PointMeasurer>> GpuBackend::Prepare(const GridPoint& point) {
  const int64_t memory_left = MemoryLeft();
  if (const int64_t needs = ProblemBytesBound(point); needs > memory_left) {
    return absl::ResourceExhaustedError(
        absl::StrCat("the problem needs up to ", (needs + kMiB - 1) / kMiB,
                     " MiB of device memory; the memory limit of ", memory_limit_bytes_ / kMiB,
                     " MiB leaves ", memory_left / kMiB, " MiB beside the L2 flush buffer"));
  }
  // Distinct rows of a middle-axis problem are outer slices of cols * inner
  // elements: fewer of them keep the reference as cheap.
  const int64_t distinct_rows =
      std::max<int64_t>(1, kDistinctRows / std::max<int64_t>(1, point.shape.inner));
  absl::StatusOr<kernels::HostProblem> host = kernels::MakeProblem(
      point.op, point.dtype, point.shape,
      /*seed=*/0x6b74756e ^ static_cast<uint64_t>(point.shape.cols * 131 + point.shape.rows +
                                                   point.shape.inner * 7919),
      kernels::InputPattern::kNormal, /*with_affine=*/true, /*threads=*/0, distinct_rows,
      kernels::ProblemOptions{AttentionOf(point), ParamsOf(point)});
  if (!host.ok()) return host.status();
  absl::StatusOr<kernels::DeviceProblem> problem = kernels::Upload(*host, stream_);
  if (!problem.ok()) return problem.status();
  const int64_t problem_bytes = DeviceBytes(*problem);
  auto measurer = std::make_unique<GpuPointMeasurer>(point, device_, stream_,
                                                     *std::move(problem), *l2_flusher_);
  if (absl::Status s = measurer->AddRotationSets(memory_left - problem_bytes); !s.ok()) return s;
  return measurer;
}

}  // namespace kt::tuner
