// Writing and validating tuned-config files (config_file.h).
#include "proto/config_file.h"

#include <algorithm>
#include <cmath>
#include <map>
#include <optional>
#include <tuple>
#include <utility>

#include "absl/status/status.h"
#include "absl/strings/ascii.h"
#include "absl/strings/numbers.h"
#include "absl/strings/str_cat.h"
#include "absl/strings/str_format.h"
#include "absl/strings/match.h"
#include "google/protobuf/struct.pb.h"
#include "google/protobuf/util/json_util.h"
#include "google/protobuf/util/time_util.h"
#include "kernels/device_info.h"
#include "kernels/launch_config.h"
#include "kernels/types.h"
#include "kernels/version.h"
#include "proto/convert.h"

namespace kt::proto {
namespace {

namespace gpb = ::google::protobuf;
using ::kerntune::v1::TunedConfig;
using ::kerntune::v1::TunedConfigFile;

// `text` safe to print: bytes outside printable ASCII as \xNN, so that a
// binary file given by mistake cannot put raw bytes on a terminal.
std::string Printable(absl::string_view text) {
  std::string shown;
  for (const char c : text) {
    if (c >= 0x20 && c < 0x7f) {
      shown += c;
    } else {
      absl::StrAppendFormat(&shown, "\\x%02x", static_cast<unsigned char>(c));
    }
  }
  return shown;
}

// Protobuf's message without the excerpt of the input it quotes on the
// following lines.
std::string ProtoMessage(const gpb::util::Status& status) {
  const absl::string_view message(status.message().data(), status.message().size());
  return Printable(message.substr(0, message.find('\n')));
}

// The first JSON syntax error of a text (RFC 8259) with its line and column;
// protobuf's parser says what went wrong but not where.
class JsonSyntaxChecker {
 public:
  explicit JsonSyntaxChecker(absl::string_view text) : text_(text) {}

  // Empty when the text is one JSON value with only white space around it.
  std::optional<std::string> FirstError() {
    SkipSpace();
    if (!Value(0)) return error_;
    SkipSpace();
    if (pos_ < text_.size()) {
      Fail("the end of the input after the top-level value");
      return error_;
    }
    return std::nullopt;
  }

 private:
  // Deeper documents are refused rather than risk the stack.
  static constexpr int kMaxDepth = 512;

  bool Value(int depth) {
    if (depth > kMaxDepth) return Fail(absl::StrCat("at most ", kMaxDepth, " nested levels"));
    if (pos_ >= text_.size()) return Fail("a value");
    switch (text_[pos_]) {
      case '{':
        return Members(depth, '}', /*keyed=*/true);
      case '[':
        return Members(depth, ']', /*keyed=*/false);
      case '"':
        return String();
      case 't':
        return Word("true");
      case 'f':
        return Word("false");
      case 'n':
        return Word("null");
      default:
        return Number();
    }
  }

  // An object (`keyed`: "key": value members) or an array, at its opening
  // bracket.
  bool Members(int depth, char close, bool keyed) {
    ++pos_;
    SkipSpace();
    if (Peek(close)) {
      ++pos_;
      return true;
    }
    while (true) {
      if (keyed) {
        if (!Peek('"')) return Fail("a string key");
        if (!String()) return false;
        SkipSpace();
        if (!Peek(':')) return Fail("':' after the key");
        ++pos_;
        SkipSpace();
      }
      if (!Value(depth + 1)) return false;
      SkipSpace();
      if (Peek(close)) {
        ++pos_;
        return true;
      }
      if (!Peek(',')) return Fail(absl::StrCat("',' or '", std::string(1, close), "'"));
      ++pos_;
      SkipSpace();
    }
  }

