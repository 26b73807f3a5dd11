// Fuzzes RegisterBuffer as the service answers it (HandleRegisterBuffer:
// the request's own fields, opening the memory it names, the registry's
// checks), with a backend that opens CUDA IPC handles to fake device
// allocations. Properties: an accepted registration never claims more
// bytes than its memory has, and its owner then lists and unregisters it.
//
// Input: a serialized kerntune.v1.RegisterBufferRequest. host_shm.name "0"
// names a shared-memory object the harness made; every other name gets a
// prefix no object has, so that the harness never maps another program's
// objects (their names are validated all the same).
#include <fcntl.h>
#include <sys/mman.h>
#include <unistd.h>

#include <cstddef>
#include <cstdint>
#include <cstdlib>
#include <memory>
#include <string>
#include <vector>

#include "absl/strings/str_cat.h"
#include "kerntune/v1/kerntune.pb.h"
#include "server/backend.h"
#include "server/service.h"
#include "tests/fuzz/fuzz_check.h"
#include "tests/server/fake_memory.h"

namespace kt::fuzz {
namespace {

namespace pb = ::kerntune::v1;
using server::ClientMemory;
using server::MemorySpace;
using server::testing::FakeMemory;

constexpr int64_t kShmBytes = int64_t{64} << 10;
constexpr char kPeer[] = "fd:3";  // a caller on the Unix socket

// Device allocations on two GPUs; a handle's first byte picks one.
class FakeIpcBackend final : public server::Backend {
 public:
  std::string name() const override { return "fuzz"; }
  absl::StatusOr<server::RunResult> Execute(int, const server::RunRequest&) override {
    return absl::UnimplementedError("the harness registers only");
  }
  bool supports_cuda_ipc() const override { return true; }
  absl::StatusOr<std::shared_ptr<const ClientMemory>> OpenCudaIpcMemory(
      const std::string& handle, int device_ordinal) override {
    const size_t pick = handle.empty() ? 0 : static_cast<unsigned char>(handle[0]);
    if (pick >= device_.size()) {
      return absl::InvalidArgumentError("cudaIpcOpenMemHandle: invalid argument");
    }
    return device_[pick];
  }
  int64_t DeviceBytes(const std::string& handle) const {
    return device_[static_cast<unsigned char>(handle[0])]->size();
  }

 private:
  std::vector<std::shared_ptr<const ClientMemory>> device_ = {
      FakeMemory::Make(int64_t{1} << 20, MemorySpace::kDevice, 0),
      FakeMemory::Make(int64_t{4} << 20, MemorySpace::kDevice, 1)};
};

struct Harness {
  Harness() {
    shm_name = absl::StrCat("/kt-fuzz-register-", getpid());
    const int fd = shm_open(shm_name.c_str(), O_RDWR | O_CREAT | O_EXCL, 0600);
    if (fd < 0 || ftruncate(fd, kShmBytes) != 0) PropertyFailed("shm_open", shm_name);
    close(fd);
    std::atexit([] { shm_unlink(The().shm_name.c_str()); });
    server::ServiceOptions options;
    options.max_request_bytes = int64_t{1} << 20;
    options.workers = 1;
    options.identify_caller = [self = Self()](absl::string_view peer) {
      return std::optional<server::PeerProcess>(self);
    };
    service = std::make_unique<server::KernTuneService>(backend, std::move(options));
  }
  static Harness& The() {
    static Harness* harness = new Harness;  // lives as long as the process
    return *harness;
  }

  std::string shm_name;
  FakeIpcBackend backend;
  std::unique_ptr<server::KernTuneService> service;
  int64_t calls = 0;
};

}  // namespace
}  // namespace kt::fuzz

extern "C" int LLVMFuzzerInitialize(int*, char***) {
  kt::fuzz::SilenceProtobufLogs();
  return 0;
}

extern "C" int LLVMFuzzerTestOneInput(const uint8_t* data, size_t size) {
  using namespace kt::fuzz;  // NOLINT: the harness's own namespace
  Harness& harness = Harness::The();
  // Idle CUDA IPC mappings close now and then, as the daemon's housekeeping
  // does every second; the failure log is flushed with them.
  if (++harness.calls % 4096 == 0) harness.service->Housekeep(absl::Now() + absl::Hours(1));
  pb::RegisterBufferRequest request;
  if (!request.ParseFromArray(data, static_cast<int>(size))) return 0;
  if (request.has_host_shm()) {
    const std::string& name = request.host_shm().name();
    if (name == "0") {
      request.mutable_host_shm()->set_name(harness.shm_name);
    } else {
      const size_t slash = name.empty() || name[0] != '/' ? 0 : 1;
      request.mutable_host_shm()->set_name(
          absl::StrCat(name.substr(0, slash), "kt-fuzz-none.", name.substr(slash)));
    }
  }

  pb::RegisterBufferResponse response;
  const grpc::Status status =
      harness.service->HandleRegisterBuffer(kPeer, &request, &response);
  if (!status.ok()) return 0;

  const pb::BufferInfo& buffer = response.buffer();
  const int64_t memory_bytes = request.has_host_shm()
                                   ? kShmBytes
                                   : harness.backend.DeviceBytes(request.cuda_ipc().handle());
  KT_FUZZ_CHECK(buffer.size_bytes() >= 1 && buffer.size_bytes() <= memory_bytes,
                absl::StrCat("registered ", buffer.size_bytes(), " bytes of ", memory_bytes));
  KT_FUZZ_CHECK(request.size_bytes() == 0 || buffer.size_bytes() == request.size_bytes(),
                absl::StrCat("asked ", request.size_bytes(), ", got ", buffer.size_bytes()));
  pb::ListBuffersRequest list;
  pb::ListBuffersResponse listed;
  KT_FUZZ_CHECK(harness.service->HandleListBuffers(kPeer, &list, &listed).ok() &&
                    listed.buffers_size() == 1 &&
                    listed.buffers(0).buffer_id() == buffer.buffer_id(),
                absl::StrCat("listed ", listed.buffers_size(), " buffers"));
  pb::UnregisterBufferRequest unregister;
  unregister.set_buffer_id(buffer.buffer_id());
  pb::UnregisterBufferResponse unregistered;
  KT_FUZZ_CHECK(
      harness.service->HandleUnregisterBuffer(kPeer, &unregister, &unregistered).ok(),
      buffer.buffer_id());
  return 0;
}
