// kerntuned child process helpers (see daemon_process.h).
#include "tests/server/daemon_process.h"

#include <arpa/inet.h>
#include <fcntl.h>
#include <netinet/in.h>
#include <signal.h>
#include <sys/socket.h>
#include <sys/stat.h>
#include <sys/wait.h>
#include <unistd.h>

#include <cstdlib>
#include <fstream>
#include <sstream>
#include <thread>

#include "absl/strings/str_cat.h"

namespace kt::server::testing {

std::string KerntunedBinary() {
  const char* from_env = std::getenv("KERNTUNED_BINARY");
  return from_env != nullptr && *from_env != '\0' ? from_env : KT_KERNTUNED_BINARY;
}

Daemon::Daemon(const std::string& binary, const std::vector<std::string>& args,
               const std::string& log_path)
    : log_(log_path) {
  std::vector<std::string> argv = {binary};
  argv.insert(argv.end(), args.begin(), args.end());
  std::vector<char*> raw;
  for (std::string& arg : argv) raw.push_back(arg.data());
  raw.push_back(nullptr);
  pid_ = fork();
  if (pid_ == 0) {
    const int fd = open(log_path.c_str(), O_WRONLY | O_CREAT | O_TRUNC, 0644);
    if (fd >= 0) {
      dup2(fd, STDOUT_FILENO);
      dup2(fd, STDERR_FILENO);
    }
    execv(raw[0], raw.data());
    _exit(127);
  }
}

Daemon::~Daemon() {
  if (running()) {
    kill(pid_, SIGKILL);
    waitpid(pid_, nullptr, 0);
  }
}

std::optional<int> Daemon::WaitExit(Clock::duration deadline) {
  const auto end = Clock::now() + deadline;
  while (running()) {
    int status = 0;
    const pid_t got = waitpid(pid_, &status, WNOHANG);
    if (got == pid_) {
      exit_status_ = status;
      break;
    }
    if (got < 0 || Clock::now() > end) break;
    std::this_thread::sleep_for(std::chrono::milliseconds(5));
  }
  return exit_status_;
}

std::optional<int> Daemon::Signal(int signal_number, Clock::duration deadline) {
  if (running()) kill(pid_, signal_number);
  return WaitExit(deadline);
}

std::string Daemon::Log() const {
  std::ifstream in(log_);
  std::stringstream text;
  text << in.rdbuf();
  return text.str();
}

std::shared_ptr<grpc::Channel> Connect(const std::string& target,
                                       std::shared_ptr<grpc::ChannelCredentials> credentials) {
  grpc::ChannelArguments args;
  args.SetInt(GRPC_ARG_INITIAL_RECONNECT_BACKOFF_MS, 10);
  args.SetInt(GRPC_ARG_MIN_RECONNECT_BACKOFF_MS, 10);
  args.SetInt(GRPC_ARG_MAX_RECONNECT_BACKOFF_MS, 100);
  // A connection of its own: a channel made after the daemon changed (its
  // certificate, say) never rides an older channel's connection.
  args.SetInt(GRPC_ARG_USE_LOCAL_SUBCHANNEL_POOL, 1);
  // Inline outputs are as large as the inputs (the daemon allows up to
  // --max_request_bytes); gRPC's default client limit is 4 MiB.
  args.SetMaxReceiveMessageSize(-1);
  return grpc::CreateCustomChannel(target, credentials, args);
}

int FreeTcpPort() {
  const int fd = socket(AF_INET, SOCK_STREAM | SOCK_CLOEXEC, 0);
  if (fd < 0) return 0;
  sockaddr_in address{};
  address.sin_family = AF_INET;
  address.sin_addr.s_addr = htonl(INADDR_LOOPBACK);
  socklen_t length = sizeof(address);
  const bool bound = bind(fd, reinterpret_cast<sockaddr*>(&address), sizeof(address)) == 0 &&
                     getsockname(fd, reinterpret_cast<sockaddr*>(&address), &length) == 0;
  close(fd);
  return bound ? ntohs(address.sin_port) : 0;
}

grpc::health::v1::HealthCheckResponse::ServingStatus Health(
    const std::shared_ptr<grpc::Channel>& channel, const std::string& service,
    grpc::Status* status, bool wait_for_ready) {
  auto stub = grpc::health::v1::Health::NewStub(channel);
  grpc::ClientContext context;
  context.set_deadline(std::chrono::system_clock::now() + std::chrono::seconds(5));
  context.set_wait_for_ready(wait_for_ready);
  grpc::health::v1::HealthCheckRequest request;
  request.set_service(service);
  grpc::health::v1::HealthCheckResponse response;
  *status = stub->Check(&context, request, &response);
  return response.status();
}

absl::Status WaitUntilServing(Daemon& daemon, const std::string& socket_path,
                              Clock::duration deadline) {
  const auto end = Clock::now() + deadline;
  struct stat info {};
  while (!(stat(socket_path.c_str(), &info) == 0 && S_ISSOCK(info.st_mode) &&
           (info.st_mode & 0777) == 0660)) {
    if (Clock::now() > end || daemon.WaitExit(std::chrono::seconds(0)).has_value()) {
      return absl::DeadlineExceededError(
          absl::StrCat("kerntuned did not start; its log:\n", daemon.Log()));
    }
    std::this_thread::sleep_for(std::chrono::milliseconds(5));
  }
  grpc::Status status;
  if (Health(Connect("unix:" + socket_path), "", &status, /*wait_for_ready=*/true) !=
      grpc::health::v1::HealthCheckResponse::SERVING) {
    return absl::UnavailableError(absl::StrCat("kerntuned is not serving: ",
                                               status.error_message(), "; its log:\n",
                                               daemon.Log()));
  }
  return absl::OkStatus();
}

}  // namespace kt::server::testing
