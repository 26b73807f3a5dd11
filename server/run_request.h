// Request validation, in two stages, before anything runs:
//  1. ValidateRunRequest: the request on its own (op, dtype, shape, sizes,
//     the form of every tensor reference, the op's parameters, events).
//  2. ResolveTensorRefs: buffer ids and CUDA IPC handles become addresses in
//     memory the daemon has opened, each tensor checked to lie inside its
//     allocation, aligned, and the outputs checked not to overlap anything
//     they must not.
#ifndef KERNTUNE_SERVER_RUN_REQUEST_H_
#define KERNTUNE_SERVER_RUN_REQUEST_H_

#include <array>
#include <cstdint>
#include <memory>
#include <optional>
#include <string>
#include <vector>

#include "absl/status/statusor.h"
#include "absl/strings/string_view.h"
#include "kerntune/v1/kerntune.pb.h"
#include "kernels/op_args.h"
#include "kernels/types.h"
#include "server/client_memory.h"
#include "server/peer_credentials.h"

namespace kt::server {

// Bytes of a cudaIpcMemHandle_t / cudaIpcEventHandle_t.
inline constexpr size_t kCudaIpcHandleBytes = 64;
// RunRequest.device: "GPU-" + a 36-character UUID is 40.
inline constexpr size_t kMaxDeviceSelectorBytes = 64;

// Where one tensor of a Run lives.
struct TensorView {
  enum class Where {
    kAbsent,      // optional tensor not given
    kInline,      // in the request (inputs) or returned in the response (outputs)
    kClientHost,  // client host memory (shm): access only through CopyFrom/ToClientHost
    kDevice,      // client device memory (CUDA IPC), in the daemon's address space
  };
  Where where = Where::kAbsent;
  // kInline inputs: the request's bytes; kClientHost / kDevice: the first
  // byte; kInline outputs: null (the backend makes the response's bytes).
  char* data = nullptr;
  int64_t bytes = 0;
  // kClientHost / kDevice: the mapping `data` points into (RunRequest::memory
  // holds it), which says what memory it is (the overlap check's business).
  const ClientMemory* memory = nullptr;

  bool present() const { return where != Where::kAbsent; }
  bool in_client_memory() const { return where == Where::kClientHost || where == Where::kDevice; }
};

// Whether a backend reads the operand's bytes before the Run: every input,
// and the residual, which is read and written back (an output that must be
// copied in as well as out).
inline bool ReadBeforeRun(kernels::Operand operand) {
  return !kernels::IsOutput(operand) || operand == kernels::Operand::kResidual;
}

// A validated Run in the kernel library's vocabulary. Inline views point
// into the proto, which must outlive this struct.
struct RunRequest {
  kernels::Op op = kernels::Op::kSoftmax;
  kernels::DType dtype = kernels::DType::kFloat32;
  kernels::Shape shape;
  // Epsilon (the norms); weight_offset (the RMSNorm family); the
  // quantization's dtype, scale mode, group size and scale_ub (the *_quant
  // ops); scale, mask_rows, causal (scaled_masked_softmax); the row strides
  // and groups (RunRequest.row_strides). The defaults for the others.
  kernels::OpParams params;
  // Where each operand is, by kernels::Operand (tensor()), `bytes` its
  // extent (kernels::OperandBytes: a strided tensor's gaps included).
  // Absent for those the op does not take and optional ones not given.
  // Per-row outputs (mean, inv_std, row_scale) are float32 values:
  // layer_norm's mean and inv_std, rms_norm's 1/rms in inv_std,
  // reduce_scale's scales and a dynamic quantization's (always present:
  // they are half of the result). The residual (add ops) is client memory,
  // read and written back; quant_scale (static quantization) one float32.
  std::array<TensorView, kernels::kOperandCount> tensors;
  // cudaIpcEventHandle_t bytes, or empty.
  std::string wait_event;
  std::string done_event;
  // Time the kernel with CUDA events (RunRequest.time_kernel).
  bool time_kernel = false;
  // RunRequest.device: the device named for a Run without device tensors
  // (a UUID or an ordinal), or empty.
  std::string device;
  // The calling process when it came over the Unix socket.
  std::optional<PeerProcess> caller;
  // Client memory the views point into, held open while the Run uses it.
  std::vector<std::shared_ptr<const ClientMemory>> memory;

  // Where each row of the operand starts in its view (kernels::RowLayoutOf:
  // the input, output and residual may be strided; the others contiguous).
  kernels::RowLayout layout(kernels::Operand operand) const {
    return kernels::RowLayoutOf(operand, params, shape);
  }

  TensorView& tensor(kernels::Operand operand) {
    return tensors[static_cast<size_t>(operand)];
  }
  const TensorView& tensor(kernels::Operand operand) const {
    return tensors[static_cast<size_t>(operand)];
  }
};

// Opens what tensor references name, for ResolveTensorRefs: the service
// implements it with the buffer registry and the IPC cache.
class TensorResolver {
 public:
  struct Opened {
    std::shared_ptr<const ClientMemory> memory;
    // Bytes of memory the caller may use, from memory->base().
    int64_t usable_bytes = 0;
  };
  virtual ~TensorResolver() = default;
  virtual absl::StatusOr<Opened> RegisteredBuffer(const std::string& buffer_id) = 0;
  virtual absl::StatusOr<Opened> CudaIpcAllocation(const std::string& handle,
                                                   int device_ordinal) = 0;
};

// Stage 1, in order: op, dtype, shape; the op's parameters (each op's
// message, layer_norm, rms_norm, reduce_scale or scaled_masked_softmax, is
// refused on any other op; every form of a norm takes its family's: the
// residual required by the add ops and refused elsewhere, the quantization
// required by the *_quant ops and refused elsewhere, with its enums set, a
// static scale or dynamic scales as its mode says, group size 64 or 128
// dividing cols for per_group, scale_ub finite >= 0; weight_offset finite
// and only with a weight); the row strides, every extent computed in
// checked arithmetic before kernels::OperandBytes trusts them; the size
// limit (ResourceExhausted beyond max_request_bytes for a tensor that
// travels inline); then every operand the op takes, sized by
// kernels::OperandBytes and checked in the same loop (the residual refused
// inline); an inline output must be contiguous; an inline static scale
// must be finite and > 0; the events. Inline views are filled; references
// are left for ResolveTensorRefs.
absl::StatusOr<RunRequest> ValidateRunRequest(const kerntune::v1::RunRequest& request,
                                              int64_t max_request_bytes);

// Stage 2: fills every referenced view of `run` (from `request`, which
// stage 1 accepted). NotFound for unknown buffers, OutOfRange for a tensor
// past its allocation (its extent, strides included), InvalidArgument for
// overlaps (of the memory, however many registrations or handles reach it:
// whatever is written, the residual included, overlaps nothing, compared as
// byte extents, except the output exactly on the input with the same
// layout for the ops that write the storage dtype), for a static scale in
// client host memory that is not finite and > 0 (one in device memory is
// not read: its value is the caller's contract, and the kernels divide by
// it as given), and for events without a device tensor.
absl::Status ResolveTensorRefs(const kerntune::v1::RunRequest& request,
                               TensorResolver& resolver, RunRequest& run);

}  // namespace kt::server

#endif  // KERNTUNE_SERVER_RUN_REQUEST_H_
