// The tuned-config file: writing, reading back, and every check of import.
#include "proto/config_file.h"

#include <cmath>
#include <string>
#include <vector>

#include "absl/strings/str_cat.h"
#include "absl/time/time.h"
#include "gmock/gmock.h"
#include "google/protobuf/struct.pb.h"
#include "google/protobuf/util/json_util.h"
#include "gtest/gtest.h"
#include "tests/proto/test_skus.h"
#include "tuner/backend.h"
#include "kernels/device_info.h"
#include "kernels/launch_config.h"
#include "kernels/version.h"

namespace kt::proto {
namespace {

namespace gpb = ::google::protobuf;
using ::kerntune::v1::TunedConfig;
using ::kerntune::v1::TunedConfigFile;
using ::kt::proto::testing::A100Sku;
using ::kt::proto::testing::H100Sku;
using ::testing::HasSubstr;

constexpr int64_t kFixtureTime = 1714564800;  // 2024-05-01 12:00:00 UTC

// MakeConfigFile of rows this kerntune reads.
TunedConfigFile MakeFile(const db::GpuSku& sku, const std::vector<db::BestConfig>& rows,
                         absl::Time exported_at) {
  absl::StatusOr<TunedConfigFile> file = MakeConfigFile(sku, rows, exported_at);
  EXPECT_TRUE(file.ok()) << file.status();
  return file.ok() ? *std::move(file) : TunedConfigFile();
}

// A legal row of `sku`: the heuristic config of the point.
db::BestConfig LegalRow(const db::GpuSku& sku, const std::string& op,
                        const std::string& dtype, int64_t rows, int64_t cols) {
  const kernels::DeviceInfo device =
      *kernels::DescribeSku(sku.name, sku.cc_major, sku.cc_minor, sku.sm_count,
                            sku.total_memory_bytes);
  const kernels::LaunchConfig config =
      *kernels::HeuristicConfig(*kernels::ParseOp(op), *kernels::ParseDType(dtype),
                                {rows, cols}, device);
  db::BestConfig row;
  row.point = {0, op, dtype, rows, cols};
  row.config = tuner::ConfigRecordOf(config);
  row.median_us = 41.25;
  row.spread_low_us = 40.5;
  row.spread_high_us = 43.0;
  row.gbps = 2890.123456789;
  row.pct_of_copy = 91.5;
  row.graph_replay = true;
  row.heuristic_key = kernels::ConfigKey(config);
  row.heuristic_us = 41.25;
  row.env = {12040, 12030, kernels::kKernelLibraryVersion};
  row.updated_at = kFixtureTime;
  return row;
}

std::vector<db::BestConfig> LegalRows() {
  return {LegalRow(H100Sku(), "softmax", "float16", 49152, 4096),
          LegalRow(H100Sku(), "layer_norm", "bfloat16", 49152, 1024),
          LegalRow(H100Sku(), "log_softmax", "float32", 1024, 128)};
}

TunedConfigFile LegalFile() {
  return MakeFile(H100Sku(), LegalRows(),
                        absl::FromUnixSeconds(kFixtureTime));
}

std::string ToJson(const TunedConfigFile& file) { return *ConfigFileToJson(file); }

TEST(ConfigFileTest, WritesDocumentedJson) {
  const std::string json = ToJson(LegalFile());
  EXPECT_THAT(json, HasSubstr("\"format\": \"kerntune.tuned_configs\""));
  EXPECT_THAT(json, HasSubstr("\"format_version\": 1"));
  EXPECT_THAT(json, HasSubstr("\"name\": \"NVIDIA H100 80GB HBM3\""));
  EXPECT_THAT(json, HasSubstr("\"total_memory_bytes\": \"85520809984\""));
  EXPECT_THAT(json, HasSubstr("\"exported_at\": \"2024-05-01T12:00:00Z\""));
  EXPECT_THAT(json, HasSubstr("\"grid_waves\": "));  // zeros written too
  EXPECT_THAT(json, HasSubstr("\"kernel_version\": \"0."));
}

TEST(ConfigFileTest, RoundTripsExactly) {
  const absl::StatusOr<ParsedConfigFile> parsed =
      ParseConfigFile(ToJson(LegalFile()));
  ASSERT_TRUE(parsed.ok()) << parsed.status();
  EXPECT_EQ(parsed->sku, H100Sku());
  EXPECT_EQ(parsed->exported_at, "2024-05-01T12:00:00Z");
  EXPECT_EQ(parsed->entries, 3u);
  EXPECT_TRUE(parsed->skipped.empty());
  const std::vector<db::BestConfig> rows = LegalRows();
  ASSERT_EQ(parsed->valid.size(), rows.size());
  for (size_t i = 0; i < rows.size(); ++i) {
    const db::BestConfig& got = parsed->valid[i];
    EXPECT_EQ(got.point, rows[i].point);
    EXPECT_EQ(got.config, rows[i].config);
    EXPECT_EQ(got.median_us, rows[i].median_us);
    EXPECT_EQ(got.spread_low_us, rows[i].spread_low_us);
    EXPECT_EQ(got.spread_high_us, rows[i].spread_high_us);
    EXPECT_EQ(got.gbps, rows[i].gbps);  // exact: shortest round-trip decimal
    EXPECT_EQ(got.pct_of_copy, rows[i].pct_of_copy);
    EXPECT_EQ(got.graph_replay, rows[i].graph_replay);
    EXPECT_EQ(got.heuristic_key, rows[i].heuristic_key);
    EXPECT_EQ(got.heuristic_us, rows[i].heuristic_us);
    EXPECT_EQ(got.env, rows[i].env);
    EXPECT_EQ(got.updated_at, rows[i].updated_at);
    EXPECT_FALSE(got.run_id.has_value());
  }
}

TEST(ConfigFileTest, AbsentOptionalTimesStayAbsent) {
  std::vector<db::BestConfig> rows = {LegalRows().front()};
  rows[0].heuristic_us.reset();
  rows[0].spread_low_us.reset();
  rows[0].spread_high_us.reset();
  const std::string json =
      ToJson(MakeFile(H100Sku(), rows, absl::UnixEpoch()));
  EXPECT_THAT(json, ::testing::Not(HasSubstr("heuristic_us")));
  const absl::StatusOr<ParsedConfigFile> parsed = ParseConfigFile(json);
  ASSERT_TRUE(parsed.ok()) << parsed.status();
  ASSERT_EQ(parsed->valid.size(), 1u);
  EXPECT_FALSE(parsed->valid[0].heuristic_us.has_value());
  EXPECT_FALSE(parsed->valid[0].spread_low_us.has_value());
}

TEST(ConfigFileTest, AcceptsCamelCaseNamesAndNumbersForInt64) {
  // The canonical mapping's lowerCamelCase names and int64 as JSON numbers.
  const std::string json = R"({
    "format": "kerntune.tuned_configs", "formatVersion": 1,
    "gpu": {"name": "NVIDIA H100 80GB HBM3", "ccMajor": 9, "ccMinor": 0,
            "smCount": 132, "totalMemoryBytes": 85520809984},
    "configs": [{"op": "softmax", "dtype": "fp16", "rows": 1024, "cols": 1024,
                 "config": {"impl": "warp", "blockSize": 128, "packSize": 8,
                            "threadGroupWidth": 32, "rowsPerAccess": 1,
                            "gridWaves": 0, "key": "warp/b128/p8/g32/r1/w0"},
                 "medianUs": 5.5, "gbps": 700, "pctOfCopy": 20}]})";
  const absl::StatusOr<ParsedConfigFile> parsed = ParseConfigFile(json);
  ASSERT_TRUE(parsed.ok()) << parsed.status();
  EXPECT_EQ(parsed->sku, H100Sku());
  ASSERT_EQ(parsed->valid.size(), 1u) << parsed->skipped[0].reason;
  EXPECT_EQ(parsed->valid[0].point.dtype, "float16");  // canonical name stored
}

