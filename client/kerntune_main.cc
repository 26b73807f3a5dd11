// kerntune: the command-line tool. Flags are parsed here and handed to the
// verb as an options struct.
#include <cstdio>
#include <string>
#include <vector>

#include "absl/flags/flag.h"
#include "absl/flags/parse.h"
#include "absl/flags/usage.h"
#include "client/demo.h"

ABSL_FLAG(std::string, op, "softmax", "softmax, log_softmax or layer_norm");
ABSL_FLAG(std::string, dtype, "float16", "float32, float16 or bfloat16");
ABSL_FLAG(int64_t, rows, 4096, "rows of the (rows, cols) input");
ABSL_FLAG(int64_t, cols, 1024, "cols of the (rows, cols) input (the reduced axis)");
ABSL_FLAG(bool, cpu, false, "use the CPU reference backend even if a GPU is present");

namespace {

constexpr char kUsage[] =
    "kerntune <verb> [flags]\n"
    "verbs:\n"
    "  demo   run one op on random data on this machine (GPU with the heuristic\n"
    "         config, else the CPU reference backend) and check it:\n"
    "         kerntune demo --op=layer_norm --dtype=bfloat16 --rows=4096 --cols=4096\n";

int Demo() {
  kt::client::DemoOptions o;
  absl::StatusOr<kt::kernels::Op> op = kt::kernels::ParseOp(absl::GetFlag(FLAGS_op));
  absl::StatusOr<kt::kernels::DType> dtype = kt::kernels::ParseDType(absl::GetFlag(FLAGS_dtype));
  if (!op.ok() || !dtype.ok()) {
    std::fprintf(stderr, "kerntune: %s\n",
                 (!op.ok() ? op.status() : dtype.status()).ToString().c_str());
    return 2;
  }
  o.op = *op;
  o.dtype = *dtype;
  o.shape = {absl::GetFlag(FLAGS_rows), absl::GetFlag(FLAGS_cols)};
  if (o.shape.rows < 1 || o.shape.cols < 1) {
    std::fprintf(stderr, "kerntune: --rows and --cols must be >= 1\n");
    return 2;
  }
  o.force_cpu = absl::GetFlag(FLAGS_cpu);
  const absl::Status status = kt::client::RunDemo(o);
  if (!status.ok()) {
    std::fprintf(stderr, "kerntune demo: %s\n", status.ToString().c_str());
    return 1;
  }
  return 0;
}

}  // namespace

int main(int argc, char** argv) {
  absl::SetProgramUsageMessage(kUsage);
  const std::vector<char*> args = absl::ParseCommandLine(argc, argv);
  if (args.size() < 2) {
    std::fprintf(stderr, "%s", kUsage);
    return 2;
  }
  const std::string verb = args[1];
  if (verb == "demo") return Demo();
  std::fprintf(stderr, "kerntune: unknown verb \"%s\"\n%s", verb.c_str(), kUsage);
  return 2;
}
