// Device pointers for every operand of one Run on the GPU. Client device
// memory (CUDA IPC) is used in place. Inline and client shared-memory
// tensors are staged through stream-ordered device buffers: inputs copied
// in before the launch, outputs copied back after it, to the response
// (inline) or to client shared memory once the stream has finished (a
// strided one row by row); the residual both ways. Static scales, strides
// and groups reach the launch in the args. One loop over the operand table
// does it all.
#ifndef KERNTUNE_SERVER_OPERAND_STAGING_H_
#define KERNTUNE_SERVER_OPERAND_STAGING_H_

#include <cuda_runtime_api.h>

#include <array>
#include <string>

#include "absl/status/status.h"
#include "kernels/op_args.h"
#include "server/backend.h"
#include "server/run_request.h"

namespace kt::server {

class OperandStaging {
 public:
  // Stages on `stream`; buffers are freed on it, in stream order, when this
  // goes.
  explicit OperandStaging(cudaStream_t stream) : stream_(stream) {}
  ~OperandStaging();
  OperandStaging(const OperandStaging&) = delete;
  OperandStaging& operator=(const OperandStaging&) = delete;

  // Sets every operand of `args` that the request has: in place, or a
  // staged buffer (inputs' copies queued on the stream).
  absl::Status Stage(const RunRequest& request, kernels::RowOpArgs& args);
  // Whether any output is staged (it must then be copied back, so the Run
  // waits for the GPU).
  bool stages_outputs() const;
  // Whether any operand is staged (its buffer is freed on its device).
  bool stages_any() const;
  // After the launch: queues the staged outputs' copies to the host, into
  // `result` for those returned inline, else into a private copy.
  absl::Status QueueCopiesBack(const RunRequest& request, RunResult& result);
  // Once the stream has finished: the private copies to client shared
  // memory.
  absl::Status WriteToClientHost(const RunRequest& request) const;

 private:
  // One operand's staging: a device buffer, and a host copy for client
  // shared memory (never read or written by the GPU in place).
  struct Staged {
    void* device = nullptr;
    std::string host;
  };
  absl::Status Allocate(Staged& staged, int64_t bytes);
  absl::Status StageInput(const TensorView& view, Staged& staged);

  const cudaStream_t stream_;
  std::array<Staged, kernels::kOperandCount> staged_;
};

}  // namespace kt::server

#endif  // KERNTUNE_SERVER_OPERAND_STAGING_H_