// --- file-level errors: nothing usable --------------------------------------

void ExpectFileError(const std::string& json, absl::StatusCode code,
                     const std::string& message) {
  const absl::StatusOr<ParsedConfigFile> parsed = ParseConfigFile(json);
  ASSERT_FALSE(parsed.ok()) << json;
  EXPECT_EQ(parsed.status().code(), code) << parsed.status();
  EXPECT_THAT(std::string(parsed.status().message()), HasSubstr(message));
}

// The legal file as a generic JSON object, to damage it.
gpb::Struct LegalDocument() {
  gpb::Struct document;
  EXPECT_TRUE(gpb::util::JsonStringToMessage(ToJson(LegalFile()), &document).ok());
  return document;
}

std::string DocumentJson(const gpb::Struct& document) {
  std::string json;
  EXPECT_TRUE(gpb::util::MessageToJsonString(document, &json).ok());
  return json;
}

TEST(ConfigFileTest, RefusesTextThatIsNotJson) {
  ExpectFileError("this is not json", absl::StatusCode::kInvalidArgument,
                  "not valid JSON: line 1, column 2: expected \"true\", found 'h'");
  ExpectFileError("[1, 2]", absl::StatusCode::kInvalidArgument, "not a JSON object");
  ExpectFileError("", absl::StatusCode::kInvalidArgument,
                  "not valid JSON: line 1, column 1: expected a value, found the end of the input");
}