  bool String() {
    ++pos_;  // the opening quote
    while (pos_ < text_.size()) {
      const unsigned char c = static_cast<unsigned char>(text_[pos_]);
      if (c == '"') {
        ++pos_;
        return true;
      }
      if (c < 0x20) return Fail("a character of the string (control characters are escaped)");
      if (c != '\\') {
        ++pos_;
        continue;
      }
      ++pos_;
      if (pos_ >= text_.size()) break;
      if (text_[pos_] == 'u') {
        for (int i = 1; i <= 4; ++i) {
          if (pos_ + i >= text_.size() || !absl::ascii_isxdigit(text_[pos_ + i])) {
            pos_ += i;
            return Fail("four hex digits after \\u");
          }
        }
        pos_ += 5;
      } else if (OneOf("\"\\/bfnrt", text_[pos_])) {
        ++pos_;
      } else {
        return Fail("an escape (\\\", \\\\, \\/, \\b, \\f, \\n, \\r, \\t or \\u)");
      }
    }
    return Fail("the closing '\"' of the string");
  }

  bool Word(absl::string_view word) {
    for (size_t i = 0; i < word.size(); ++i, ++pos_) {
      if (pos_ >= text_.size() || text_[pos_] != word[i]) {
        return Fail(absl::StrCat("\"", word, "\""));
      }
    }
    return true;
  }

  // -? (0 | [1-9][0-9]*) (.[0-9]+)? ([eE][+-]?[0-9]+)?
  bool Number() {
    if (Peek('-')) ++pos_;
    if (Peek('0')) {
      ++pos_;
    } else if (!Digits()) {
      return Fail("a value (an object, array, string, number, true, false or null)");
    }
    if (Peek('.')) {
      ++pos_;
      if (!Digits()) return Fail("a digit after the decimal point");
    }
    if (Peek('e') || Peek('E')) {
      ++pos_;
      if (Peek('+') || Peek('-')) ++pos_;
      if (!Digits()) return Fail("a digit of the exponent");
    }
    return true;
  }

  // One or more digits.
  bool Digits() {
    const size_t start = pos_;
    while (pos_ < text_.size() && absl::ascii_isdigit(text_[pos_])) ++pos_;
    return pos_ > start;
  }

  bool Peek(char c) const { return pos_ < text_.size() && text_[pos_] == c; }
  static bool OneOf(absl::string_view set, char c) {
    return set.find(c) != absl::string_view::npos;
  }

  void SkipSpace() {
    while (pos_ < text_.size() && OneOf(" \t\r\n", text_[pos_])) ++pos_;
  }

  // Records "line L, column C: expected X, found Y" at the current position.
  bool Fail(absl::string_view expected) {
    int line = 1;
    size_t line_start = 0;
    for (size_t i = 0; i < pos_ && i < text_.size(); ++i) {
      if (text_[i] == '\n') {
        ++line;
        line_start = i + 1;
      }
    }
    std::string found = "the end of the input";
    if (pos_ < text_.size()) {
      const char c = text_[pos_];
      found = c >= 0x21 && c < 0x7f ? absl::StrCat("'", std::string(1, c), "'")
                                    : absl::StrFormat("byte 0x%02x", static_cast<unsigned char>(c));
    }
    error_ = absl::StrCat("line ", line, ", column ", pos_ - line_start + 1, ": expected ",
                          expected, ", found ", found);
    return false;
  }

