// kt_buffer_peer: a second client process for the registered-buffer tests
// (its own pid, so the daemon sees another owner). Exec'd, never forked from
// the test: gRPC is not fork-safe once a process has used it.
//   kt_buffer_peer hold TARGET      registers a fresh 4 KiB shm object,
//                                   prints "<shm name> <buffer id>", then
//                                   waits to be killed
//   kt_buffer_peer flood TARGET     registers a fresh 16 MiB shm object,
//                                   prints "<shm name> <buffer id>" once
//                                   its first Run came back (through the
//                                   queue), then runs large Runs until
//                                   killed, so one is in flight
//   kt_buffer_peer intrude TARGET ID   uses and unregisters someone else's
//                                   buffer; prints "run <CODE>",
//                                   "unregister <CODE>", "listed <n>"
// Exit 0 when it could do what it was asked (the codes are the test's to
// judge), 1 otherwise.
#include <unistd.h>

#include <cstdio>
#include <optional>
#include <string>

#include "absl/status/status.h"
#include "client/daemon_client.h"
#include "client/shared_memory.h"

namespace {

namespace pb = ::kerntune::v1;
using kt::client::DaemonClient;

void Announce(const kt::client::SharedMemory& shm, const kt::client::RegisteredBuffer& buffer) {
  std::printf("%s %s\n", shm.name().c_str(), buffer.id().c_str());
  std::fflush(stdout);
}

// A shared-memory object of `bytes`, registered; its name and buffer id
// printed when `announce`. Errors on stderr, nullopt.
struct Registered {
  kt::client::SharedMemory shm;
  kt::client::RegisteredBuffer buffer;
};
std::optional<Registered> RegisterShm(const DaemonClient& client, int64_t bytes, bool announce) {
  absl::StatusOr<kt::client::SharedMemory> shm = kt::client::SharedMemory::Create(bytes);
  if (!shm.ok()) {
    std::fprintf(stderr, "kt_buffer_peer: %s\n", shm.status().ToString().c_str());
    return std::nullopt;
  }
  absl::StatusOr<kt::client::RegisteredBuffer> buffer =
      client.RegisterHostShm(shm->name(), 0, 0, "kt_buffer_peer");
  if (!buffer.ok()) {
    std::fprintf(stderr, "kt_buffer_peer: %s\n", buffer.status().ToString().c_str());
    return std::nullopt;
  }
  if (announce) Announce(*shm, *buffer);
  return Registered{*std::move(shm), *std::move(buffer)};
}

int Hold(const DaemonClient& client) {
  std::optional<Registered> registered = RegisterShm(client, 4096, /*announce=*/true);
  if (!registered) return 1;
  while (true) pause();
}

int Flood(const DaemonClient& client) {
  constexpr int64_t kRows = 1024, kCols = 1024;  // 4 MiB of float32 each way
  std::optional<Registered> registered = RegisterShm(client, 16 << 20, /*announce=*/false);
  if (!registered) return 1;
  const kt::client::RegisteredBuffer* buffer = &registered->buffer;
  kt::client::RunArgs args;
  args.op = pb::OP_SOFTMAX;
  args.dtype = pb::DTYPE_FLOAT32;
  args.rows = kRows;
  args.cols = kCols;
  args.input = buffer->Tensor(0);
  args.output = buffer->Output(8 << 20);
  for (bool first = true;; first = false) {
    if (absl::Status run = client.Run(args).status(); !run.ok()) {
      std::fprintf(stderr, "kt_buffer_peer: %s\n", run.ToString().c_str());
      return 1;
    }
    if (first) Announce(registered->shm, *buffer);
  }
}

std::string CodeName(const absl::Status& status) {
  return absl::StatusCodeToString(status.code());
}

int Intrude(const DaemonClient& client, const std::string& id) {
  kt::client::RunArgs args;
  args.op = pb::OP_SOFTMAX;
  args.dtype = pb::DTYPE_FLOAT32;
  args.rows = 1;
  args.cols = 4;
  args.input = kt::client::BufferTensor(id, 0);
  args.output = kt::client::BufferOutput(id, 256);
  const absl::Status run = client.Run(args).status();
  const absl::Status unregister = client.Unregister(id);
  absl::StatusOr<std::vector<pb::BufferInfo>> listed = client.ListBuffers();
  std::fprintf(stderr, "kt_buffer_peer: run: %s\nkt_buffer_peer: unregister: %s\n",
               run.ToString().c_str(), unregister.ToString().c_str());
  if (!listed.ok()) {
    std::fprintf(stderr, "kt_buffer_peer: %s\n", listed.status().ToString().c_str());
    return 1;
  }
  std::printf("run %s\nunregister %s\nlisted %zu\n", CodeName(run).c_str(),
              CodeName(unregister).c_str(), listed->size());
  return 0;
}

}  // namespace

int main(int argc, char** argv) {
  const std::string mode = argc > 1 ? argv[1] : "";
  if (!(((mode == "hold" || mode == "flood") && argc == 3) ||
        (mode == "intrude" && argc == 4))) {
    std::fprintf(stderr,
                 "usage: kt_buffer_peer hold TARGET | flood TARGET | intrude TARGET BUFFER_ID\n");
    return 2;
  }
  absl::StatusOr<DaemonClient> client = DaemonClient::Connect({argv[2]});
  if (!client.ok()) {
    std::fprintf(stderr, "kt_buffer_peer: %s\n", client.status().ToString().c_str());
    return 1;
  }
  if (mode == "hold") return Hold(*client);
  if (mode == "flood") return Flood(*client);
  return Intrude(*client, argv[3]);
}
