// Fuzzes a Run's two validation stages, ValidateRunRequest and
// ResolveTensorRefs through the daemon's own resolver (BufferRegistry,
// CudaIpcMemoryCache), against client memory of real sizes, and checks the
// property a validation bug would break: every tensor of an accepted Run
// lies inside the memory its reference names, measured as the kernels
// index it. A bug here is a write into another process's memory.
//
// Input: kSetupBytes of setup (who calls; up to four registrations, each
// over one of the host regions, whole, cut short or claimed longer, owned
// by the caller or by another process), then a serialized
// kerntune.v1.RunRequest. A buffer_id of one digit "0".."3" names that
// registration (real ids are random); a CUDA IPC handle's first byte picks
// a device allocation.
#include <cstddef>
#include <cstdint>
#include <memory>
#include <optional>
#include <string>
#include <vector>

#include "absl/strings/str_cat.h"
#include "kerntune/v1/kerntune.pb.h"
#include "kernels/op_args.h"
#include "kernels/types.h"
#include "server/backend.h"
#include "server/buffer_registry.h"
#include "server/client_tensors.h"
#include "server/run_request.h"
#include "tests/fuzz/fuzz_check.h"
#include "tests/server/fake_memory.h"

namespace kt::fuzz {
namespace {

namespace pb = ::kerntune::v1;
using kernels::Operand;
using server::ClientMemory;
using server::MemorySpace;
using server::TensorView;
using server::testing::FakeMemory;

// kerntuned's default --max_request_bytes.
constexpr int64_t kMaxRequestBytes = int64_t{256} << 20;
constexpr size_t kRegistrations = 4;
constexpr size_t kSetupBytes = 1 + 4 * kRegistrations;

// Client memory of the sizes clients register: shm objects of a page to
// 16 MiB, device allocations on two GPUs.
struct Regions {
  std::vector<std::shared_ptr<const ClientMemory>> host = {
      FakeMemory::Make(4096), FakeMemory::Make(int64_t{64} << 10),
      FakeMemory::Make(int64_t{1} << 20), FakeMemory::Make(int64_t{16} << 20)};
  std::vector<std::shared_ptr<const ClientMemory>> device = {
      FakeMemory::Make(int64_t{1} << 20, MemorySpace::kDevice, 0),
      FakeMemory::Make(int64_t{4} << 20, MemorySpace::kDevice, 1)};
};

const Regions& TheRegions() {
  static const Regions* regions = new Regions;
  return *regions;
}

// Opens a handle as the driver would: its first byte picks the allocation;
// any other is a handle the driver does not know.
class FakeIpcBackend final : public server::Backend {
 public:
  std::string name() const override { return "fuzz"; }
  absl::StatusOr<server::RunResult> Execute(int, const server::RunRequest&) override {
    return absl::UnimplementedError("the harness validates only");
  }
  bool supports_cuda_ipc() const override { return true; }
  absl::StatusOr<std::shared_ptr<const ClientMemory>> OpenCudaIpcMemory(
      const std::string& handle, int device_ordinal) override {
    const size_t pick = handle.empty() ? 0 : static_cast<unsigned char>(handle[0]);
    if (pick >= TheRegions().device.size()) {
      return absl::InvalidArgumentError("cudaIpcOpenMemHandle: invalid argument");
    }
    return TheRegions().device[pick];
  }
};

// A reference to client memory, as the request gives it.
struct MemoryRef {
  bool buffer = false;
  std::string buffer_id;
  std::string handle;
  int device_ordinal = 0;
  int64_t offset = 0;
};

template <typename Ref>
std::optional<MemoryRef> ToMemoryRef(const Ref& ref) {
  if (ref.has_buffer()) {
    return MemoryRef{true, ref.buffer().buffer_id(), "", 0, ref.buffer().offset_bytes()};
  }
  if (ref.has_cuda_ipc()) {
    return MemoryRef{false, "", ref.cuda_ipc().handle(), ref.cuda_ipc().device_ordinal(),
                     ref.cuda_ipc().offset_bytes()};
  }
  return std::nullopt;
}

// The norm message an op's operands are in (the families share theirs).
bool RmsFamily(kernels::Op op) { return kernels::IsRmsNormFamily(op); }
const pb::Quantization& QuantOf(const pb::RunRequest& request, kernels::Op op) {
  return RmsFamily(op) ? request.rms_norm().quant() : request.layer_norm().quant();
}

// Where the request names each operand's memory: the proto's layout, stated
// here again on purpose (kerntune.proto), not taken from the validator.
std::optional<MemoryRef> ReferenceOf(const pb::RunRequest& request, kernels::Op op,
                                     Operand operand) {
  const bool rms = RmsFamily(op);
  switch (operand) {
    case Operand::kInput:
      return ToMemoryRef(request.input());
    case Operand::kOutput:
      return ToMemoryRef(request.output());
    case Operand::kGamma:
      return rms ? ToMemoryRef(request.rms_norm().weight())
                 : ToMemoryRef(request.layer_norm().gamma());
    case Operand::kBeta:
      return ToMemoryRef(request.layer_norm().beta());
    case Operand::kMask:
      return ToMemoryRef(request.scaled_masked_softmax().mask());
    case Operand::kMean:
      return ToMemoryRef(request.layer_norm().mean());
    case Operand::kInvStd:
      return rms ? ToMemoryRef(request.rms_norm().inv_rms())
                 : ToMemoryRef(request.layer_norm().inv_std());
    case Operand::kRowScale:
      return kernels::QuantizesOutput(op) ? ToMemoryRef(QuantOf(request, op).scales())
                                          : ToMemoryRef(request.reduce_scale().row_scale());
    case Operand::kResidual:
      return rms ? ToMemoryRef(request.rms_norm().residual())
                 : ToMemoryRef(request.layer_norm().residual());
    case Operand::kQuantScale:
      return ToMemoryRef(QuantOf(request, op).scale());
  }
  return std::nullopt;
}

// Every buffer reference of the request, to give registrations' ids.
std::vector<pb::BufferSlice*> BufferSlices(pb::RunRequest& request) {
  std::vector<pb::BufferSlice*> slices;
  auto add = [&](auto* ref) {
    if (ref->has_buffer()) slices.push_back(ref->mutable_buffer());
  };
  if (request.has_input()) add(request.mutable_input());
  if (request.has_output()) add(request.mutable_output());
  auto add_quant = [&](pb::Quantization* quant) {
    if (quant->has_scale()) add(quant->mutable_scale());
    if (quant->has_scales()) add(quant->mutable_scales());
  };
  if (request.has_layer_norm()) {
    pb::LayerNormParams& params = *request.mutable_layer_norm();
    if (params.has_gamma()) add(params.mutable_gamma());
    if (params.has_beta()) add(params.mutable_beta());
    if (params.has_mean()) add(params.mutable_mean());
    if (params.has_inv_std()) add(params.mutable_inv_std());
    if (params.has_residual()) add(params.mutable_residual());
    if (params.has_quant()) add_quant(params.mutable_quant());
  }
  if (request.has_rms_norm()) {
    pb::RmsNormParams& params = *request.mutable_rms_norm();
    if (params.has_weight()) add(params.mutable_weight());
    if (params.has_inv_rms()) add(params.mutable_inv_rms());
    if (params.has_residual()) add(params.mutable_residual());
    if (params.has_quant()) add_quant(params.mutable_quant());
  }
  if (request.has_scaled_masked_softmax() && request.scaled_masked_softmax().has_mask()) {
    add(request.mutable_scaled_masked_softmax()->mutable_mask());
  }
  if (request.has_reduce_scale() && request.reduce_scale().has_row_scale()) {
    add(request.mutable_reduce_scale()->mutable_row_scale());
  }
  return slices;
}

// a * b and a + b, or nullopt when the result does not fit an int64_t.
std::optional<int64_t> Mul(std::optional<int64_t> a, int64_t b) {
  int64_t product = 0;
  if (!a || __builtin_mul_overflow(*a, b, &product)) return std::nullopt;
  return product;
}
std::optional<int64_t> Add(int64_t a, std::optional<int64_t> b) {
  int64_t sum = 0;
  if (!b || __builtin_add_overflow(a, *b, &sum)) return std::nullopt;
  return sum;
}

// Where the last row of a (rows, cols) tensor starts, as kerntune.proto's
// RowStrides says: row r at r * stride, or with group_rows g at (r / g) *
// group stride + (r % g) * stride; stride 0 is cols, group stride 0 is g *
// stride. nullopt past int64_t.
std::optional<int64_t> LastRowOffset(int64_t rows, int64_t cols, int64_t stride, int64_t group_rows,
                                     int64_t group_stride) {
  if (stride == 0) stride = cols;
  if (group_rows <= 0) return Mul(rows - 1, stride);
  const std::optional<int64_t> group = group_stride != 0 ? group_stride : Mul(group_rows, stride);
  const std::optional<int64_t> within = Mul((rows - 1) % group_rows, stride);
  if (!within) return std::nullopt;
  return Add(*within, Mul(group, (rows - 1) / group_rows));
}

// Bytes from an operand's first byte to past the last one the kernels touch
// (kernels/op_args.h's layouts): element (o, d, i) of a contiguous input
// and output at (o * cols + d) * inner + i, a strided one's rows where
// RowStrides puts them, one-byte codes for a quantizing op's output;
// gamma and beta indexed by column; row r's mask row r % mask_rows; one
// float per row of statistics, per row or group of dynamic quantization
// scales; one float of a static scale. nullopt when that does not fit an
// int64_t, or a mask has no rows.
std::optional<int64_t> Footprint(Operand operand, const pb::RunRequest& request,
                                 const server::RunRequest& run) {
  const int64_t element = static_cast<int64_t>(kernels::DTypeSize(run.dtype));
  const kernels::Shape& shape = run.shape;
  const pb::RowStrides& strides = request.row_strides();
  const bool quant = kernels::QuantizesOutput(run.op);
  switch (operand) {
    case Operand::kInput:
    case Operand::kOutput:
    case Operand::kResidual: {
      const int64_t bytes = operand == Operand::kOutput && quant ? 1 : element;
      if (shape.inner > 1) return Mul(Mul(Mul(shape.rows, shape.cols), shape.inner), bytes);
      const std::optional<int64_t> last =
          operand == Operand::kInput ? LastRowOffset(shape.rows, shape.cols, strides.input(),
                                                     strides.group_rows(), strides.input_group())
          : operand == Operand::kOutput
              ? LastRowOffset(shape.rows, shape.cols, strides.output(), strides.group_rows(),
                              strides.output_group())
              : LastRowOffset(shape.rows, shape.cols, strides.residual(), 0, 0);
      if (!last) return std::nullopt;
      return Mul(Add(shape.cols, last), bytes);
    }
    case Operand::kGamma:
    case Operand::kBeta:
      return Mul(shape.cols, element);
    case Operand::kMask:
      if (run.params.mask_rows < 1) return std::nullopt;
      return Mul(Mul(run.params.mask_rows, shape.cols), element);
    case Operand::kMean:
    case Operand::kInvStd:
      return Mul(shape.rows, static_cast<int64_t>(sizeof(float)));
    case Operand::kRowScale: {
      const pb::Quantization& q = QuantOf(request, run.op);
      const int64_t per_row = quant && q.scale_mode() == pb::SCALE_MODE_PER_GROUP
                                  ? (q.group_size() > 0 ? shape.cols / q.group_size() : 0)
                                  : 1;
      return Mul(Mul(shape.rows, per_row), static_cast<int64_t>(sizeof(float)));
    }
    case Operand::kQuantScale:
      return static_cast<int64_t>(sizeof(float));
  }
  return std::nullopt;
}

struct Fixture {
  std::optional<server::PeerProcess> caller;
  server::BufferRegistry registry{server::RegistryLimits{}};
  std::vector<std::optional<server::Registration>> registrations;
};

// The memory a reference may use, found from the request's own words and
// the caller's registrations: [base, base + usable).
struct Allowed {
  const char* base = nullptr;
  int64_t usable = 0;
  MemorySpace space = MemorySpace::kHost;
};
std::optional<Allowed> MemoryOf(const MemoryRef& ref, const Fixture& fixture) {
  if (ref.buffer) {
    for (const std::optional<server::Registration>& registration : fixture.registrations) {
      if (registration && registration->id == ref.buffer_id && fixture.caller &&
          registration->owner == *fixture.caller) {
        return Allowed{registration->memory->base(), registration->size_bytes,
                       registration->memory->space()};
      }
    }
    return std::nullopt;
  }
  const size_t pick = ref.handle.empty() ? 0 : static_cast<unsigned char>(ref.handle[0]);
  if (pick >= TheRegions().device.size()) return std::nullopt;
  const ClientMemory& memory = *TheRegions().device[pick];
  if (memory.device() != ref.device_ordinal) return std::nullopt;
  return Allowed{memory.base(), memory.size(), MemorySpace::kDevice};
}

std::string Describe(Operand operand, const server::RunRequest& run) {
  return absl::StrCat(kernels::OperandName(operand), " of ", kernels::OpName(run.op), " ",
                      kernels::DTypeName(run.dtype), " rows=", run.shape.rows,
                      " cols=", run.shape.cols, " inner=", run.shape.inner,
                      " mask_rows=", run.params.mask_rows);
}

// Stage 1 on its own: inline inputs are read from the request itself.
void CheckInlineViews(const pb::RunRequest& request, const server::RunRequest& run) {
  for (Operand operand : kernels::kAllOperands) {
    const TensorView& view = run.tensor(operand);
    if (!kernels::TakesOperand(run.op, operand)) {
      KT_FUZZ_CHECK(!view.present(), Describe(operand, run));
      continue;
    }
    if (view.where != TensorView::Where::kInline) continue;
    const std::optional<int64_t> footprint = Footprint(operand, request, run);
    KT_FUZZ_CHECK(footprint && view.bytes >= *footprint,
                  absl::StrCat(Describe(operand, run), ": inline view of ", view.bytes, " bytes"));
    KT_FUZZ_CHECK(operand != Operand::kResidual, Describe(operand, run) + ": an inline residual");
    if (kernels::IsOutput(operand)) continue;
    const std::string& bytes =
        operand == Operand::kInput        ? request.input().inline_data()
        : operand == Operand::kQuantScale ? QuantOf(request, run.op).scale().inline_data()
        : operand == Operand::kMask       ? request.scaled_masked_softmax().mask().inline_data()
        : operand == Operand::kBeta       ? request.layer_norm().beta().inline_data()
        : RmsFamily(run.op)               ? request.rms_norm().weight().inline_data()
                                          : request.layer_norm().gamma().inline_data();
    KT_FUZZ_CHECK(view.data == bytes.data() && static_cast<int64_t>(bytes.size()) >= *footprint,
                  absl::StrCat(Describe(operand, run), ": ", bytes.size(), " inline bytes"));
  }
}

// Both stages passed: the property.
void CheckResolved(const pb::RunRequest& request, const server::RunRequest& run,
                   const Fixture& fixture) {
  struct Range {
    const char* begin;
    int64_t bytes;
  };
  KT_FUZZ_CHECK(run.tensor(Operand::kInput).present() && run.tensor(Operand::kOutput).present(),
                "input and output are always given");
  std::optional<Range> ranges[kernels::kOperandCount];
  for (Operand operand : kernels::kAllOperands) {
    const TensorView& view = run.tensor(operand);
    if (!view.in_client_memory()) continue;
    const std::string what = Describe(operand, run);
    const std::optional<MemoryRef> ref = ReferenceOf(request, run.op, operand);
    KT_FUZZ_CHECK(ref.has_value(), what + ": in client memory without a reference");
    const std::optional<Allowed> allowed = MemoryOf(*ref, fixture);
    KT_FUZZ_CHECK(allowed.has_value(), what + ": memory that is not the caller's");
    KT_FUZZ_CHECK((view.where == TensorView::Where::kDevice) ==
                      (allowed->space == MemorySpace::kDevice),
                  what + ": host and device memory confused");
    const std::optional<int64_t> footprint = Footprint(operand, request, run);
    const int64_t reach = std::max<int64_t>(footprint.value_or(0), view.bytes);
    const std::optional<int64_t> end = Add(ref->offset, reach);
    KT_FUZZ_CHECK(footprint && ref->offset >= 0 && view.data == allowed->base + ref->offset &&
                      end && *end <= allowed->usable,
                  absl::StrCat(what, ": offset ", ref->offset, " + ", footprint.value_or(-1),
                               " bytes (view ", view.bytes, ") in ", allowed->usable));
    ranges[static_cast<size_t>(operand)] = Range{view.data, *footprint};
  }
  // What is written (the residual included) must not overlap anything else,
  // except the output exactly on the input, with the same rows, for an op
  // that writes the storage dtype.
  const pb::RowStrides& strides = request.row_strides();
  const int64_t cols = run.shape.cols;
  const int64_t x_stride = strides.input() != 0 ? strides.input() : cols;
  const int64_t y_stride = strides.output() != 0 ? strides.output() : cols;
  // Default group strides (group_rows * stride) are equal when the strides are.
  const bool same_rows =
      !kernels::QuantizesOutput(run.op) && x_stride == y_stride &&
      (strides.group_rows() == 0 || strides.input_group() == strides.output_group() ||
       (strides.input_group() == 0 ? strides.group_rows() * x_stride : strides.input_group()) ==
           (strides.output_group() == 0 ? strides.group_rows() * y_stride
                                        : strides.output_group()));
  for (Operand written : kernels::kAllOperands) {
    const std::optional<Range>& w = ranges[static_cast<size_t>(written)];
    if (!kernels::IsOutput(written) || !w) continue;
    for (Operand other : kernels::kAllOperands) {
      const std::optional<Range>& o = ranges[static_cast<size_t>(other)];
      if (other == written || !o) continue;
      if (written == Operand::kOutput && other == Operand::kInput && w->begin == o->begin &&
          same_rows) {
        continue;
      }
      const bool disjoint = w->begin + w->bytes <= o->begin || o->begin + o->bytes <= w->begin;
      KT_FUZZ_CHECK(disjoint, absl::StrCat(Describe(written, run), " overlaps ",
                                           kernels::OperandName(other)));
    }
  }
}

void Register(const uint8_t* setup, Fixture& fixture) {
  const server::PeerProcess self = Self();
  server::PeerProcess other = self;
  other.pid = self.pid + 1;  // another process of the same user
  fixture.caller = (setup[0] & 1) ? std::nullopt : std::optional(self);
  const size_t count = ((setup[0] >> 1) & 7) % (kRegistrations + 1);
  for (size_t i = 0; i < count; ++i) {
    const uint8_t* r = setup + 1 + 4 * i;
    const std::shared_ptr<const ClientMemory>& memory =
        TheRegions().host[r[0] % TheRegions().host.size()];
    const int64_t amount = int64_t{r[2]} | int64_t{r[3]} << 8;
    const int64_t size_bytes = (r[1] & 2) ? memory->size() - amount
                               : (r[1] & 4) ? memory->size() + amount
                                            : 0;
    absl::StatusOr<server::Registration> registration = fixture.registry.Register(
        (r[1] & 1) ? other : self, server::BufferKind::kHostShm, memory, size_bytes,
        absl::ZeroDuration(), "fuzz", absl::Now());
    fixture.registrations.push_back(registration.ok() ? std::optional(*registration)
                                                      : std::nullopt);
  }
}

}  // namespace
}  // namespace kt::fuzz

