// Shared pieces of the CLI's daemon verbs (daemon_cli_common.h).
#include "client/daemon_cli_common.h"

#include <algorithm>

#include "client/cli_common.h"

namespace kt::client {

int ReportDaemonError(absl::string_view verb, const absl::Status& status, std::ostream& err) {
  err << "kerntune " << verb << ": " << status.message() << "\n";
  if (absl::IsUnavailable(status)) {
    err << "kerntune " << verb
        << ": is kerntuned running there? Start it, or point --server at its socket "
           "(unix:PATH) or host:port\n";
  } else if (absl::IsDeadlineExceeded(status)) {
    err << "kerntune " << verb << ": the daemon did not answer in time\n";
  } else if (absl::IsUnimplemented(status)) {
    err << "kerntune " << verb << ": the daemon does not serve this call (an older kerntuned?)\n";
  }
  return kExitFailure;
}

void WriteLabelledLines(const LabelledLines& lines, std::ostream& out) {
  size_t width = 0;
  for (const auto& line : lines) width = std::max(width, line.first.size());
  for (const auto& [label, value] : lines) {
    out << label << std::string(width - label.size() + 2, ' ') << value << "\n";
  }
}

absl::string_view ConfigSourceName(pb::ConfigSource source) {
  switch (source) {
    case pb::CONFIG_SOURCE_TUNED:
      return "tuned";
    case pb::CONFIG_SOURCE_NEAREST_TUNED:
      return "nearest";
    case pb::CONFIG_SOURCE_HEURISTIC:
      return "heuristic";
    case pb::CONFIG_SOURCE_CPU_REFERENCE:
      return "cpu";
    default:
      return "unknown";
  }
}

pb::Op OpToProto(kernels::Op op) {
  switch (op) {
    case kernels::Op::kSoftmax:
      return pb::OP_SOFTMAX;
    case kernels::Op::kLogSoftmax:
      return pb::OP_LOG_SOFTMAX;
    case kernels::Op::kLayerNorm:
      return pb::OP_LAYER_NORM;
    case kernels::Op::kRmsNorm:
      return pb::OP_RMS_NORM;
    case kernels::Op::kReduceScale:
      return pb::OP_REDUCE_SCALE;
    case kernels::Op::kScaledMaskedSoftmax:
      return pb::OP_SCALED_MASKED_SOFTMAX;
  }
  return pb::OP_UNSPECIFIED;
}

pb::DType DTypeToProto(kernels::DType dtype) {
  switch (dtype) {
    case kernels::DType::kFloat32:
      return pb::DTYPE_FLOAT32;
    case kernels::DType::kFloat16:
      return pb::DTYPE_FLOAT16;
    case kernels::DType::kBFloat16:
      return pb::DTYPE_BFLOAT16;
  }
  return pb::DTYPE_UNSPECIFIED;
}

}  // namespace kt::client