TEST(ConfigFileTest, ASyntaxErrorIsReportedByLineAndColumn) {
  ExpectFileError("{\n  \"format\": \"kerntune.tuned_configs\",\n"
                  "  \"gpu\": {\"name\": \"x\" oops}\n}",
                  absl::StatusCode::kInvalidArgument,
                  "not valid JSON: line 3, column 23: expected ',' or '}', found 'o'");
  ExpectFileError("{\"configs\": [1, 2,]}", absl::StatusCode::kInvalidArgument,
                  "line 1, column 19: expected a value (an object, array, string, number, "
                  "true, false or null), found ']'");
  ExpectFileError("{\"a\": \"no end", absl::StatusCode::kInvalidArgument,
                  "line 1, column 14: expected the closing '\"' of the string");
  ExpectFileError("{\"a\": 1} {}", absl::StatusCode::kInvalidArgument,
                  "line 1, column 10: expected the end of the input after the top-level value");
  ExpectFileError("{\"a\": 01}", absl::StatusCode::kInvalidArgument,
                  "line 1, column 8: expected ',' or '}', found '1'");
  ExpectFileError("{\"a\": \"\\q\"}", absl::StatusCode::kInvalidArgument,
                  "line 1, column 9: expected an escape");
}

TEST(ConfigFileTest, BinaryInputIsNeverQuoted) {
  // A tuning store given where a file was expected: said so plainly.
  const std::string sqlite("SQLite format 3\0\x10\x00\x01\x01\xff\xfe", 22);
  ExpectFileError(sqlite, absl::StatusCode::kInvalidArgument,
                  "this is a SQLite tuning store, not a tuned-config file; use --db=<file> "
                  "to read it");
  // Any other binary: the offending byte by its value, never the bytes.
  const std::string binary("{\"a\": \x01\x02\x03}", 10);
  const absl::StatusOr<ParsedConfigFile> parsed = ParseConfigFile(binary);
  ASSERT_FALSE(parsed.ok());
  EXPECT_THAT(std::string(parsed.status().message()), HasSubstr("found byte 0x01"));
  for (const char c : parsed.status().message()) {
    EXPECT_TRUE(c >= 0x20 && c < 0x7f) << static_cast<int>(c);
  }
}

TEST(ConfigFileTest, RefusesOtherFormats) {
  ExpectFileError("{}", absl::StatusCode::kInvalidArgument, "no \"format\" field");
  TunedConfigFile file = LegalFile();
  file.set_format("kerntune.something_else");
  ExpectFileError(ToJson(file), absl::StatusCode::kInvalidArgument,
                  "format=\"kerntune.something_else\" is not "
                  "\"kerntune.tuned_configs\"");
  file = LegalFile();
  file.set_format_version(0);
  ExpectFileError(ToJson(file), absl::StatusCode::kInvalidArgument,
                  "format_version=0 must be a positive integer");
}

TEST(ConfigFileTest, RefusesNewerFormatVersionBeforeReadingTheRest) {
  TunedConfigFile file = LegalFile();
  file.set_format_version(2);
  ExpectFileError(ToJson(file), absl::StatusCode::kFailedPrecondition,
                  "format_version=2 is newer than this kerntune reads (1)");
  // A version-2 layout that no longer parses as version 1 gets the same
  // message, not a parse error.
  gpb::Struct document = LegalDocument();
  (*document.mutable_fields())["format_version"].set_number_value(2);
  (*document.mutable_fields())["configs"].set_string_value("moved elsewhere");
  ExpectFileError(DocumentJson(document), absl::StatusCode::kFailedPrecondition,
                  "newer than this kerntune reads");
}

