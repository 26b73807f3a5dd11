// Writing and validating tuned-config files.
#include "client/config_file.h"

#include <algorithm>
#include <cmath>
#include <map>
#include <optional>
#include <tuple>
#include <utility>

#include "absl/status/status.h"
#include "absl/strings/numbers.h"
#include "absl/strings/str_cat.h"
#include "client/cli_common.h"
#include "google/protobuf/struct.pb.h"
#include "google/protobuf/util/json_util.h"
#include "google/protobuf/util/time_util.h"
#include "kernels/device_info.h"
#include "kernels/launch_config.h"
#include "kernels/types.h"
#include "kernels/version.h"

namespace kt::client {
namespace {

namespace pb = ::google::protobuf;
using ::kerntune::v1::TunedConfig;
using ::kerntune::v1::TunedConfigFile;

std::string ProtoMessage(const pb::util::Status& status) {
  return std::string(status.message().data(), status.message().size());
}

pb::Timestamp ToTimestamp(int64_t unix_seconds) {
  return pb::util::TimeUtil::SecondsToTimestamp(unix_seconds);
}

TunedConfig ToProto(const db::BestConfig& row) {
  TunedConfig entry;
  entry.set_op(row.point.op);
  entry.set_dtype(row.point.dtype);
  entry.set_rows(row.point.rows);
  entry.set_cols(row.point.cols);
  entry.set_inner(row.point.inner);
  kerntune::v1::LaunchConfig& config = *entry.mutable_config();
  config.set_impl(row.config.impl);
  config.set_block_size(row.config.block_size);
  config.set_pack_size(row.config.pack_size);
  config.set_thread_group_width(row.config.thread_group_width);
  config.set_rows_per_access(row.config.rows_per_access);
  config.set_grid_waves(row.config.grid_waves);
  config.set_key(row.config.key);
  config.set_split(row.config.split);
  entry.set_median_us(row.median_us);
  if (row.spread_low_us) entry.set_spread_low_us(*row.spread_low_us);
  if (row.spread_high_us) entry.set_spread_high_us(*row.spread_high_us);
  entry.set_gbps(row.gbps);
  entry.set_pct_of_copy(row.pct_of_copy);
  entry.set_graph_replay(row.graph_replay);
  entry.set_heuristic_key(row.heuristic_key);
  if (row.heuristic_us) entry.set_heuristic_us(*row.heuristic_us);
  entry.set_driver_version(row.env.driver_version);
  entry.set_runtime_version(row.env.runtime_version);
  entry.set_kernel_version(row.env.kernel_version);
  *entry.mutable_updated_at() = ToTimestamp(row.updated_at);
  return entry;
}

// Reads a top-level field of the document, under its proto name or its
// lowerCamelCase JSON name (the canonical mapping accepts both).
const pb::Value* FindField(const pb::Struct& object, const std::string& proto_name,
                           const std::string& json_name) {
  auto it = object.fields().find(proto_name);
  if (it == object.fields().end()) it = object.fields().find(json_name);
  return it == object.fields().end() ? nullptr : &it->second;
}

// Checks what tells a tuned-config file from any other JSON, before the
// rest is interpreted (a newer layout may not parse as this one).
absl::Status CheckFormat(const pb::Struct& document) {
  const pb::Value* format = FindField(document, "format", "format");
  if (format == nullptr) {
    return absl::InvalidArgumentError(absl::StrCat(
        "no \"format\" field: not a kerntune tuned-config file (expected "
        "\"format\": \"",
        kConfigFileFormat, "\")"));
  }
  if (format->kind_case() != pb::Value::kStringValue ||
      format->string_value() != kConfigFileFormat) {
    std::string shown;
    (void)pb::util::MessageToJsonString(*format, &shown);
    return absl::InvalidArgumentError(
        absl::StrCat("format=", shown, " is not \"", kConfigFileFormat,
                     "\": not a kerntune tuned-config file"));
  }
  const pb::Value* version =
      FindField(document, "format_version", "formatVersion");
  if (version == nullptr) {
    return absl::InvalidArgumentError(
        "no \"format_version\" field (this kerntune reads format_version 1)");
  }
  double number = 0;
  if (version->kind_case() == pb::Value::kNumberValue) {
    number = version->number_value();
  } else if (version->kind_case() != pb::Value::kStringValue ||
             !absl::SimpleAtod(version->string_value(), &number)) {
    number = -1;
  }
  if (!(number >= 1) || number != std::floor(number)) {
    std::string shown;
    (void)pb::util::MessageToJsonString(*version, &shown);
    return absl::InvalidArgumentError(absl::StrCat(
        "format_version=", shown, " must be a positive integer"));
  }
  if (number > kConfigFileVersion) {
    return absl::FailedPreconditionError(absl::StrCat(
        "format_version=", number, " is newer than this kerntune reads (",
        kConfigFileVersion,
        "); upgrade kerntune to import this file, or export it again with "
        "the kerntune that reads it"));
  }
  return absl::OkStatus();
}

absl::Status CheckSku(const db::GpuSku& sku) {
  if (sku.name.empty()) {
    return absl::InvalidArgumentError("gpu.name is empty (the SKU must be complete)");
  }
  if (sku.cc_major < 1 || sku.cc_minor < 0) {
    return absl::InvalidArgumentError(
        absl::StrCat("gpu.cc_major=", sku.cc_major, " gpu.cc_minor=", sku.cc_minor,
                     " is not a compute capability (the SKU must be complete)"));
  }
  if (sku.sm_count < 1) {
    return absl::InvalidArgumentError(absl::StrCat(
        "gpu.sm_count=", sku.sm_count, " must be >= 1 (the SKU must be complete)"));
  }
  if (sku.total_memory_bytes < 1) {
    return absl::InvalidArgumentError(
        absl::StrCat("gpu.total_memory_bytes=", sku.total_memory_bytes,
                     " must be >= 1 (the SKU must be complete)"));
  }
  return absl::OkStatus();
}

absl::Status CheckTime(absl::string_view field, double value) {
  if (!std::isfinite(value) || value <= 0) {
    return absl::InvalidArgumentError(
        absl::StrCat(field, "=", value, " must be finite and > 0"));
  }
  return absl::OkStatus();
}

absl::Status CheckRate(absl::string_view field, double value) {
  if (!std::isfinite(value) || value < 0) {
    return absl::InvalidArgumentError(
        absl::StrCat(field, "=", value, " must be finite and >= 0"));
  }
  return absl::OkStatus();
}

// The first field of `fields` that disagrees with what `key` says.
absl::Status CheckConfigAgrees(const kerntune::v1::LaunchConfig& fields,
                               const kernels::LaunchConfig& from_key) {
  const auto mismatch = [&](absl::string_view name, const auto& value,
                            const auto& expected) {
    return absl::InvalidArgumentError(absl::StrCat(
        "config.", name, "=", value, " disagrees with config.key=\"", fields.key(),
        "\" (which says ", expected, ")"));
  };
  if (fields.impl() != kernels::ImplName(from_key.impl)) {
    return mismatch("impl", absl::StrCat("\"", fields.impl(), "\""),
                    absl::StrCat("\"", kernels::ImplName(from_key.impl), "\""));
  }
  if (fields.block_size() != from_key.block_size) {
    return mismatch("block_size", fields.block_size(), from_key.block_size);
  }
  if (fields.pack_size() != from_key.pack_size) {
    return mismatch("pack_size", fields.pack_size(), from_key.pack_size);
  }
  if (fields.thread_group_width() != from_key.thread_group_width) {
    return mismatch("thread_group_width", fields.thread_group_width(),
                    from_key.thread_group_width);
  }
  if (fields.rows_per_access() != from_key.rows_per_access) {
    return mismatch("rows_per_access", fields.rows_per_access(),
                    from_key.rows_per_access);
  }
  if (fields.grid_waves() != from_key.grid_waves) {
    return mismatch("grid_waves", fields.grid_waves(), from_key.grid_waves);
  }
  // Files written before split existed have none: 1.
  const int split = fields.split() == 0 ? 1 : fields.split();
  if (split != from_key.split) return mismatch("split", fields.split(), from_key.split);
  return absl::OkStatus();
}

// One entry to a store row, or why it cannot be one.
absl::StatusOr<db::BestConfig> CheckEntry(const TunedConfig& entry,
                                          const kernels::DeviceInfo& device) {
  absl::StatusOr<kernels::Op> op = kernels::ParseOp(entry.op());
  if (!op.ok()) return op.status();
  absl::StatusOr<kernels::DType> dtype = kernels::ParseDType(entry.dtype());
  if (!dtype.ok()) return dtype.status();
  if (entry.rows() < 1) {
    return absl::InvalidArgumentError(
        absl::StrCat("rows=", entry.rows(), " must be >= 1"));
  }
  if (entry.cols() < 1) {
    return absl::InvalidArgumentError(
        absl::StrCat("cols=", entry.cols(), " must be >= 1"));
  }
  // Files written before inner existed have none: a last-axis point.
  if (entry.inner() < 0) {
    return absl::InvalidArgumentError(absl::StrCat(
        "inner=", entry.inner(), " must be >= 1 (0 or absent means 1, the last axis)"));
  }
  const int64_t inner = std::max<int64_t>(entry.inner(), 1);
  if (inner > 1 && !kernels::SupportsInnerAxis(*op)) {
    return absl::InvalidArgumentError(absl::StrCat(
        "inner=", inner, ": ", kernels::OpName(*op), " reduces the last axis only"));
  }
  if (!entry.has_config() || entry.config().key().empty()) {
    return absl::InvalidArgumentError("config.key is missing");
  }
  absl::StatusOr<kernels::LaunchConfig> config =
      kernels::ParseLaunchConfig(entry.config().key());
  if (!config.ok()) return config.status();
  if (absl::Status agrees = CheckConfigAgrees(entry.config(), *config);
      !agrees.ok()) {
    return agrees;
  }
  const kernels::Shape shape{entry.rows(), entry.cols(), inner};
  if (absl::Status valid =
          kernels::ValidateConfig(*op, *dtype, shape, *config, device);
      !valid.ok()) {
    return absl::InvalidArgumentError(absl::StrCat(
        "config ", entry.config().key(), " is not legal on ", device.name,
        ": ", valid.message()));
  }
  if (absl::Status s = CheckTime("median_us", entry.median_us()); !s.ok()) return s;
  if (entry.has_spread_low_us()) {
    if (absl::Status s = CheckTime("spread_low_us", entry.spread_low_us()); !s.ok()) {
      return s;
    }
  }
  if (entry.has_spread_high_us()) {
    if (absl::Status s = CheckTime("spread_high_us", entry.spread_high_us());
        !s.ok()) {
      return s;
    }
  }
  if (entry.has_heuristic_us()) {
    if (absl::Status s = CheckTime("heuristic_us", entry.heuristic_us()); !s.ok()) {
      return s;
    }
  }
  if (absl::Status s = CheckRate("gbps", entry.gbps()); !s.ok()) return s;
  if (absl::Status s = CheckRate("pct_of_copy", entry.pct_of_copy()); !s.ok()) {
    return s;
  }
  if (!entry.heuristic_key().empty()) {
    absl::StatusOr<kernels::LaunchConfig> heuristic =
        kernels::ParseLaunchConfig(entry.heuristic_key());
    if (!heuristic.ok()) {
      return absl::InvalidArgumentError(
          absl::StrCat("heuristic_key: ", heuristic.status().message()));
    }
  }
  if (entry.driver_version() < 0 || entry.runtime_version() < 0) {
    return absl::InvalidArgumentError(absl::StrCat(
        "driver_version=", entry.driver_version(), " runtime_version=",
        entry.runtime_version(), " must be >= 0"));
  }

  db::BestConfig row;
  row.point.op = std::string(kernels::OpName(*op));
  row.point.dtype = std::string(kernels::DTypeName(*dtype));
  row.point.rows = entry.rows();
  row.point.cols = entry.cols();
  row.point.inner = inner;
  row.config.impl = entry.config().impl();
  row.config.block_size = config->block_size;
  row.config.pack_size = config->pack_size;
  row.config.thread_group_width = config->thread_group_width;
  row.config.rows_per_access = config->rows_per_access;
  row.config.grid_waves = config->grid_waves;
  row.config.split = config->split;
  row.config.key = kernels::ConfigKey(*config);
  row.median_us = entry.median_us();
  if (entry.has_spread_low_us()) row.spread_low_us = entry.spread_low_us();
  if (entry.has_spread_high_us()) row.spread_high_us = entry.spread_high_us();
  row.gbps = entry.gbps();
  row.pct_of_copy = entry.pct_of_copy();
  row.graph_replay = entry.graph_replay();
  row.heuristic_key = entry.heuristic_key();
  if (entry.has_heuristic_us()) row.heuristic_us = entry.heuristic_us();
  row.env.driver_version = entry.driver_version();
  row.env.runtime_version = entry.runtime_version();
  row.env.kernel_version = entry.kernel_version();
  row.updated_at = entry.has_updated_at()
                       ? pb::util::TimeUtil::TimestampToSeconds(entry.updated_at())
                       : absl::ToUnixSeconds(absl::Now());
  return row;
}

}  // namespace

TunedConfigFile MakeConfigFile(const db::GpuSku& sku,
                               absl::Span<const db::BestConfig> rows,
                               absl::Time exported_at) {
  TunedConfigFile file;
  file.set_format(kConfigFileFormat);
  file.set_format_version(kConfigFileVersion);
  kerntune::v1::GpuSku& gpu = *file.mutable_gpu();
  gpu.set_name(sku.name);
  gpu.set_cc_major(sku.cc_major);
  gpu.set_cc_minor(sku.cc_minor);
  gpu.set_sm_count(sku.sm_count);
  gpu.set_total_memory_bytes(sku.total_memory_bytes);
  *file.mutable_exported_at() = ToTimestamp(absl::ToUnixSeconds(exported_at));
  file.set_exported_by(absl::StrCat("kerntune (kernels ",
                                    kernels::kKernelLibraryVersion, ")"));
  for (const db::BestConfig& row : rows) *file.add_configs() = ToProto(row);
  return file;
}

absl::StatusOr<std::string> ConfigFileToJson(const TunedConfigFile& file) {
  pb::util::JsonPrintOptions options;
  options.add_whitespace = true;
  options.always_print_primitive_fields = true;
  options.preserve_proto_field_names = true;
  std::string json;
  const pb::util::Status status = pb::util::MessageToJsonString(file, &json, options);
  if (!status.ok()) {
    return absl::InternalError(
        absl::StrCat("cannot write the config file as JSON: ", ProtoMessage(status)));
  }
  if (json.empty() || json.back() != '\n') json += '\n';
  return json;
}

absl::StatusOr<ParsedConfigFile> ParseConfigFile(absl::string_view json) {
  pb::util::JsonParseOptions options;
  // Fields added later within one format_version are skipped, not errors.
  options.ignore_unknown_fields = true;

  // Generic JSON first: the format and version are checked before the rest
  // is read as this layout, and each entry is then parsed on its own.
  pb::Struct document;
  if (pb::util::Status status = pb::util::JsonStringToMessage(
          pb::StringPiece(json.data(), json.size()), &document, options);
      !status.ok()) {
    return absl::InvalidArgumentError(
        absl::StrCat("not a JSON object: ", ProtoMessage(status)));
  }
  if (absl::Status format = CheckFormat(document); !format.ok()) return format;

  pb::Value entries;
  if (auto it = document.fields().find("configs"); it != document.fields().end()) {
    entries = it->second;
    document.mutable_fields()->erase("configs");
  }
  if (entries.kind_case() != pb::Value::kListValue &&
      entries.kind_case() != pb::Value::KIND_NOT_SET &&
      entries.kind_case() != pb::Value::kNullValue) {
    return absl::InvalidArgumentError("\"configs\" must be an array");
  }

  std::string header_json;
  TunedConfigFile header;
  pb::util::Status status = pb::util::MessageToJsonString(document, &header_json);
  if (status.ok()) {
    status = pb::util::JsonStringToMessage(header_json, &header, options);
  }
  if (!status.ok()) {
    return absl::InvalidArgumentError(
        absl::StrCat("bad file header: ", ProtoMessage(status)));
  }

  ParsedConfigFile parsed;
  parsed.sku.name = header.gpu().name();
  parsed.sku.cc_major = header.gpu().cc_major();
  parsed.sku.cc_minor = header.gpu().cc_minor();
  parsed.sku.sm_count = header.gpu().sm_count();
  parsed.sku.total_memory_bytes = header.gpu().total_memory_bytes();
  if (absl::Status sku = CheckSku(parsed.sku); !sku.ok()) return sku;
  absl::StatusOr<kernels::DeviceInfo> device = kernels::DescribeSku(
      parsed.sku.name, parsed.sku.cc_major, parsed.sku.cc_minor,
      parsed.sku.sm_count, parsed.sku.total_memory_bytes);
  if (!device.ok()) {
    return absl::InvalidArgumentError(absl::StrCat(
        "gpu: ", device.status().message(),
        " (configs cannot be checked against its limits)"));
  }
  if (header.has_exported_at()) {
    parsed.exported_at = pb::util::TimeUtil::ToString(header.exported_at());
  }
  parsed.exported_by = header.exported_by();

  // Point -> index of the entry that first claimed it.
  std::map<std::tuple<std::string, std::string, int64_t, int64_t, int64_t>, size_t> seen;
  const int count = entries.list_value().values_size();
  parsed.entries = static_cast<size_t>(count);
  for (int i = 0; i < count; ++i) {
    const pb::Value& value = entries.list_value().values(i);
    const size_t index = static_cast<size_t>(i);
    if (value.kind_case() != pb::Value::kStructValue) {
      parsed.skipped.push_back({index, "not a JSON object"});
      continue;
    }
    std::string entry_json;
    TunedConfig entry;
    pb::util::Status entry_status =
        pb::util::MessageToJsonString(value.struct_value(), &entry_json);
    if (entry_status.ok()) {
      entry_status = pb::util::JsonStringToMessage(entry_json, &entry, options);
    }
    if (!entry_status.ok()) {
      parsed.skipped.push_back(
          {index, absl::StrCat("not a TunedConfig: ", ProtoMessage(entry_status))});
      continue;
    }
    const std::string point = DescribePoint(entry.op(), entry.dtype(), entry.rows(),
                                            entry.cols(), entry.inner());
    absl::StatusOr<db::BestConfig> row = CheckEntry(entry, *device);
    if (!row.ok()) {
      parsed.skipped.push_back(
          {index, absl::StrCat(point, ": ", row.status().message())});
      continue;
    }
    const auto [it, inserted] = seen.emplace(
        std::make_tuple(row->point.op, row->point.dtype, row->point.rows,
                        row->point.cols, row->point.inner),
        index);
    if (!inserted) {
      parsed.skipped.push_back(
          {index, absl::StrCat(point, ": duplicate of entry ", it->second)});
      continue;
    }
    parsed.valid.push_back(*std::move(row));
  }
  return parsed;
}

}  // namespace kt::client