extern "C" int LLVMFuzzerInitialize(int*, char***) {
  kt::fuzz::SilenceProtobufLogs();
  return 0;
}

extern "C" int LLVMFuzzerTestOneInput(const uint8_t* data, size_t size) {
  using namespace kt::fuzz;  // NOLINT: the harness's own namespace
  if (size < kSetupBytes) return 0;
  Fixture fixture;
  Register(data, fixture);
  pb::RunRequest request;
  if (!request.ParseFromArray(data + kSetupBytes, static_cast<int>(size - kSetupBytes))) return 0;
  for (pb::BufferSlice* slice : BufferSlices(request)) {
    const std::string& id = slice->buffer_id();
    if (id.size() != 1 || id[0] < '0') continue;
    const size_t index = static_cast<size_t>(id[0] - '0');
    if (index < fixture.registrations.size() && fixture.registrations[index]) {
      slice->set_buffer_id(fixture.registrations[index]->id);
    }
  }

  absl::StatusOr<kt::server::RunRequest> run =
      kt::server::ValidateRunRequest(request, kMaxRequestBytes);
  if (!run.ok()) return 0;
  CheckInlineViews(request, *run);
  FakeIpcBackend backend;
  kt::server::CudaIpcMemoryCache cuda_ipc(backend, absl::Seconds(60), 16);
  kt::server::ClientTensorResolver resolver(fixture.registry, cuda_ipc, fixture.caller);
  if (!kt::server::ResolveTensorRefs(request, resolver, *run).ok()) return 0;
  CheckResolved(request, *run, fixture);
  return 0;
}