TEST(ConfigFileTest, RefusesIncompleteOrUnknownSku) {
  TunedConfigFile file = LegalFile();
  file.mutable_gpu()->set_sm_count(0);
  ExpectFileError(ToJson(file), absl::StatusCode::kInvalidArgument,
                  "gpu.sm_count=0 must be >= 1");
  file = LegalFile();
  file.mutable_gpu()->clear_name();
  ExpectFileError(ToJson(file), absl::StatusCode::kInvalidArgument,
                  "gpu.name is empty");
  file = LegalFile();
  file.clear_gpu();
  ExpectFileError(ToJson(file), absl::StatusCode::kInvalidArgument, "gpu.");
  file = LegalFile();
  file.mutable_gpu()->set_cc_major(5);
  ExpectFileError(ToJson(file), absl::StatusCode::kInvalidArgument,
                  "compute capability 5.0");
}

// --- entry-level errors: skipped, the rest imported ---------------------------

// The reason entry `index` of `file` was skipped, "" when it was not.
std::string SkipReason(const absl::StatusOr<ParsedConfigFile>& parsed,
                       size_t index) {
  for (const SkippedEntry& skipped : parsed->skipped) {
    if (skipped.index == index) return skipped.reason;
  }
  return "";
}

TEST(ConfigFileTest, SkipsEachBadEntryWithItsIndexAndReason) {
  TunedConfigFile file = LegalFile();  // entries 0..2 legal
  const TunedConfig legal = file.configs(0);
  const auto add = [&](auto mutate) {
    TunedConfig entry = legal;
    entry.set_rows(entry.rows() + file.configs_size());  // a distinct point
    mutate(entry);
    *file.add_configs() = entry;
  };
  add([](TunedConfig& e) { e.set_op("softmaxx"); });                       // 3
  add([](TunedConfig& e) { e.mutable_config()->set_key("warp/b128/p8"); }); // 4
  add([](TunedConfig& e) {                                                  // 5
    e.mutable_config()->set_block_size(e.config().block_size() * 2);
  });
  add([](TunedConfig& e) {  // 6: 8 x 4 bytes = 32-byte accesses
    e.set_dtype("float32");
    auto& c = *e.mutable_config();
    c.set_impl("warp");
    c.set_block_size(128);
    c.set_pack_size(8);
    c.set_thread_group_width(32);
    c.set_rows_per_access(1);
    c.set_grid_waves(0);
    c.set_key("warp/b128/p8/g32/r1/w0");
  });
  add([](TunedConfig& e) {  // 7: 65536 float32 = 256 KiB > 227 KiB per block
    e.set_dtype("float32");
    e.set_cols(65536);
    auto& c = *e.mutable_config();
    c.set_impl("block_smem");
    c.set_block_size(1024);
    c.set_pack_size(4);
    c.set_thread_group_width(32);
    c.set_rows_per_access(1);
    c.set_grid_waves(0);
    c.set_key("block_smem/b1024/p4/g32/r1/w0");
  });
  add([](TunedConfig& e) { e.set_median_us(-3); });                        // 8
  add([](TunedConfig& e) { e.set_rows(0); });                              // 9
  add([](TunedConfig& e) { e.set_heuristic_us(std::nan("")); });           // 10
  add([](TunedConfig& e) { e.set_dtype("float64"); });                     // 11
  add([](TunedConfig& e) { e.clear_config(); });                           // 12
  *file.add_configs() = legal;                                             // 13

  const absl::StatusOr<ParsedConfigFile> parsed = ParseConfigFile(ToJson(file));
  ASSERT_TRUE(parsed.ok()) << parsed.status();
  EXPECT_EQ(parsed->entries, 14u);
  EXPECT_EQ(parsed->valid.size(), 3u);
  ASSERT_EQ(parsed->skipped.size(), 11u);
  EXPECT_THAT(SkipReason(parsed, 3), HasSubstr("op=\"softmaxx\" is not one of"));
  EXPECT_THAT(SkipReason(parsed, 4), HasSubstr("config \"warp/b128/p8\" is not of the form"));
  EXPECT_THAT(SkipReason(parsed, 5), HasSubstr("config.block_size="));
  EXPECT_THAT(SkipReason(parsed, 5), HasSubstr("disagrees with config.key"));
  EXPECT_THAT(SkipReason(parsed, 6), HasSubstr("pack_size=8 is 32 bytes per access"));
  EXPECT_THAT(SkipReason(parsed, 7), HasSubstr("shared memory"));
  EXPECT_THAT(SkipReason(parsed, 7), HasSubstr("NVIDIA H100 80GB HBM3"));
  EXPECT_THAT(SkipReason(parsed, 8), HasSubstr("median_us=-3 must be finite and > 0"));
  EXPECT_THAT(SkipReason(parsed, 9), HasSubstr("rows=0 must be >= 1"));
  EXPECT_THAT(SkipReason(parsed, 10), HasSubstr("heuristic_us=nan"));
  EXPECT_THAT(SkipReason(parsed, 11), HasSubstr("dtype=\"float64\""));
  EXPECT_THAT(SkipReason(parsed, 12), HasSubstr("config.key is missing"));
  EXPECT_THAT(SkipReason(parsed, 13), HasSubstr("duplicate of entry 0"));
  // Each reason names the point it is about.
  EXPECT_THAT(SkipReason(parsed, 8), HasSubstr("softmax float16 "));
}

