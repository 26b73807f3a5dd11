// Client memory for a Run's tensors (client_tensors.h).
#include "server/client_tensors.h"

#include <cstring>
#include <utility>

#include "absl/status/status.h"
#include "absl/strings/str_cat.h"

namespace kt::server {

absl::Status NeedsUnixSocket(absl::string_view what) {
  return absl::FailedPreconditionError(absl::StrCat(
      what, " needs the Unix socket: a registration belongs to the calling process, known "
            "from its peer credentials; over TCP send inline tensors"));
}

absl::Status MayOpenClientMemory(const std::optional<PeerProcess>& caller,
                                 absl::string_view what) {
  if (!caller) return NeedsUnixSocket(what);
  const absl::Status& access = caller->memory_access;
  if (access.ok()) return access;
  return absl::Status(access.code(), absl::StrCat(what, " refused: ", access.message()));
}

absl::Status WriteOutputToClientHost(const RunRequest& run, kernels::Operand operand,
                                     const char* copy) {
  const TensorView& view = run.tensor(operand);
  const kernels::RowLayout layout = run.layout(operand);
  if (layout.contiguous(run.shape.cols)) return CopyToClientHost(view.data, copy, view.bytes);
  const int64_t element = operand == kernels::Operand::kOutput
                              ? kernels::OutputElementBytes(run.op, run.dtype)
                              : static_cast<int64_t>(kernels::DTypeSize(run.dtype));
  const size_t row_bytes = static_cast<size_t>(run.shape.cols * element);
  // One guard for every row: a row's copy is too small to guard alone.
  return GuardClientHostAccess([&] {
    for (int64_t row = 0; row < run.shape.rows; ++row) {
      const int64_t offset = layout.Offset(row) * element;
      std::memcpy(view.data + offset, copy + offset, row_bytes);
    }
  });
}

absl::StatusOr<std::shared_ptr<const ClientMemory>> CudaIpcMemoryCache::Open(
    const std::string& handle, int device_ordinal, const PeerProcess& caller) {
  absl::StatusOr<std::shared_ptr<const ClientMemory>> memory =
      memory_.GetOrOpen(handle, caller, absl::Now(), [&] {
        return backend_.OpenCudaIpcMemory(handle, device_ordinal);
      });
  if (memory.ok() && (*memory)->device() != device_ordinal) {
    return absl::InvalidArgumentError(absl::StrCat("device_ordinal=", device_ordinal,
                                                   ", but the handle's allocation is on device ",
                                                   (*memory)->device()));
  }
  return memory;
}

int CudaIpcMemoryCache::Evict(absl::Time now,
                              absl::FunctionRef<bool(const PeerProcess&)> is_alive) {
  return memory_.Evict(now, idle_, is_alive);
}

int CudaIpcMemoryCache::EvictDevice(int device_ordinal) {
  return memory_.EvictDead(
      [device_ordinal](const ClientMemory& memory) { return memory.device() == device_ordinal; });
}

int64_t CudaIpcMemoryCache::size_on(int device_ordinal) const {
  return memory_.CountIf(
      [device_ordinal](const ClientMemory& memory) { return memory.device() == device_ordinal; });
}

absl::StatusOr<TensorResolver::Opened> ClientTensorResolver::RegisteredBuffer(
    const std::string& buffer_id) {
  if (absl::Status s = MayOpenClientMemory(caller_, "a registered buffer"); !s.ok()) return s;
  for (const auto& [id, opened] : used_) {
    if (id == buffer_id) return opened;
  }
  absl::StatusOr<BufferRegistry::InUse> registration =
      registry_.Use(*caller_, buffer_id, absl::Now());
  if (!registration.ok()) return registration.status();
  Opened opened{std::move(registration->memory), registration->size_bytes};
  used_.emplace_back(buffer_id, opened);
  return opened;
}

absl::StatusOr<TensorResolver::Opened> ClientTensorResolver::CudaIpcAllocation(
    const std::string& handle, int device_ordinal) {
  if (absl::Status s = MayOpenClientMemory(caller_, "a CUDA IPC handle"); !s.ok()) return s;
  absl::StatusOr<std::shared_ptr<const ClientMemory>> memory =
      cuda_ipc_.Open(handle, device_ordinal, *caller_);
  if (!memory.ok()) return memory.status();
  const int64_t size = (*memory)->size();
  return Opened{*std::move(memory), size};
}

}  // namespace kt::server
