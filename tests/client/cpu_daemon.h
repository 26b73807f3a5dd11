// The fixture of the client's end-to-end tests: a real kerntuned child,
// CPU backend, on a Unix socket in a temp dir (kt_daemon_process); helpers
// to run other programs (the kerntune binary, kt_buffer_peer); random
// tensors and what the CPU backend must answer for them.
#ifndef KERNTUNE_TESTS_CLIENT_CPU_DAEMON_H_
#define KERNTUNE_TESTS_CLIENT_CPU_DAEMON_H_

#include <cstdint>
#include <cstdlib>
#include <memory>
#include <random>
#include <string>
#include <vector>

#include "client/daemon_client.h"
#include "gtest/gtest.h"
#include "kernels/types.h"
#include "tests/server/daemon_process.h"
#include "tests/server/request_values.h"
#include "tests/testing/scoped_temp_dir.h"

namespace kt::client::testing {

class CpuDaemonTest : public ::testing::Test {
 protected:
  // Starts kerntuned --cpu (plus `extra` flags) and waits until it serves.
  void Start(const std::vector<std::string>& extra = {});
  void TearDown() override;

  std::string target() const { return "unix:" + socket_; }
  // A client of the daemon with a 10 s deadline per call.
  DaemonClient Client() const;

  kt::testing::ScopedTempDir dir_;
  const std::string socket_ = dir_.File("run/kerntune.sock");
  std::unique_ptr<server::testing::Daemon> daemon_;
};

struct ProcessResult {
  int code = -1;        // exit code; -1 when it did not exit normally
  std::string out;      // stdout
  std::string err;      // stderr
};

// Runs `argv` (argv[0] a path) to completion, capturing stdout and stderr.
ProcessResult RunProcess(const std::vector<std::string>& argv);

#ifdef KT_KERNTUNE_BINARY
// The kerntune CLI run with `args`: $KERNTUNE_BINARY when set (a bundle on
// a GPU host, whose tests are not where they were built), else the one
// built with these tests (its target defines the path).
inline ProcessResult RunKerntune(std::vector<std::string> args) {
  const char* from_env = std::getenv("KERNTUNE_BINARY");
  args.insert(args.begin(),
              from_env != nullptr && *from_env != '\0' ? from_env : KT_KERNTUNE_BINARY);
  return RunProcess(args);
}
#endif

using server::testing::RandomTensor;
using server::testing::ToKernels;

// What the CPU backend must return: the fp64 reference rounded once to the
// storage dtype, and float stats (LayerNorm).
struct Expected {
  std::string y;
  std::vector<float> mean, inv_std;
};
// For args's op, dtype, shape and epsilon; gamma / beta may be null.
Expected Reference(const RunArgs& args, const std::string& x, const std::string* gamma,
                   const std::string* beta);

}  // namespace kt::client::testing

#endif  // KERNTUNE_TESTS_CLIENT_CPU_DAEMON_H_