TEST(ConfigFileTest, FilesWithoutInnerAndSplitImportAsLastAxisPointsWithSplitOne) {
  // What kerntune wrote before middle-axis points and split rows existed.
  const std::string json = R"({
    "format": "kerntune.tuned_configs", "format_version": 1,
    "gpu": {"name": "NVIDIA H100 80GB HBM3", "cc_major": 9, "cc_minor": 0,
            "sm_count": 132, "total_memory_bytes": "85520809984"},
    "configs": [{"op": "log_softmax", "dtype": "bfloat16", "rows": "49152", "cols": "2048",
                 "config": {"impl": "warp", "block_size": 128, "pack_size": 8,
                            "thread_group_width": 32, "rows_per_access": 1,
                            "grid_waves": 0, "key": "warp/b128/p8/g32/r1/w0"},
                 "median_us": 60.5, "gbps": 3300, "pct_of_copy": 80,
                 "heuristic_key": "warp/b128/p8/g32/r1/w0", "kernel_version": "0.1.0+k1"}]})";
  const absl::StatusOr<ParsedConfigFile> parsed = ParseConfigFile(json);
  ASSERT_TRUE(parsed.ok()) << parsed.status();
  ASSERT_EQ(parsed->valid.size(), 1u) << parsed->skipped[0].reason;
  EXPECT_EQ(parsed->valid[0].point.inner, 1);
  EXPECT_EQ(parsed->valid[0].config.split, 1);
  EXPECT_EQ(parsed->valid[0].config.key, "warp/b128/p8/g32/r1/w0");
}

TEST(ConfigFileTest, WritesInnerAndSplitAndChecksThem) {
  const std::string json = ToJson(LegalFile());
  EXPECT_THAT(json, HasSubstr("\"inner\": \"1\""));  // int64: a string in canonical JSON
  EXPECT_THAT(json, HasSubstr("\"split\": 1"));

  TunedConfigFile file = LegalFile();  // entries 0..2 legal
  const TunedConfig legal = file.configs(0);  // softmax float16 49152 x 4096
  const auto add = [&](auto mutate) {
    TunedConfig entry = legal;
    entry.set_rows(entry.rows() + file.configs_size());  // a distinct point
    mutate(entry);
    *file.add_configs() = entry;
  };
  add([](TunedConfig& e) { e.set_inner(-2); });                            // 3
  add([](TunedConfig& e) { e.set_op("layer_norm"); e.set_inner(4); });     // 4
  add([](TunedConfig& e) { e.mutable_config()->set_split(4); });           // 5
  add([](TunedConfig& e) { e.set_inner(8); });  // 6: a row config cannot serve inner 8
  add([](TunedConfig& e) { e.set_inner(0); e.mutable_config()->set_split(0); });  // 7: = 1
  const absl::StatusOr<ParsedConfigFile> parsed = ParseConfigFile(ToJson(file));
  ASSERT_TRUE(parsed.ok()) << parsed.status();
  EXPECT_EQ(parsed->entries, 8u);
  EXPECT_THAT(SkipReason(parsed, 3), HasSubstr("inner=-2 must be >= 1"));
  EXPECT_THAT(SkipReason(parsed, 4), HasSubstr("inner=4: layer_norm reduces the last axis only"));
  EXPECT_THAT(SkipReason(parsed, 5), HasSubstr("config.split=4 disagrees with config.key"));
  EXPECT_THAT(SkipReason(parsed, 6), HasSubstr("is not legal on"));
  EXPECT_THAT(SkipReason(parsed, 6), HasSubstr("x8: "));  // the point names its inner
  EXPECT_EQ(SkipReason(parsed, 7), "");
  ASSERT_EQ(parsed->valid.size(), 4u);
  EXPECT_EQ(parsed->valid[3].point.inner, 1);
  EXPECT_EQ(parsed->valid[3].config.split, 1);
}

