// `kerntune gpus`: the GPU SKUs in the tuning store, with how much it knows
// about each (tuning runs, best configs, measured candidates).
#ifndef KERNTUNE_CLIENT_GPUS_CLI_H_
#define KERNTUNE_CLIENT_GPUS_CLI_H_

#include <ostream>
#include <string>

#include "client/output_format.h"

namespace kt::client {

struct GpusOptions {
  std::string db_path;  // empty: db::DefaultDatabasePath()
  OutputFormat format = OutputFormat::kTable;
};

// Returns the process exit code (kExitOk, kExitFailure).
int RunGpus(const GpusOptions& options, std::ostream& out, std::ostream& err);

}  // namespace kt::client

#endif  // KERNTUNE_CLIENT_GPUS_CLI_H_