  absl::string_view text_;
  size_t pos_ = 0;
  std::string error_;
};

// The first bytes of every SQLite database file.
constexpr absl::string_view kSqliteHeader("SQLite format 3\0", 16);

gpb::Timestamp ToTimestamp(int64_t unix_seconds) {
  return gpb::util::TimeUtil::SecondsToTimestamp(unix_seconds);
}

// One store row as a file entry; InvalidArgument when its config key is not
// one this kerntune reads.
absl::StatusOr<TunedConfig> EntryToProto(const db::BestConfig& row) {
  absl::StatusOr<kernels::LaunchConfig> config = kernels::ParseLaunchConfig(row.config.key);
  if (!config.ok()) {
    return absl::InvalidArgumentError(absl::StrCat(
        db::DescribePoint(row.point.op, row.point.dtype, row.point.rows, row.point.cols,
                          row.point.inner),
        ": ", config.status().message(), " (written by a newer kerntune?)"));
  }
  TunedConfig entry;
  entry.set_op(row.point.op);
  entry.set_dtype(row.point.dtype);
  entry.set_rows(row.point.rows);
  entry.set_cols(row.point.cols);
  entry.set_inner(row.point.inner);
  *entry.mutable_config() = LaunchConfigToProto(*config);
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
const gpb::Value* FindField(const gpb::Struct& object, const std::string& proto_name,
                           const std::string& json_name) {
  auto it = object.fields().find(proto_name);
  if (it == object.fields().end()) it = object.fields().find(json_name);
  return it == object.fields().end() ? nullptr : &it->second;
}

// Checks what tells a tuned-config file from any other JSON, before the
// rest is interpreted (a newer layout may not parse as this one).
absl::Status CheckFormat(const gpb::Struct& document) {
  const gpb::Value* format = FindField(document, "format", "format");
  if (format == nullptr) {
    return absl::InvalidArgumentError(absl::StrCat(
        "no \"format\" field: not a kerntune tuned-config file (expected "
        "\"format\": \"",
        kConfigFileFormat, "\")"));
  }
  if (format->kind_case() != gpb::Value::kStringValue ||
      format->string_value() != kConfigFileFormat) {
    std::string shown;
    (void)gpb::util::MessageToJsonString(*format, &shown);
    return absl::InvalidArgumentError(
        absl::StrCat("format=", shown, " is not \"", kConfigFileFormat,
                     "\": not a kerntune tuned-config file"));
  }
  const gpb::Value* version =
      FindField(document, "format_version", "formatVersion");
  if (version == nullptr) {
    return absl::InvalidArgumentError(
        "no \"format_version\" field (this kerntune reads format_version 1)");
  }
  double number = 0;
  if (version->kind_case() == gpb::Value::kNumberValue) {
    number = version->number_value();
  } else if (version->kind_case() != gpb::Value::kStringValue ||
             !absl::SimpleAtod(version->string_value(), &number)) {
    number = -1;
  }
  if (!(number >= 1) || number != std::floor(number)) {
    std::string shown;
    (void)gpb::util::MessageToJsonString(*version, &shown);
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
  absl::StatusOr<kernels::LaunchConfig> config = LaunchConfigFromProto(entry.config());
  if (!config.ok()) return config.status();
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
  row.config.impl = std::string(kernels::ImplName(config->impl));
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
                       ? gpb::util::TimeUtil::TimestampToSeconds(entry.updated_at())
                       : absl::ToUnixSeconds(absl::Now());
  return row;
}

}  // namespace

absl::StatusOr<TunedConfigFile> MakeConfigFile(const db::GpuSku& sku,
                                               absl::Span<const db::BestConfig> rows,
                                               absl::Time exported_at) {
  TunedConfigFile file;
  file.set_format(kConfigFileFormat);
  file.set_format_version(kConfigFileVersion);
  *file.mutable_gpu() = SkuToProto(sku);
  *file.mutable_exported_at() = ToTimestamp(absl::ToUnixSeconds(exported_at));
  file.set_exported_by(absl::StrCat("kerntune (kernels ", kernels::kKernelLibraryVersion, ")"));
  for (const db::BestConfig& row : rows) {
    absl::StatusOr<TunedConfig> entry = EntryToProto(row);
    if (!entry.ok()) return entry.status();
    *file.add_configs() = *std::move(entry);
  }
  return file;
}

absl::StatusOr<std::string> ConfigFileToJson(const TunedConfigFile& file) {
  gpb::util::JsonPrintOptions options;
  options.add_whitespace = true;
  options.always_print_primitive_fields = true;
  options.preserve_proto_field_names = true;
  std::string json;
  const gpb::util::Status status = gpb::util::MessageToJsonString(file, &json, options);
  if (!status.ok()) {
    return absl::InternalError(
        absl::StrCat("cannot write the config file as JSON: ", ProtoMessage(status)));
  }
  if (json.empty() || json.back() != '\n') json += '\n';
  return json;
}

bool IsSqliteFile(absl::string_view bytes) { return absl::StartsWith(bytes, kSqliteHeader); }

absl::StatusOr<ParsedConfigFile> ParseConfigFile(absl::string_view json) {
  if (IsSqliteFile(json)) {
    return absl::InvalidArgumentError(
        "this is a SQLite tuning store, not a tuned-config file; use --db=<file> to read it");
  }
  if (std::optional<std::string> error = JsonSyntaxChecker(json).FirstError()) {
    return absl::InvalidArgumentError(absl::StrCat("not valid JSON: ", *error));
  }
  gpb::util::JsonParseOptions options;
  // Fields added later within one format_version are skipped, not errors.
  options.ignore_unknown_fields = true;

  // Generic JSON first: the format and version are checked before the rest
  // is read as this layout, and each entry is then parsed on its own.
  gpb::Struct document;
  if (gpb::util::Status status = gpb::util::JsonStringToMessage(
          gpb::StringPiece(json.data(), json.size()), &document, options);
      !status.ok()) {
    return absl::InvalidArgumentError(
        absl::StrCat("not a JSON object: ", ProtoMessage(status)));
  }
  if (absl::Status format = CheckFormat(document); !format.ok()) return format;

  gpb::Value entries;
  if (auto it = document.fields().find("configs"); it != document.fields().end()) {
    entries = it->second;
    document.mutable_fields()->erase("configs");
  }
  if (entries.kind_case() != gpb::Value::kListValue &&
      entries.kind_case() != gpb::Value::KIND_NOT_SET &&
      entries.kind_case() != gpb::Value::kNullValue) {
    return absl::InvalidArgumentError("\"configs\" must be an array");
  }

  std::string header_json;
  TunedConfigFile header;
  gpb::util::Status status = gpb::util::MessageToJsonString(document, &header_json);
  if (status.ok()) {
    status = gpb::util::JsonStringToMessage(header_json, &header, options);
  }
  if (!status.ok()) {
    return absl::InvalidArgumentError(
        absl::StrCat("bad file header: ", ProtoMessage(status)));
  }

  ParsedConfigFile parsed;
  parsed.sku = SkuFromProto(header.gpu());
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
    parsed.exported_at = gpb::util::TimeUtil::ToString(header.exported_at());
  }
  parsed.exported_by = header.exported_by();

  // Point -> index of the entry that first claimed it.
  std::map<std::tuple<std::string, std::string, int64_t, int64_t, int64_t>, size_t> seen;
  const int count = entries.list_value().values_size();
  parsed.entries = static_cast<size_t>(count);
  for (int i = 0; i < count; ++i) {
    const gpb::Value& value = entries.list_value().values(i);
    const size_t index = static_cast<size_t>(i);
    if (value.kind_case() != gpb::Value::kStructValue) {
      parsed.skipped.push_back({index, "not a JSON object"});
      continue;
    }
    std::string entry_json;
    TunedConfig entry;
    gpb::util::Status entry_status =
        gpb::util::MessageToJsonString(value.struct_value(), &entry_json);
    if (entry_status.ok()) {
      entry_status = gpb::util::JsonStringToMessage(entry_json, &entry, options);
    }
    if (!entry_status.ok()) {
      parsed.skipped.push_back(
          {index, absl::StrCat("not a TunedConfig: ", ProtoMessage(entry_status))});
      continue;
    }
    const std::string point = db::DescribePoint(entry.op(), entry.dtype(), entry.rows(),
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

}  // namespace kt::proto
