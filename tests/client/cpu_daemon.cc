// CpuDaemonTest and RunProcess (cpu_daemon.h).
#include "tests/client/cpu_daemon.h"

#include <fcntl.h>
#include <sys/wait.h>
#include <unistd.h>

#include <chrono>
#include <fstream>
#include <iostream>
#include <sstream>

#include "kernels/host_dtype.h"
#include "kernels/reference.h"

namespace kt::client::testing {

void CpuDaemonTest::Start(const std::vector<std::string>& extra) {
  std::vector<std::string> args = {"--cpu", "--socket=" + socket_, "--db=" + dir_.File("none.db")};
  args.insert(args.end(), extra.begin(), extra.end());
  daemon_ = std::make_unique<server::testing::Daemon>(server::testing::KerntunedBinary(), args,
                                                       dir_.File("kerntuned.log"));
  const absl::Status serving =
      server::testing::WaitUntilServing(*daemon_, socket_, std::chrono::seconds(10));
  ASSERT_TRUE(serving.ok()) << serving;
}

void CpuDaemonTest::TearDown() {
  if (HasFailure() && daemon_ != nullptr) std::cerr << "kerntuned log:\n" << daemon_->Log();
}

DaemonClient CpuDaemonTest::Client() const {
  DaemonClientOptions options;
  options.target = target();
  options.deadline = absl::Seconds(10);
  absl::StatusOr<DaemonClient> client = DaemonClient::Connect(options);
  EXPECT_TRUE(client.ok()) << client.status();
  return *std::move(client);
}

ProcessResult RunProcess(const std::vector<std::string>& argv) {
  ProcessResult result;
  char out_path[] = "/tmp/kt_process_out_XXXXXX";
  char err_path[] = "/tmp/kt_process_err_XXXXXX";
  const int out_fd = mkstemp(out_path);
  const int err_fd = mkstemp(err_path);
  if (out_fd < 0 || err_fd < 0) return result;
  std::vector<char*> raw;
  std::vector<std::string> copy = argv;
  for (std::string& arg : copy) raw.push_back(arg.data());
  raw.push_back(nullptr);
  const pid_t pid = fork();
  if (pid == 0) {
    dup2(out_fd, STDOUT_FILENO);
    dup2(err_fd, STDERR_FILENO);
    execv(raw[0], raw.data());
    _exit(127);
  }
  int status = 0;
  if (pid > 0) waitpid(pid, &status, 0);
  result.code = pid > 0 && WIFEXITED(status) ? WEXITSTATUS(status) : -1;
  for (auto [path, text] : {std::pair<const char*, std::string*>{out_path, &result.out},
                            {err_path, &result.err}}) {
    std::ifstream in(path);
    std::stringstream contents;
    contents << in.rdbuf();
    *text = contents.str();
    unlink(path);
  }
  close(out_fd);
  close(err_fd);
  return result;
}


Expected Reference(const RunArgs& args, const std::string& x, const std::string* gamma,
                   const std::string* beta) {
  Expected want;
  want.y.assign(x.size(), '\0');
  want.mean.resize(args.rows);
  want.inv_std.resize(args.rows);
  kernels::RowOpArgs host;
  host.x = x.data();
  host.y = want.y.data();
  host.gamma = gamma != nullptr ? gamma->data() : nullptr;
  host.beta = beta != nullptr ? beta->data() : nullptr;
  const kernels::Op op = ToKernels(args.op);
  if (kernels::TakesOperand(op, kernels::Operand::kMean)) host.mean = want.mean.data();
  if (kernels::TakesOperand(op, kernels::Operand::kInvStd)) host.inv_std = want.inv_std.data();
  host.params.epsilon = args.epsilon;
  const absl::Status s = kernels::RunReference(op, ToKernels(args.dtype),
                                               {args.rows, args.cols}, host, 0, args.rows,
                                               ToKernels(args.dtype), 1);
  EXPECT_TRUE(s.ok()) << s;
  return want;
}

}  // namespace kt::client::testing
