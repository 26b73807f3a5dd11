// `kerntune tune`: runs the tuning sweep on this machine's GPUs, all at once,
// and writes the results to the tuning store; with --served, over the
// problems a running kerntuned served without a tuned entry for them.
#ifndef KERNTUNE_CLIENT_TUNE_CLI_H_
#define KERNTUNE_CLIENT_TUNE_CLI_H_

#include <cstdint>
#include <ostream>
#include <string>
#include <iterator>
#include <vector>

#include "client/daemon_cli_common.h"
#include "kernels/types.h"

namespace kt::client {

struct TuneCliOptions {
  std::string db_path;  // empty: db::DefaultDatabasePath()
  // The standard grid's groups, unless rows and cols are both given (then
  // every op x dtype x rows x cols).
  std::vector<std::string> groups = {"main", "few_rows", "attention", "axis", "llm"};
  std::vector<kernels::Op> ops = {std::begin(kernels::kAllOps), std::end(kernels::kAllOps)};
  std::vector<kernels::DType> dtypes = {kernels::DType::kFloat32, kernels::DType::kFloat16,
                                        kernels::DType::kBFloat16};
  std::vector<int64_t> rows;
  std::vector<int64_t> cols;
  // Custom grid only (with rows and cols): the inner extents; empty = {1}.
  std::vector<int64_t> inner;
  bool force = false;
  // --devices: "all" (every visible GPU) or a comma list of CUDA ordinals and
  // GPU UUIDs (kernels::SelectDevices). GPUs of one SKU share the grid, each
  // SKU gets the whole grid.
  std::string devices = "all";
  int repetitions = 30;
  std::string command_line;
  // --served: instead of a grid, the problems the daemon at `server` served
  // without a tuned entry for exactly them (ListServedShapes), of the
  // selected GPUs' SKUs; ops and dtypes filter them. db_path empty = the
  // store the daemon reads. With dry_run they are listed, not tuned (with
  // no GPU here, those of every SKU the daemon serves).
  bool served = false;
  bool dry_run = false;
  std::string server;  // client::ResolveTarget; empty = the default socket
  TcpCredentialFiles tcp;
};

// Exit codes: 0 done (with --served: also nothing to tune), 1 failure
// (including "no GPU", or any GPU that stopped on an error while the others
// finished; with --served: no daemon, a CPU-backend daemon, or one whose
// problems are of other SKUs than the GPUs here), 2 usage error (a
// --devices entry that names no visible GPU included), 130 interrupted by
// SIGINT/SIGTERM (completed points are kept; run again to resume).
int RunTuneCommand(const TuneCliOptions& options, std::ostream& out, std::ostream& err);

}  // namespace kt::client

#endif  // KERNTUNE_CLIENT_TUNE_CLI_H_
