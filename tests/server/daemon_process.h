// A kerntuned child process for end-to-end tests: started with arguments,
// always killed and reaped, its log kept; plus channel and health helpers.
#ifndef KERNTUNE_TESTS_SERVER_DAEMON_PROCESS_H_
#define KERNTUNE_TESTS_SERVER_DAEMON_PROCESS_H_

#include <sys/types.h>

#include <chrono>
#include <memory>
#include <optional>
#include <string>
#include <vector>

#include "absl/status/status.h"
#include "grpcpp/grpcpp.h"
#include "proto/health.grpc.pb.h"

namespace kt::server::testing {

using Clock = std::chrono::steady_clock;

// The kerntuned to test: $KERNTUNED_BINARY when set (a bundle on a GPU
// host, where the build tree does not exist), else the one built beside the
// tests.
std::string KerntunedBinary();

// A child process running `binary args...` with stdout and stderr in
// `log_path`; SIGKILLed and reaped on destruction if still running.
class Daemon {
 public:
  Daemon(const std::string& binary, const std::vector<std::string>& args,
         const std::string& log_path);
  ~Daemon();
  Daemon(const Daemon&) = delete;
  Daemon& operator=(const Daemon&) = delete;

  bool running() const { return pid_ > 0 && !exit_status_.has_value(); }
  pid_t pid() const { return pid_; }
  // The wait status once it exited within `deadline`, else nullopt.
  std::optional<int> WaitExit(Clock::duration deadline);
  // Sends `signal_number`, then WaitExit(deadline).
  std::optional<int> Signal(int signal_number, Clock::duration deadline);
  std::string Log() const;

 private:
  std::string log_;
  pid_t pid_ = -1;
  std::optional<int> exit_status_;
};

// A channel with a short reconnect backoff (the tests talk to daemons that
// are just starting) and no limit on the size of responses; plaintext
// unless `credentials` are given.
std::shared_ptr<grpc::Channel> Connect(
    const std::string& target,
    std::shared_ptr<grpc::ChannelCredentials> credentials = grpc::InsecureChannelCredentials());

// A TCP port on 127.0.0.1 that was free a moment ago, for --tcp.
int FreeTcpPort();

// grpc.health.v1 Check of `service` ("" = the whole server).
grpc::health::v1::HealthCheckResponse::ServingStatus Health(
    const std::shared_ptr<grpc::Channel>& channel, const std::string& service,
    grpc::Status* status, bool wait_for_ready = false);

// Waits until the daemon has chmodded `socket_path` to 0660 (it does so once
// its server has started) and answers SERVING. An error quoting its log
// when it exits or `deadline` passes first.
absl::Status WaitUntilServing(Daemon& daemon, const std::string& socket_path,
                              Clock::duration deadline);

}  // namespace kt::server::testing

#endif  // KERNTUNE_TESTS_SERVER_DAEMON_PROCESS_H_