TEST(ConfigFileTest, MiddleAxisEntriesRoundTripUnderTheirInner) {
  const kernels::DeviceInfo h100 = kernels::DescribedH100();
  const kernels::Shape shape{512, 896, 48};
  const absl::StatusOr<kernels::LaunchConfig> axis =
      kernels::HeuristicConfig(kernels::Op::kSoftmax, kernels::DType::kFloat16, shape, h100);
  if (!axis.ok()) {
    GTEST_SKIP() << "the axis implementation's rules have not landed: " << axis.status();
  }
  db::BestConfig middle = LegalRow(H100Sku(), "softmax", "float16", 512, 896);
  db::BestConfig last = middle;
  middle.point.inner = 48;
  middle.config = tuner::ConfigRecordOf(*axis);
  middle.heuristic_key = kernels::ConfigKey(*axis);
  const absl::StatusOr<ParsedConfigFile> parsed = ParseConfigFile(
      ToJson(MakeFile(H100Sku(), {last, middle}, absl::UnixEpoch())));
  ASSERT_TRUE(parsed.ok()) << parsed.status();
  ASSERT_EQ(parsed->valid.size(), 2u) << SkipReason(parsed, 0) << SkipReason(parsed, 1);
  EXPECT_EQ(parsed->valid[0].point.inner, 1);
  EXPECT_EQ(parsed->valid[1].point, middle.point);  // not a duplicate of entry 0
  EXPECT_EQ(parsed->valid[1].config, middle.config);
}

TEST(ConfigFileTest, ChecksConfigsAgainstTheFilesSku) {
  // 49152 float32 in shared memory: 192 KiB fits an H100 block (227 KiB)
  // but not an A100 one (163 KiB).
  db::BestConfig row = LegalRow(H100Sku(), "softmax", "float32", 1024, 49152);
  row.config = {"block_smem", 1024, 4, 32, 1, 0, "block_smem/b1024/p4/g32/r1/w0"};
  const absl::Time when = absl::UnixEpoch();
  const absl::StatusOr<ParsedConfigFile> on_h100 =
      ParseConfigFile(ToJson(MakeFile(H100Sku(), {row}, when)));
  ASSERT_TRUE(on_h100.ok());
  EXPECT_EQ(on_h100->valid.size(), 1u);
  const absl::StatusOr<ParsedConfigFile> on_a100 =
      ParseConfigFile(ToJson(MakeFile(A100Sku(), {row}, when)));
  ASSERT_TRUE(on_a100.ok());
  EXPECT_TRUE(on_a100->valid.empty());
  EXPECT_THAT(SkipReason(on_a100, 0), HasSubstr("NVIDIA A100-SXM4-80GB allows"));
}

TEST(ConfigFileTest, SkipsEntriesThatAreNotTunedConfigs) {
  gpb::Struct document = LegalDocument();
  gpb::ListValue& configs =
      *(*document.mutable_fields())["configs"].mutable_list_value();
  configs.add_values()->set_number_value(42);  // 3: not an object
  gpb::Value wrong_type = configs.values(0);    // 4: rows is not a number
  (*wrong_type.mutable_struct_value()->mutable_fields())["rows"].set_string_value(
      "many");
  *configs.add_values() = wrong_type;
  gpb::Value extra_field = configs.values(1);  // 5: an unknown field is fine
  (*extra_field.mutable_struct_value()->mutable_fields())["added_in_v1_1"]
      .set_bool_value(true);
  (*extra_field.mutable_struct_value()->mutable_fields())["rows"].set_string_value(
      "7");
  *configs.add_values() = extra_field;

  const absl::StatusOr<ParsedConfigFile> parsed =
      ParseConfigFile(DocumentJson(document));
  ASSERT_TRUE(parsed.ok()) << parsed.status();
  EXPECT_EQ(parsed->entries, 6u);
  EXPECT_EQ(parsed->valid.size(), 4u);
  EXPECT_THAT(SkipReason(parsed, 3), HasSubstr("not a JSON object"));
  EXPECT_THAT(SkipReason(parsed, 4), HasSubstr("not a TunedConfig"));
  EXPECT_EQ(SkipReason(parsed, 5), "");
}

}  // namespace
}  // namespace kt::proto
