// `kerntune gpus` and `kerntune configs list/show/export/import`, called as
// functions on the fixture store.
#include <sys/stat.h>

#include <algorithm>
#include <cstdlib>
#include <fstream>
#include <memory>
#include <sstream>
#include <optional>
#include <string>
#include <utility>
#include <vector>

#include "absl/strings/str_cat.h"
#include "absl/strings/str_join.h"
#include "absl/strings/str_split.h"
#include "absl/time/time.h"
#include "client/cli_common.h"
#include "client/configs_cli.h"
#include "client/gpus_cli.h"
#include "db/tuning_store.h"
#include "gmock/gmock.h"
#include "google/protobuf/struct.pb.h"
#include "google/protobuf/util/json_util.h"
#include "gtest/gtest.h"
#include "kernels/device_info.h"
#include "kernels/launch_config.h"
#include "kernels/version.h"
#include "proto/config_file.h"
#include "proto/shipped_configs.h"
#include "tests/client/fixture.h"
#include "tuner/backend.h"

namespace kt::client {
namespace {

namespace gpb = ::google::protobuf;
using ::testing::HasSubstr;
using ::testing::Not;
using testing::BuildFixtureStore;
using testing::ReadFile;
using testing::ScopedTempDir;
using testing::WriteFile;

// What a verb wrote and returned.
struct Result {
  int code = -1;
  std::string out;
  std::string err;
};

template <typename Options, typename Verb>
Result Call(Verb verb, const Options& options) {
  std::ostringstream out, err;
  Result result;
  result.code = verb(options, out, err);
  result.out = out.str();
  result.err = err.str();
  return result;
}

std::vector<std::string> Lines(const std::string& text) {
  return absl::StrSplit(text, '\n', absl::SkipEmpty());
}

// CSV without quoted fields (the fixture has none) as rows of fields.
std::vector<std::vector<std::string>> Csv(const std::string& text) {
  std::vector<std::vector<std::string>> rows;
  for (const std::string& line : Lines(text)) {
    rows.push_back(absl::StrSplit(line, ','));
  }
  return rows;
}

size_t ColumnIndex(const std::vector<std::vector<std::string>>& csv,
                   const std::string& name) {
  const auto it = std::find(csv[0].begin(), csv[0].end(), name);
  EXPECT_NE(it, csv[0].end()) << name;
  return it - csv[0].begin();
}

gpb::ListValue ParseJsonArray(const std::string& json) {
  // The array is wrapped so that protobuf's parser (objects only at the top
  // level for Struct) can read it.
  gpb::Struct wrapper;
  const auto status =
      gpb::util::JsonStringToMessage("{\"rows\": " + json + "}", &wrapper);
  EXPECT_TRUE(status.ok()) << status.ToString() << "\n" << json;
  return wrapper.fields().at("rows").list_value();
}

const gpb::Value& Field(const gpb::Value& object, const std::string& key) {
  return object.struct_value().fields().at(key);
}

class ConfigsCliTest : public ::testing::Test {
 protected:
  void SetUp() override {
    db_ = dir_.File("tuning.db");
    ASSERT_TRUE(BuildFixtureStore(db_).ok());
  }

  Result List(PointFlags filter, OutputFormat format = OutputFormat::kTable) {
    return Call(RunConfigsList, ConfigsListOptions{db_, format, std::move(filter)});
  }
  Result Show(PointFlags point, bool candidates,
              OutputFormat format = OutputFormat::kTable) {
    return Call(RunConfigsShow,
                ConfigsShowOptions{db_, format, std::move(point), candidates});
  }
  Result Export(PointFlags filter, const std::string& db = "") {
    ConfigsExportOptions options;
    options.db_path = db.empty() ? db_ : db;
    options.filter = std::move(filter);
    options.now = absl::FromUnixSeconds(testing::kFixtureTime + 3600);
    return Call(RunConfigsExport, options);
  }
  Result Import(const std::string& file, const std::string& db,
                OutputFormat format = OutputFormat::kTable) {
    return Call(RunConfigsImport, ConfigsImportOptions{db, format, file});
  }

  static PointFlags HotPoint(std::optional<std::string> gpu) {
    return {std::move(gpu), "softmax", "float16", 49152, 4096};
  }

  ScopedTempDir dir_;
  std::string db_;
};

// --- gpus ----------------------------------------------------------------

TEST_F(ConfigsCliTest, GpusListsSkusWithCounts) {
  const Result table = Call(RunGpus, GpusOptions{db_, OutputFormat::kTable});
  EXPECT_EQ(table.code, kExitOk) << table.err;
  const std::vector<std::string> lines = Lines(table.out);
  ASSERT_EQ(lines.size(), 3u) << table.out;
  EXPECT_THAT(lines[0], HasSubstr("BEST CONFIGS"));
  EXPECT_THAT(lines[1], HasSubstr("NVIDIA H100 80GB HBM3"));
  EXPECT_THAT(lines[1], HasSubstr("79.6 GiB"));
  EXPECT_THAT(lines[2], HasSubstr("NVIDIA A100-SXM4-80GB"));

  const Result json = Call(RunGpus, GpusOptions{db_, OutputFormat::kJson});
  const gpb::ListValue gpus = ParseJsonArray(json.out);
  ASSERT_EQ(gpus.values_size(), 2);
  EXPECT_EQ(Field(gpus.values(0), "name").string_value(), "NVIDIA H100 80GB HBM3");
  EXPECT_EQ(Field(gpus.values(0), "compute_capability").string_value(), "9.0");
  EXPECT_EQ(Field(gpus.values(0), "total_memory_bytes").number_value(), 85520809984.0);
  EXPECT_EQ(Field(gpus.values(0), "runs").number_value(), 1);
  EXPECT_EQ(Field(gpus.values(0), "best_configs").number_value(), 4);
  EXPECT_EQ(Field(gpus.values(0), "candidates").number_value(), 7 + 3 + 3 + 3);
  EXPECT_EQ(Field(gpus.values(1), "best_configs").number_value(), 2);
  EXPECT_EQ(Field(gpus.values(1), "candidates").number_value(), 6);

  const Result csv = Call(RunGpus, GpusOptions{db_, OutputFormat::kCsv});
  EXPECT_EQ(Lines(csv.out)[0],
            "gpu_id,name,compute_capability,sm_count,total_memory_bytes,runs,"
            "best_configs,candidates");
  EXPECT_EQ(Lines(csv.out)[2], "2,NVIDIA A100-SXM4-80GB,8.0,108,85899345920,1,2,6");
}

// Sets environment variables for a scope and restores them.
class ScopedEnv {
 public:
  void Set(const char* name, const std::string& value) {
    Save(name);
    setenv(name, value.c_str(), 1);
  }
  void Unset(const char* name) {
    Save(name);
    unsetenv(name);
  }
  ~ScopedEnv() {
    for (const auto& [name, value] : saved_) {
      if (value) {
        setenv(name.c_str(), value->c_str(), 1);
      } else {
        unsetenv(name.c_str());
      }
    }
  }

 private:
  void Save(const char* name) {
    const char* value = std::getenv(name);
    saved_.emplace_back(name, value ? std::optional<std::string>(value) : std::nullopt);
  }
  std::vector<std::pair<std::string, std::optional<std::string>>> saved_;
};

bool Exists(const std::string& path) {
  struct stat info {};
  return stat(path.c_str(), &info) == 0;
}

TEST_F(ConfigsCliTest, AnEmptyStoreListsNothingClearly) {
  const std::string fresh = dir_.File("fresh.db");
  ASSERT_TRUE(db::TuningStore::Open(fresh, {/*create_if_missing=*/true}).ok());
  Result gpus = Call(RunGpus, GpusOptions{fresh, OutputFormat::kTable});
  EXPECT_EQ(gpus.code, kExitOk) << gpus.err;
  EXPECT_THAT(gpus.out, HasSubstr("no GPUs in " + fresh + " (run `kerntune tune`"));
  EXPECT_EQ(Call(RunGpus, GpusOptions{fresh, OutputFormat::kJson}).out, "[]\n");
  Result list = Call(RunConfigsList, ConfigsListOptions{fresh, OutputFormat::kTable, {}});
  EXPECT_EQ(list.code, kExitOk);
  EXPECT_EQ(list.out, "no tuned configs in " + fresh + "\n");
  EXPECT_EQ(Call(RunConfigsList, ConfigsListOptions{fresh, OutputFormat::kJson, {}}).out,
            "[]\n");
  const Result csv =
      Call(RunConfigsList, ConfigsListOptions{fresh, OutputFormat::kCsv, {}});
  EXPECT_EQ(Lines(csv.out).size(), 1u);  // the header only
}

// `configs list --db=/typo/x.db` must not create /typo and an empty store
// and then report "no tuned configs": the path does not exist, and it says so.
TEST_F(ConfigsCliTest, ReadVerbsNeverCreateAStoreAndSayWhenItIsMissing) {
  const std::string typo_dir = dir_.File("typo");
  const std::string typo = typo_dir + "/x.db";
  const std::string missing_here = dir_.File("missing.db");
  const std::vector<std::pair<std::string, std::string>> paths = {
      {typo, "the directory " + typo_dir + " does not exist"},
      {missing_here, "the file does not exist"}};
  for (const auto& [path, why] : paths) {
    const std::string message =
        "no tuning store at " + path + ": " + why +
        " (check --db; `kerntune tune` or `kerntune configs import FILE` creates one)";
    ConfigsExportOptions export_options;
    export_options.db_path = path;
    const std::vector<std::pair<std::string, Result>> results = {
        {"gpus", Call(RunGpus, GpusOptions{path, OutputFormat::kTable})},
        {"configs list", Call(RunConfigsList, ConfigsListOptions{path, OutputFormat::kTable, {}})},
        {"configs show", Call(RunConfigsShow, ConfigsShowOptions{path, OutputFormat::kTable,
                                                                  HotPoint("1"), false})},
        {"configs export", Call(RunConfigsExport, export_options)},
    };
    for (const auto& [verb, result] : results) {
      EXPECT_EQ(result.code, kExitFailure) << verb << " " << path;
      EXPECT_EQ(result.err, "kerntune " + verb + ": " + message + "\n");
      EXPECT_EQ(result.out, "");
    }
    EXPECT_FALSE(Exists(path)) << path;
  }
  EXPECT_FALSE(Exists(typo_dir));

  // Named by $KERNTUNE_DB: the same, naming the variable.
  ScopedEnv env;
  env.Set("KERNTUNE_DB", missing_here);
  const Result gpus = Call(RunGpus, GpusOptions{"", OutputFormat::kTable});
  EXPECT_EQ(gpus.code, kExitFailure);
  EXPECT_THAT(gpus.err, HasSubstr("no tuning store at " + missing_here +
                                  ": the file does not exist (check $KERNTUNE_DB;"));
  EXPECT_FALSE(Exists(missing_here));
}

// A default store not created yet reads as empty and stays uncreated (the
// first `kerntune gpus` used to create ~/.local/share/kerntune/tuning.db).
TEST_F(ConfigsCliTest, AMissingDefaultStoreReadsAsEmptyAndIsNotCreated) {
  ScopedEnv env;
  env.Unset("KERNTUNE_DB");
  env.Unset("XDG_DATA_HOME");
  env.Set("HOME", dir_.File("home"));
  const std::string path = dir_.File("home") + "/.local/share/kerntune/tuning.db";
  const Result gpus = Call(RunGpus, GpusOptions{"", OutputFormat::kTable});
  EXPECT_EQ(gpus.code, kExitOk) << gpus.err;
  EXPECT_EQ(gpus.out, "no tuning store yet at " + path +
                          " (run `kerntune tune` on a GPU, or `kerntune configs import FILE`)\n");
  const Result list = Call(RunConfigsList, ConfigsListOptions{"", OutputFormat::kTable, {}});
  EXPECT_EQ(list.code, kExitOk) << list.err;
  EXPECT_EQ(list.out, "no tuned configs in " + path + " (no store there yet)\n");
  ConfigsExportOptions export_options;
  const Result exported = Call(RunConfigsExport, export_options);
  EXPECT_EQ(exported.code, kExitFailure);
  EXPECT_THAT(exported.err, HasSubstr("nothing to export: " + path + " (no store there yet)"));
  EXPECT_FALSE(Exists(dir_.File("home") + "/.local"));
}

// A fresh install: no tuning store, the shipped files of deploy/configs. The
// README's `configs list --gpu=h100`, `configs export --gpu=h100 > h100.json`
// and `configs show ... --candidates` answer from the shipped files and say so.
TEST_F(ConfigsCliTest, AFreshInstallListsShowsAndExportsTheShippedConfigs) {
  const std::string fresh = dir_.File("fresh.db");
  ASSERT_TRUE(db::TuningStore::Open(fresh, {/*create_if_missing=*/true}).ok());
  const std::string configs = proto::DefaultShippedConfigDir();
  size_t h100 = 0, h200 = 0, over_copy = 0;
  for (const proto::ShippedConfigFile& file : proto::ReadShippedConfigs(configs)) {
    ASSERT_TRUE(file.contents.ok()) << file.path;
    const std::string& name = file.contents->sku.name;
    ASSERT_TRUE(name == "NVIDIA H100 80GB HBM3" || name == "NVIDIA H200") << name;
    (name == "NVIDIA H200" ? h200 : h100) += file.contents->valid.size();
    for (const db::BestConfig& row : file.contents->valid) over_copy += row.pct_of_copy > 100;
  }
  ASSERT_GT(h100, 0u);
  ASSERT_GT(h200, 0u);

  ConfigsListOptions list_options{fresh, OutputFormat::kTable, {}, configs};
  const Result list = Call(RunConfigsList, list_options);
  ASSERT_EQ(list.code, kExitOk) << list.err;
  const std::vector<std::string> lines = Lines(list.out);
  ASSERT_EQ(lines.size(), 1 + h100 + h200 + 2 + (over_copy > 0 ? 3 : 0)) << list.out;
  for (size_t i = 1; i <= h100 + h200; ++i) {
    EXPECT_TRUE(lines[i].rfind("H100 ", 0) == 0 || lines[i].rfind("H200 ", 0) == 0) << lines[i];
  }
  for (const std::string& line : lines) EXPECT_LE(DisplayWidth(line), 120u) << line;
  EXPECT_EQ(lines[h100 + h200 + 1],
            absl::StrCat(h100 + h200, " configs: ", h100 + h200, " shipped, 0 local; 0 stale"));
  EXPECT_EQ(lines[h100 + h200 + 2], absl::StrCat("GPUs: ", h100, " on H100 (NVIDIA H100 80GB "
                                                 "HBM3), ", h200, " on H200 (NVIDIA H200)"));
  if (over_copy > 0) {
    EXPECT_THAT(list.out, HasSubstr(absl::StrCat("\n", over_copy, " rows pass 100 (up to ")));
  }
  list_options.wide = true;
  const Result wide = Call(RunConfigsList, list_options);
  EXPECT_THAT(wide.out, HasSubstr("HEURISTIC"));
  EXPECT_GT(Lines(wide.out)[0].size(), 120u);

  ConfigsExportOptions export_options;
  export_options.db_path = fresh;
  export_options.filter = {"h100"};
  export_options.configs_dir = configs;
  const Result exported = Call(RunConfigsExport, export_options);
  ASSERT_EQ(exported.code, kExitOk) << exported.err;
  const absl::StatusOr<proto::ParsedConfigFile> parsed = proto::ParseConfigFile(exported.out);
  ASSERT_TRUE(parsed.ok()) << parsed.status();
  EXPECT_EQ(parsed->valid.size(), h100);
  EXPECT_EQ(exported.err, absl::StrCat("exported ", h100, " tuned configs of NVIDIA H100 80GB "
                                       "HBM3 (cc 9.0, 132 SMs, 79.2 GiB): ", h100,
                                       " from the shipped file ", configs, "/h100.json\n"));
  // Without --gpu an empty store has two SKUs to choose from.
  export_options.filter = {};
  const Result ambiguous = Call(RunConfigsExport, export_options);
  EXPECT_EQ(ambiguous.code, kExitUsage);
  EXPECT_THAT(ambiguous.err, HasSubstr("--gpu=\"NVIDIA H200\""));

  const Result shown = Call(RunConfigsShow,
                            ConfigsShowOptions{fresh, OutputFormat::kTable,
                                               {"h100", "softmax", "float16", 49152, 4096},
                                               /*candidates=*/true, configs});
  ASSERT_EQ(shown.code, kExitOk) << shown.err;
  EXPECT_THAT(shown.out, HasSubstr("shipped (the shipped file's entry for this point)"));
  EXPECT_THAT(shown.out, HasSubstr("bandwidth"));
  EXPECT_THAT(shown.out, HasSubstr("shipped entry from " + configs + "/h100.json: "));
  EXPECT_THAT(shown.out, HasSubstr("candidates are not shipped"));
}

TEST_F(ConfigsCliTest, DefaultDatabaseComesFromTheEnvironment) {
  ScopedEnv env;
  env.Set("KERNTUNE_DB", db_);
  const Result gpus = Call(RunGpus, GpusOptions{"", OutputFormat::kTable});
  EXPECT_EQ(gpus.code, kExitOk) << gpus.err;
  EXPECT_THAT(gpus.out, HasSubstr("NVIDIA H100 80GB HBM3"));
}

TEST_F(ConfigsCliTest, UnopenableStoreIsARuntimeFailure) {
  WriteFile(dir_.File("garbage.db"), std::string(4096, 'x'));
  const Result gpus =
      Call(RunGpus, GpusOptions{dir_.File("garbage.db"), OutputFormat::kTable});
  EXPECT_EQ(gpus.code, kExitFailure);
  EXPECT_THAT(gpus.err, HasSubstr("kerntune gpus: "));
}

// --- configs list -----------------------------------------------------------

TEST_F(ConfigsCliTest, ListShowsEveryPointForPeople) {
  ConfigsListOptions options{db_, OutputFormat::kTable, {}};
  options.wide = true;
  const Result result = Call(RunConfigsList, options);
  ASSERT_EQ(result.code, kExitOk) << result.err;
  const std::vector<std::string> lines = Lines(result.out);
  // The header, 6 rows, the 2-line summary and the 3-line note on % of copy
  // (the fixture's made-up times pass 100).
  ASSERT_EQ(lines.size(), 12u) << result.out;
  for (const char* title : {"ID", "GPU", "OP", "DTYPE", "ROWS", "COLS", "CONFIG", "TIME US",
                            "GB/S", "% COPY", "HEURISTIC", "HEUR US", "SPEEDUP",
                            "GRAPH", "KERNELS", "ORIGIN", "SERVED"}) {
    EXPECT_THAT(lines[0], HasSubstr(title));
  }
  EXPECT_THAT(lines[1], HasSubstr("H100"));
  EXPECT_THAT(lines[6], HasSubstr("A100"));
  // Ordered by gpu, op, dtype, rows, cols; the stale row is marked.
  EXPECT_THAT(lines[1], HasSubstr("layer_norm"));
  EXPECT_THAT(lines[1], HasSubstr(std::string(testing::kStaleKernelVersion) + " (stale)"));
  EXPECT_THAT(lines[2], HasSubstr("log_softmax"));
  EXPECT_THAT(lines[2], Not(HasSubstr("stale")));
  EXPECT_THAT(lines[3], HasSubstr("38.25"));  // H100 softmax float16: fastest correct
  EXPECT_THAT(lines[3], HasSubstr("1.25x"));
  // Columns line up: every row has the header's width or less.
  for (size_t i = 0; i < 7; ++i) EXPECT_LE(lines[i].size(), lines[1].size() + 16);
  EXPECT_EQ(lines[7], "6 configs: 0 shipped, 6 local; 1 stale (measured with another kernel "
                      "library: never served)");
  EXPECT_EQ(lines[8], "GPUs: 4 on H100 (NVIDIA H100 80GB HBM3), 2 on A100-SXM4-80GB (NVIDIA "
                      "A100-SXM4-80GB)");
}

// The default table fits 120 columns: the GPU by its short name (the summary
// names it in full), the point as one SHAPE, short dtypes; the columns it
// leaves out are in --wide and in every script's output.
TEST_F(ConfigsCliTest, ListFitsInOneHundredTwentyColumnsByDefault) {
  const Result narrow = List({});
  ASSERT_EQ(narrow.code, kExitOk) << narrow.err;
  const std::vector<std::string> lines = Lines(narrow.out);
  ASSERT_EQ(lines.size(), 12u) << narrow.out;
  EXPECT_EQ(lines[0].rfind("GPU ", 0), 0u) << lines[0];
  for (const char* title : {"OP", "DTYPE", "SHAPE", "CONFIG", "TIME US", "% COPY", "SPEEDUP",
                            "ORIGIN"}) {
    EXPECT_THAT(lines[0], HasSubstr(title));
  }
  for (const char* wide_only : {"HEURISTIC", "KERNELS", "SERVED", "ROWS", "GB/S"}) {
    EXPECT_THAT(lines[0], Not(HasSubstr(wide_only)));
  }
  EXPECT_EQ(lines[3].rfind("H100 ", 0), 0u) << lines[3];
  EXPECT_THAT(lines[3], HasSubstr("fp16"));
  EXPECT_THAT(lines[3], HasSubstr("49152x4096"));
  for (const std::string& line : lines) EXPECT_LE(DisplayWidth(line), 120u) << line;
  // Scripts get the same columns either way, the full GPU name among them.
  const Result csv = List({}, OutputFormat::kCsv);
  const auto rows = Csv(csv.out);
  EXPECT_EQ(rows[1][ColumnIndex(rows, "gpu_name")], "NVIDIA H100 80GB HBM3");
  EXPECT_EQ(rows[1][ColumnIndex(rows, "heuristic_config")].empty(), false);
  EXPECT_EQ(std::find(rows[0].begin(), rows[0].end(), "shape"), rows[0].end());
}

// Rows above 100% of copy get a note under the table saying what the figure
// is and why it can pass 100.
TEST_F(ConfigsCliTest, ListExplainsPercentOfCopyAboveOneHundred) {
  const Result result = List({});
  ASSERT_EQ(result.code, kExitOk) << result.err;
  EXPECT_THAT(result.out, HasSubstr("% COPY: GB/s over the tuning run's 1 GiB "
                                    "device-to-device copy (cudaMemcpyAsync, bytes read + "
                                    "written).\n5 rows pass 100 (up to "));
  EXPECT_THAT(result.out, HasSubstr("a streaming kernel can move its bytes\nslightly faster "
                                    "than cudaMemcpyAsync's own copy"));
  // No note when no row passes 100; none for scripts.
  EXPECT_THAT(List({{}, "log_softmax"}).out, Not(HasSubstr("% COPY:")));
  EXPECT_THAT(List({}, OutputFormat::kCsv).out, Not(HasSubstr("configs:")));
}

TEST_F(ConfigsCliTest, ListFiltersByEachFlag) {
  const auto count = [&](PointFlags filter) {
    const Result result = List(std::move(filter), OutputFormat::kCsv);
    EXPECT_EQ(result.code, kExitOk) << result.err;
    return Lines(result.out).size() - 1;
  };
  EXPECT_EQ(count({}), 6u);
  EXPECT_EQ(count({"1"}), 4u);                  // gpu id
  EXPECT_EQ(count({"a100"}), 2u);               // name substring, any case
  EXPECT_EQ(count({"NVIDIA"}), 6u);
  EXPECT_EQ(count({"v100"}), 0u);
  EXPECT_EQ(count({{}, "layer_norm"}), 2u);
  EXPECT_EQ(count({{}, "LayerNorm"}), 2u);      // ParseOp spellings
  EXPECT_EQ(count({{}, {}, "fp16"}), 3u);       // short dtype names
  EXPECT_EQ(count({{}, {}, {}, 1024}), 1u);
  EXPECT_EQ(count({{}, {}, {}, {}, 4096}), 3u);
  EXPECT_EQ(count({"h100", "softmax", "float16", 49152, 4096}), 1u);
}

TEST_F(ConfigsCliTest, ListRefusesBadFilterValuesNamingTheFlag) {
  Result result = List({{}, "sofmax"});
  EXPECT_EQ(result.code, kExitUsage);
  EXPECT_THAT(result.err, HasSubstr("--op=\"sofmax\" is not one of"));
  result = List({{}, {}, "int8"});
  EXPECT_EQ(result.code, kExitUsage);
  EXPECT_THAT(result.err, HasSubstr("--dtype=\"int8\""));
  result = List({{}, {}, {}, 0});
  EXPECT_EQ(result.code, kExitUsage);
  EXPECT_THAT(result.err, HasSubstr("--rows=0 must be >= 1"));
  result = List({{}, {}, {}, {}, -4});
  EXPECT_EQ(result.code, kExitUsage);
  EXPECT_THAT(result.err, HasSubstr("--cols=-4 must be >= 1"));
}

TEST_F(ConfigsCliTest, ListJsonIsOneDocumentWithTypedFields) {
  const Result result = List({"h100"}, OutputFormat::kJson);
  ASSERT_EQ(result.code, kExitOk) << result.err;
  const gpb::ListValue rows = ParseJsonArray(result.out);
  ASSERT_EQ(rows.values_size(), 4);
  const gpb::Value& stale = rows.values(0);
  EXPECT_EQ(Field(stale, "op").string_value(), "layer_norm");
  EXPECT_EQ(Field(stale, "gpu_name").string_value(), "NVIDIA H100 80GB HBM3");
  EXPECT_TRUE(Field(stale, "stale").bool_value());
  EXPECT_EQ(Field(stale, "kernel_version").string_value(), testing::kStaleKernelVersion);
  const gpb::Value& hot = rows.values(2);
  EXPECT_EQ(Field(hot, "dtype").string_value(), "float16");
  EXPECT_EQ(Field(hot, "cols").number_value(), 4096);
  EXPECT_EQ(Field(hot, "median_us").number_value(), 38.25);
  EXPECT_EQ(Field(hot, "speedup").number_value(), 1.25);
  EXPECT_FALSE(Field(hot, "stale").bool_value());
  EXPECT_FALSE(Field(hot, "graph_replay").bool_value());
  EXPECT_TRUE(Field(rows.values(1), "graph_replay").bool_value());  // log_softmax
  EXPECT_FALSE(Field(hot, "config").string_value().empty());
  EXPECT_FALSE(Field(hot, "heuristic_config").string_value().empty());
}

TEST_F(ConfigsCliTest, ListCsvHasAHeaderRow) {
  const Result result = List({}, OutputFormat::kCsv);
  ASSERT_EQ(result.code, kExitOk);
  EXPECT_EQ(Lines(result.out)[0],
            "gpu_id,gpu_name,op,dtype,rows,cols,inner,config,split,median_us,spread_low_us,"
            "spread_high_us,gbps,pct_of_copy,heuristic_config,heuristic_us,speedup,"
            "graph_replay,kernel_version,stale,origin,served,driver_version,runtime_version,"
            "run_id,updated_at");
  const auto csv = Csv(result.out);
  ASSERT_EQ(csv.size(), 7u);
  EXPECT_EQ(csv[1][ColumnIndex(csv, "stale")], "true");
  EXPECT_EQ(csv[1][ColumnIndex(csv, "origin")], "local");
  EXPECT_NE(csv[1][ColumnIndex(csv, "served")], "tuned");  // stale: never served
  EXPECT_EQ(csv[2][ColumnIndex(csv, "stale")], "false");
  EXPECT_EQ(csv[2][ColumnIndex(csv, "served")], "tuned");
}

// --- configs show -------------------------------------------------------------

TEST_F(ConfigsCliTest, ShowNeedsAWholePoint) {
  const Result result = Show({{}, "softmax", {}, 49152, {}}, false);
  EXPECT_EQ(result.code, kExitUsage);
  EXPECT_THAT(result.err, HasSubstr("missing --dtype, --cols"));
}

TEST_F(ConfigsCliTest, ShowAsksForGpuWhenThePointIsOnSeveral) {
  const Result result = Show(HotPoint(std::nullopt), false);
  EXPECT_EQ(result.code, kExitUsage);
  EXPECT_THAT(result.err, HasSubstr("tuned on 2 GPUs"));
  EXPECT_THAT(result.err, HasSubstr("--gpu=1 NVIDIA H100 80GB HBM3"));
  EXPECT_THAT(result.err, HasSubstr("--gpu=2 NVIDIA A100-SXM4-80GB"));
}

TEST_F(ConfigsCliTest, InnerIsAFilterAndShowNamesItAndTheSplit) {
  const auto count = [&](std::optional<int64_t> inner) {
    PointFlags filter;
    filter.inner = inner;
    const Result result = List(filter, OutputFormat::kCsv);
    EXPECT_EQ(result.code, kExitOk) << result.err;
    return Lines(result.out).size() - 1;
  };
  EXPECT_EQ(count(std::nullopt), 6u);
  EXPECT_EQ(count(1), 6u);  // every fixture point reduces the last axis
  EXPECT_EQ(count(48), 0u);
  PointFlags bad;
  bad.inner = 0;
  const Result refused = List(bad);
  EXPECT_EQ(refused.code, kExitUsage);
  EXPECT_THAT(refused.err, HasSubstr("--inner=0 must be >= 1"));

  const Result csv = List({"h100"}, OutputFormat::kCsv);
  const auto rows = Csv(csv.out);
  EXPECT_EQ(rows[1][ColumnIndex(rows, "inner")], "1");
  EXPECT_EQ(rows[1][ColumnIndex(rows, "split")], "1");

  const Result shown = Show(HotPoint("h100"), false);
  ASSERT_EQ(shown.code, kExitOk) << shown.err;
  EXPECT_THAT(shown.out, HasSubstr("split"));
  EXPECT_THAT(shown.out, HasSubstr("1 (one block per row)"));
  // Nothing is tuned along a middle axis: the daemon's axis heuristic.
  PointFlags middle = HotPoint("h100");
  middle.inner = 48;
  const Result untuned = Show(middle, false);
  ASSERT_EQ(untuned.code, kExitOk) << untuned.err;
  EXPECT_THAT(untuned.out, HasSubstr("softmax float16 49152x4096x48"));
  EXPECT_THAT(untuned.out,
              HasSubstr("heuristic (no current tuned or shipped entry applies)"));
  EXPECT_THAT(untuned.out, HasSubstr("axis/"));
}

TEST_F(ConfigsCliTest, ShowSaysWhatTheDaemonServesAtAnUntunedPoint) {
  // The H100's softmax float16 entry at 49152x4096 is the nearest; it is
  // served there when its config is legal for 8192 columns.
  const Result result = Show({"h100", "softmax", "float16", 49152, 8192}, false);
  ASSERT_EQ(result.code, kExitOk) << result.err;
  EXPECT_THAT(result.out, HasSubstr("softmax float16 49152x8192"));
  EXPECT_THAT(result.out,
              ::testing::AnyOf(
                  HasSubstr("nearest tuned (the local store's entry at 49152x4096, "
                            "38.25 us there)"),
                  HasSubstr("heuristic (no current tuned or shipped entry applies)")));
  EXPECT_THAT(result.out, Not(HasSubstr("local entry")));

  const Result json = Show({"h100", "softmax", "float16", 49152, 8192}, false,
                           OutputFormat::kJson);
  ASSERT_EQ(json.code, kExitOk) << json.err;
  gpb::Struct document;
  ASSERT_TRUE(gpb::util::JsonStringToMessage(json.out, &document).ok()) << json.out;
  EXPECT_EQ(document.fields().at("best").kind_case(), gpb::Value::kNullValue);
  const gpb::Struct& lookup = document.fields().at("lookup").struct_value();
  EXPECT_EQ(lookup.fields().at("cols").number_value(), 8192);
  EXPECT_FALSE(lookup.fields().at("config").string_value().empty());
}

TEST_F(ConfigsCliTest, AStaleLocalEntryIsShownButNotServed) {
  const Result result = Show({{}, "layer_norm", "bfloat16", 49152, 4096}, false);
  ASSERT_EQ(result.code, kExitOk) << result.err;
  EXPECT_THAT(result.out, HasSubstr("heuristic (no current tuned or shipped entry applies)"));
  EXPECT_THAT(result.out, HasSubstr("local entry  "));
  EXPECT_THAT(result.out, HasSubstr(std::string(testing::kStaleKernelVersion) +
                                    " (stale): not served, measured with another kernel "
                                    "library; re-tune or import current configs"));
}

TEST_F(ConfigsCliTest, ShowDescribesTheChosenConfig) {
  const Result result = Show(HotPoint("h100"), false);
  ASSERT_EQ(result.code, kExitOk) << result.err;
  EXPECT_THAT(result.out, HasSubstr("gpu        1: NVIDIA H100 80GB HBM3 (cc 9.0"));
  EXPECT_THAT(result.out, HasSubstr("point      softmax float16 49152x4096"));
  EXPECT_THAT(result.out, HasSubstr("38.25 us"));
  EXPECT_THAT(result.out, HasSubstr("1.25x over the heuristic"));
  EXPECT_THAT(result.out, HasSubstr("driver 12.4, runtime 12.3"));
  EXPECT_THAT(result.out, Not(HasSubstr("candidates")));
  // A point on one GPU needs no --gpu.
  EXPECT_EQ(Show({{}, "layer_norm", "bfloat16", 49152, 4096}, false).code, kExitOk);
  EXPECT_THAT(Show({{}, "layer_norm", "bfloat16", 49152, 4096}, false).out,
              HasSubstr("(stale)"));
}

TEST_F(ConfigsCliTest, ShowCandidatesFastestFirstUnmeasuredLast) {
  const Result table = Show(HotPoint("1"), true);
  ASSERT_EQ(table.code, kExitOk) << table.err;
  EXPECT_THAT(table.out, HasSubstr("candidates: 7, fastest first, unmeasured last"));

  const Result result = Show(HotPoint("1"), true, OutputFormat::kCsv);
  ASSERT_EQ(result.code, kExitOk) << result.err;
  const auto csv = Csv(result.out);
  ASSERT_EQ(csv.size(), 8u) << result.out;
  const size_t median = ColumnIndex(csv, "median_us");
  const size_t status = ColumnIndex(csv, "status");
  const size_t chosen = ColumnIndex(csv, "chosen");
  const size_t correct = ColumnIndex(csv, "correct");
  const std::vector<std::string> expected_medians = {"35", "38.25", "39", "41.5",
                                                     "90", "", ""};
  for (size_t i = 0; i < expected_medians.size(); ++i) {
    EXPECT_EQ(csv[i + 1][median], expected_medians[i]) << "row " << i;
  }
  EXPECT_EQ(csv[1][correct], "false");  // the fastest was wrong: not chosen
  EXPECT_EQ(csv[1][chosen], "false");
  EXPECT_EQ(csv[2][chosen], "true");
  EXPECT_EQ(csv[5][status], "pruned");
  // Unmeasured last, whatever their status.
  std::vector<std::string> last = {csv[6][status], csv[7][status]};
  std::sort(last.begin(), last.end());
  EXPECT_EQ(last, (std::vector<std::string>{"failed_check", "skipped_occupancy"}));
  EXPECT_THAT(result.out, HasSubstr("0 resident blocks per SM"));
  EXPECT_THAT(result.out, HasSubstr("max error 0.5 at row 7"));
}

// The fixture's entries were not re-timed: the time and its spread are of
// one measurement and say so.
TEST_F(ConfigsCliTest, ShowGivesTheTimeWithTheSpreadOfTheSameMeasurement) {
  const Result result = Show(HotPoint("1"), false);
  ASSERT_EQ(result.code, kExitOk) << result.err;
  EXPECT_THAT(result.out, HasSubstr("38.25 us, median of 50 repetitions (p10 .. p90 37.4"));
  EXPECT_THAT(result.out, Not(HasSubstr("sweep ")));
}

// issue 27: `time 2.17 us (spread 2.18 .. 2.21 us)`, a median outside its
// own spread, because the median came from the confirmation rounds and the
// spread from the sweep. Each now stands on its own labelled line.
TEST_F(ConfigsCliTest, ShowSetsAConfirmedTimeApartFromTheSweepsSpread) {
  {
    absl::StatusOr<std::unique_ptr<db::TuningStore>> store = db::TuningStore::Open(db_, {});
    ASSERT_TRUE(store.ok()) << store.status();
    db::TuningRun run;
    run.gpu_id = 1;
    run.started_at = testing::kFixtureTime;
    run.env = {12040, 12030, kernels::kKernelLibraryVersion};
    absl::StatusOr<int64_t> run_id = (*store)->CreateRun(run);
    ASSERT_TRUE(run_id.ok()) << run_id.status();
    const db::GpuSku sku = testing::H100Sku();
    absl::StatusOr<kernels::DeviceInfo> device = kernels::DescribeSku(
        sku.name, sku.cc_major, sku.cc_minor, sku.sm_count, sku.total_memory_bytes);
    ASSERT_TRUE(device.ok());
    absl::StatusOr<std::vector<kernels::LaunchConfig>> configs = kernels::EnumerateConfigs(
        kernels::Op::kSoftmax, kernels::DType::kFloat16, {64, 4096}, *device);
    ASSERT_TRUE(configs.ok() && !configs->empty());
    db::Candidate candidate;
    candidate.run_id = *run_id;
    candidate.point = {1, "softmax", "float16", 64, 4096};
    candidate.config = tuner::ConfigRecordOf(configs->front());
    candidate.median_us = 2.19;
    candidate.spread_low_us = 2.18;
    candidate.spread_high_us = 2.21;
    candidate.repetitions = 30;
    candidate.gbps = 480.0;
    candidate.pct_of_copy = 16.0;
    candidate.correct = true;
    db::BestConfig best;
    best.point = candidate.point;
    best.config = candidate.config;
    best.median_us = 2.17;  // the confirmation rounds'
    best.spread_low_us = 2.18;
    best.spread_high_us = 2.21;
    best.gbps = 484.0;
    best.pct_of_copy = 16.1;
    best.heuristic_key = kernels::ConfigKey(configs->back());
    best.heuristic_us = 2.4;
    best.run_id = *run_id;
    best.env = run.env;
    best.updated_at = testing::kFixtureTime;
    ASSERT_TRUE((*store)->WritePoint(best, {candidate}).ok());
  }
  const Result result = Show({"1", "softmax", "float16", 64, 4096}, false);
  ASSERT_EQ(result.code, kExitOk) << result.err;
  EXPECT_THAT(result.out, HasSubstr("2.17 us, median of the final rounds against the heuristic\n"));
  EXPECT_THAT(result.out, HasSubstr("2.19 us, median of 30 repetitions (p10 .. p90 2.18 .. 2.21 "
                                    "us); it ranked the candidates\n"));
  EXPECT_THAT(result.out, Not(HasSubstr("2.17 us (spread")));
}

// An imported entry has no candidates here: its spread is labelled as the
// sweep's, which may precede the time.
TEST_F(ConfigsCliTest, ShowLabelsTheSpreadOfAnImportedEntry) {
  const std::string file = dir_.File("h100.json");
  const Result exported = Export({"h100"});
  ASSERT_EQ(exported.code, kExitOk) << exported.err;
  WriteFile(file, exported.out);
  const std::string fresh = dir_.File("imported.db");
  ASSERT_EQ(Import(file, fresh).code, kExitOk);
  const Result result = Call(RunConfigsShow, ConfigsShowOptions{fresh, OutputFormat::kTable,
                                                                HotPoint("1"), false});
  ASSERT_EQ(result.code, kExitOk) << result.err;
  EXPECT_THAT(result.out, HasSubstr("38.25 us\n"));
  EXPECT_THAT(result.out, HasSubstr("p10 .. p90 37.4"));
  EXPECT_THAT(result.out, HasSubstr(" in the tuner's sweep; the time above may come from its "
                                    "later rounds against the heuristic"));
}

// Pruned rows' thresholds differ from row to row: the table says why.
TEST_F(ConfigsCliTest, ShowCandidatesExplainsThePruningThreshold) {
  const Result result = Show(HotPoint("1"), true);
  ASSERT_EQ(result.code, kExitOk) << result.err;
  EXPECT_THAT(result.out, HasSubstr("pruned: a short probe's fastest run was slower than the "
                                    "threshold in its message, the prune factor times the best "
                                    "median found before it"));
  // No pruned row, no note.
  EXPECT_THAT(Show({"2", "softmax", "float16", 49152, 4096}, true).out,
              Not(HasSubstr("prune factor")));
}

TEST_F(ConfigsCliTest, ShowJsonHoldsBestAndCandidates) {
  const Result result = Show(HotPoint("a100"), true, OutputFormat::kJson);
  ASSERT_EQ(result.code, kExitOk) << result.err;
  gpb::Struct document;
  ASSERT_TRUE(gpb::util::JsonStringToMessage(result.out, &document).ok()) << result.out;
  const gpb::Struct& best = document.fields().at("best").struct_value();
  EXPECT_EQ(best.fields().at("gpu_id").number_value(), 2);
  EXPECT_EQ(best.fields().at("median_us").number_value(), 20);
  const gpb::ListValue& candidates = document.fields().at("candidates").list_value();
  ASSERT_EQ(candidates.values_size(), 3);
  EXPECT_EQ(Field(candidates.values(0), "median_us").number_value(), 20);
  EXPECT_TRUE(Field(candidates.values(0), "chosen").bool_value());
  EXPECT_EQ(Field(candidates.values(0), "occupancy").number_value(), 8);
  EXPECT_EQ(Field(candidates.values(0), "spread_low_us").number_value(), 20 * 0.98);
  // Without --candidates, no candidates key.
  const Result plain = Show(HotPoint("a100"), false, OutputFormat::kJson);
  EXPECT_THAT(plain.out, Not(HasSubstr("candidates")));
}

// --- shipped configs ------------------------------------------------------------

// The fixture's store beside a shipped-configs directory: an H100 file (the
// store's SKU) and an H200 file (a SKU only shipped files know).
class ShippedConfigsCliTest : public ConfigsCliTest {
 protected:
  void SetUp() override {
    ConfigsCliTest::SetUp();
    configs_ = dir_.File("configs");
    ASSERT_EQ(mkdir(configs_.c_str(), 0755), 0);
    // The H100's softmax float16 entry is also in the store (current), its
    // layer_norm bfloat16 one is stale in the store; rms_norm only here.
    WriteFile(configs_ + "/h100.json",
              FileOf(testing::H100Sku(), {{0, "softmax", "float16", 49152, 4096},
                                          {0, "layer_norm", "bfloat16", 49152, 4096},
                                          {0, "rms_norm", "float16", 1024, 1024}}));
    WriteFile(configs_ + "/h200.json",
              FileOf(H200Sku(), {{0, "softmax", "bfloat16", 4096, 4096}}));
  }

  static db::GpuSku H200Sku() { return {"NVIDIA H200", 9, 0, 132, 150754820096}; }

  // A shipped file of `sku` with the heuristic config of each point.
  static std::string FileOf(const db::GpuSku& sku, const std::vector<db::PointKey>& points) {
    const kernels::DeviceInfo device = *kernels::DescribeSku(
        sku.name, sku.cc_major, sku.cc_minor, sku.sm_count, sku.total_memory_bytes);
    std::vector<db::BestConfig> rows;
    for (const db::PointKey& point : points) {
      const kernels::LaunchConfig config = *kernels::HeuristicConfig(
          *kernels::ParseOp(point.op), *kernels::ParseDType(point.dtype),
          {point.rows, point.cols}, device);
      db::BestConfig row;
      row.point = point;
      row.config = tuner::ConfigRecordOf(config);
      row.median_us = 12.5;
      row.env.kernel_version = kernels::kKernelLibraryVersion;
      row.updated_at = testing::kFixtureTime;
      rows.push_back(row);
    }
    return *proto::ConfigFileToJson(
        *proto::MakeConfigFile(sku, rows, absl::FromUnixSeconds(testing::kFixtureTime)));
  }

  Result ShowShipped(PointFlags point, OutputFormat format = OutputFormat::kTable) {
    return Call(RunConfigsShow, ConfigsShowOptions{db_, format, std::move(point), false,
                                                   configs_});
  }

  std::string configs_;
};

TEST_F(ShippedConfigsCliTest, ShowNamesTheSourceOfEachPointsConfig) {
  // Tuned in the store and shipped: the store's entry wins.
  Result shown = ShowShipped(HotPoint("h100"));
  ASSERT_EQ(shown.code, kExitOk) << shown.err;
  EXPECT_THAT(shown.out, HasSubstr("tuned (the local store's entry for this point)"));
  EXPECT_THAT(shown.out, HasSubstr("38.25 us"));

  // Stale in the store, current in the shipped file: the shipped one.
  shown = ShowShipped({"h100", "layer_norm", "bfloat16", 49152, 4096});
  ASSERT_EQ(shown.code, kExitOk) << shown.err;
  EXPECT_THAT(shown.out, HasSubstr("shipped (the shipped file's entry for this "
                                   "point)"));
  // What the shipped entry measured, and where it comes from.
  EXPECT_THAT(shown.out, HasSubstr("time         12.50 us\n"));
  EXPECT_THAT(shown.out, HasSubstr("2024-05-01 12:00:00 UTC, shipped in " + configs_ +
                                   "/h100.json; kernels "));
  EXPECT_THAT(shown.out, HasSubstr("(stale): not served"));

  // Only shipped, at a neighbouring point: the nearest, from the file.
  shown = ShowShipped({"h100", "rms_norm", "float16", 2048, 1024});
  ASSERT_EQ(shown.code, kExitOk) << shown.err;
  EXPECT_THAT(shown.out, HasSubstr("nearest tuned (the shipped file's entry at "
                                   "1024x1024, 12.50 us there)"));

  // Nothing anywhere: the heuristic.
  shown = ShowShipped({"h100", "reduce_scale", "float32", 64, 64});
  ASSERT_EQ(shown.code, kExitOk) << shown.err;
  EXPECT_THAT(shown.out, HasSubstr("heuristic (no current tuned or shipped entry "
                                   "applies)"));

  // A SKU only the shipped files know, chosen by name.
  shown = ShowShipped({"h200", "softmax", "bfloat16", 4096, 4096}, OutputFormat::kCsv);
  ASSERT_EQ(shown.code, kExitOk) << shown.err;
  const auto csv = Csv(shown.out);
  ASSERT_EQ(csv.size(), 2u) << shown.out;
  EXPECT_EQ(csv[1][ColumnIndex(csv, "gpu_id")], "");
  EXPECT_EQ(csv[1][ColumnIndex(csv, "gpu_name")], "NVIDIA H200");
  EXPECT_EQ(csv[1][ColumnIndex(csv, "source")], "shipped");
  EXPECT_EQ(csv[1][ColumnIndex(csv, "tuned_origin")], "shipped");
  EXPECT_EQ(csv[1][ColumnIndex(csv, "tuned_median_us")], "12.5");
  // Without --gpu the only SKU with an entry at the point is chosen.
  EXPECT_EQ(ShowShipped({{}, "softmax", "bfloat16", 4096, 4096}).code, kExitOk);
}

TEST_F(ShippedConfigsCliTest, ListShowsShippedRowsAndWhatIsServed) {
  const Result result =
      Call(RunConfigsList, ConfigsListOptions{db_, OutputFormat::kCsv, {}, configs_});
  ASSERT_EQ(result.code, kExitOk) << result.err;
  const auto csv = Csv(result.out);
  ASSERT_EQ(csv.size(), 1u + 6 + 4) << result.out;  // the store's 6, then 4 shipped
  const size_t origin = ColumnIndex(csv, "origin");
  const size_t served = ColumnIndex(csv, "served");
  const size_t op = ColumnIndex(csv, "op");
  int shipped = 0;
  for (size_t i = 1; i < csv.size(); ++i) {
    if (csv[i][origin] != "shipped") continue;
    ++shipped;
    // The shipped softmax is overridden by the store's current entry; the
    // shipped layer_norm serves in place of the stale local one.
    if (csv[i][op] == "softmax" &&
        csv[i][ColumnIndex(csv, "gpu_name")] == "NVIDIA H100 80GB HBM3") {
      EXPECT_EQ(csv[i][served], "tuned");
    } else {
      EXPECT_EQ(csv[i][served], "shipped") << i;
    }
  }
  EXPECT_EQ(shipped, 4);
  // The stale local layer_norm: the shipped entry serves its point.
  EXPECT_EQ(csv[1][op], "layer_norm");
  EXPECT_EQ(csv[1][origin], "local");
  EXPECT_EQ(csv[1][served], "shipped");
}

TEST_F(ShippedConfigsCliTest, ShowCandidatesAtAShippedPointSaysWhatTheFileHolds) {
  const Result shown = Call(RunConfigsShow,
                            ConfigsShowOptions{db_, OutputFormat::kTable,
                                               {"h100", "rms_norm", "float16", 1024, 1024},
                                               /*candidates=*/true, configs_});
  ASSERT_EQ(shown.code, kExitOk) << shown.err;
  EXPECT_THAT(shown.out, HasSubstr("shipped entry from " + configs_ + "/h100.json: "));
  EXPECT_THAT(shown.out, HasSubstr(", 12.50 us measured 2024-05-01 12:00:00 UTC, kernels "));
  EXPECT_THAT(shown.out, HasSubstr(
                             "candidates are not shipped (a shipped file holds each point's "
                             "chosen config only):\nrun `kerntune tune --ops=rms_norm "
                             "--dtypes=float16 --rows=1024 --cols=1024` on NVIDIA H100 80GB "
                             "HBM3 to measure and record them in the local store"));
  EXPECT_THAT(shown.out, Not(HasSubstr("no candidates recorded")));
  // Scripts get the shipped entry and its file beside the store's.
  const Result json = Call(RunConfigsShow,
                           ConfigsShowOptions{db_, OutputFormat::kJson,
                                              {"h100", "rms_norm", "float16", 1024, 1024},
                                              /*candidates=*/true, configs_});
  gpb::Struct document;
  ASSERT_TRUE(gpb::util::JsonStringToMessage(json.out, &document).ok()) << json.out;
  EXPECT_EQ(document.fields().at("shipped_file").string_value(), configs_ + "/h100.json");
  EXPECT_EQ(document.fields().at("shipped").struct_value().fields().at("median_us")
                .number_value(),
            12.5);
  EXPECT_TRUE(document.fields().at("best").has_null_value());
}

// export writes what the daemon serves: the store's entry at each point
// where it is current, the shipped one elsewhere, and says where each came
// from on stderr.
TEST_F(ShippedConfigsCliTest, ExportWritesWhatTheDaemonServesAndSaysWhereFrom) {
  ConfigsExportOptions options;
  options.db_path = db_;
  options.filter = {"h100"};
  options.configs_dir = configs_;
  const Result result = Call(RunConfigsExport, options);
  ASSERT_EQ(result.code, kExitOk) << result.err;
  const absl::StatusOr<proto::ParsedConfigFile> parsed = proto::ParseConfigFile(result.out);
  ASSERT_TRUE(parsed.ok()) << parsed.status();
  // The store's 4 points and the shipped-only rms_norm one.
  ASSERT_EQ(parsed->valid.size(), 5u);
  for (const db::BestConfig& row : parsed->valid) {
    if (row.point.op == "layer_norm" || row.point.op == "rms_norm") {
      EXPECT_EQ(row.median_us, 12.5) << row.point.op;  // the shipped entries
      EXPECT_EQ(row.env.kernel_version, kernels::kKernelLibraryVersion);
    } else {
      EXPECT_NE(row.median_us, 12.5) << row.point.op;  // the store's
    }
  }
  EXPECT_EQ(result.err, "exported 5 tuned configs of NVIDIA H100 80GB HBM3 (cc 9.0, 132 SMs, "
                        "79.6 GiB): 3 from the store " + db_ + ", 2 from the shipped file " +
                        configs_ + "/h100.json (at each point the entry the daemon serves: the "
                        "store's, else the shipped one)\n");
  // A SKU only the shipped files know exports from them alone.
  options.filter = {"h200"};
  const Result h200 = Call(RunConfigsExport, options);
  ASSERT_EQ(h200.code, kExitOk) << h200.err;
  EXPECT_EQ(proto::ParseConfigFile(h200.out)->valid.size(), 1u);
  EXPECT_THAT(h200.err, HasSubstr(": 1 from the shipped file " + configs_ + "/h200.json\n"));
}

TEST_F(ShippedConfigsCliTest, ABadShippedFileIsNamedAndTheOthersStillServe) {
  WriteFile(configs_ + "/broken.json", std::string("SQLite format 3\0", 16));
  const Result shown = ShowShipped({"h200", "softmax", "bfloat16", 4096, 4096});
  ASSERT_EQ(shown.code, kExitOk) << shown.err;
  EXPECT_THAT(shown.err, HasSubstr("shipped config file " + configs_ +
                                   "/broken.json: this is a SQLite tuning store"));
  EXPECT_THAT(shown.out, HasSubstr("shipped (the shipped file's entry for this point)"));
}

// --- configs export / import --------------------------------------------------

TEST_F(ConfigsCliTest, ExportNeedsExactlyOneGpu) {
  Result result = Export({});
  EXPECT_EQ(result.code, kExitUsage);
  EXPECT_THAT(result.err, HasSubstr("holds 2 GPUs; choose one with --gpu"));
  EXPECT_THAT(result.err, HasSubstr("--gpu=1 NVIDIA H100 80GB HBM3"));
  EXPECT_THAT(result.err, HasSubstr("--gpu=2 NVIDIA A100-SXM4-80GB"));
  EXPECT_TRUE(result.out.empty());
  result = Export({"nvidia"});
  EXPECT_EQ(result.code, kExitUsage);
  EXPECT_THAT(result.err, HasSubstr("--gpu=nvidia matches 2 GPUs"));
  result = Export({"v100"});
  EXPECT_EQ(result.code, kExitFailure);
  EXPECT_THAT(result.err, HasSubstr("--gpu=v100 matches no GPU"));
  result = Export({"h100", "bogus"});
  EXPECT_EQ(result.code, kExitUsage);
}

TEST_F(ConfigsCliTest, ExportWritesTheVersionedFile) {
  const Result result = Export({"H100"});
  ASSERT_EQ(result.code, kExitOk) << result.err;
  EXPECT_THAT(result.out, HasSubstr("\"format\": \"kerntune.tuned_configs\""));
  EXPECT_THAT(result.out, HasSubstr("\"format_version\": 1"));
  EXPECT_THAT(result.out, HasSubstr("\"exported_at\": \"2024-05-01T13:00:00Z\""));
  EXPECT_THAT(result.err, HasSubstr("exported 4 tuned configs"));
  const absl::StatusOr<proto::ParsedConfigFile> parsed = proto::ParseConfigFile(result.out);
  ASSERT_TRUE(parsed.ok()) << parsed.status();
  EXPECT_EQ(parsed->sku, testing::H100Sku());
  EXPECT_EQ(parsed->valid.size(), 4u);
  // Filters narrow the points.
  const Result some = Export({"h100", "softmax"});
  EXPECT_EQ(proto::ParseConfigFile(some.out)->valid.size(), 2u);
}

// Store rows compared without their store-local ids.
void ExpectSameRows(const std::vector<db::BestConfig>& a,
                    const std::vector<db::BestConfig>& b) {
  ASSERT_EQ(a.size(), b.size());
  for (size_t i = 0; i < a.size(); ++i) {
    db::PointKey pa = a[i].point, pb = b[i].point;
    pa.gpu_id = pb.gpu_id = 0;
    EXPECT_EQ(pa, pb);
    EXPECT_EQ(a[i].config, b[i].config);
    EXPECT_EQ(a[i].median_us, b[i].median_us);
    EXPECT_EQ(a[i].spread_low_us, b[i].spread_low_us);
    EXPECT_EQ(a[i].spread_high_us, b[i].spread_high_us);
    EXPECT_EQ(a[i].gbps, b[i].gbps);
    EXPECT_EQ(a[i].pct_of_copy, b[i].pct_of_copy);
    EXPECT_EQ(a[i].graph_replay, b[i].graph_replay);
    EXPECT_EQ(a[i].heuristic_key, b[i].heuristic_key);
    EXPECT_EQ(a[i].heuristic_us, b[i].heuristic_us);
    EXPECT_EQ(a[i].env, b[i].env);
    EXPECT_EQ(a[i].updated_at, b[i].updated_at);
  }
}

std::vector<db::BestConfig> StoreRows(const std::string& path,
                                      const db::GpuSku& sku) {
  auto store = db::TuningStore::Open(path, {});
  EXPECT_TRUE(store.ok()) << store.status();
  auto rows = (*store)->BestConfigsForSku(sku);
  EXPECT_TRUE(rows.ok());
  return *rows;
}

// `configs list --format=csv` without the columns local to a store.
std::string PortableList(const std::string& db, const std::string& gpu) {
  std::ostringstream out, err;
  EXPECT_EQ(RunConfigsList({db, OutputFormat::kCsv, {gpu}}, out, err), kExitOk);
  auto csv = Csv(out.str());
  const size_t gpu_id = ColumnIndex(csv, "gpu_id");
  const size_t run_id = ColumnIndex(csv, "run_id");
  std::string text;
  for (auto& row : csv) {
    row[gpu_id] = row[run_id] = "";
    text += absl::StrJoin(row, ",") + "\n";
  }
  return text;
}

TEST_F(ConfigsCliTest, ExportImportRoundTrip) {
  for (const char* gpu : {"h100", "a100"}) {
    const std::string file = dir_.File(std::string(gpu) + ".json");
    const Result exported = Export({gpu});
    ASSERT_EQ(exported.code, kExitOk) << exported.err;
    WriteFile(file, exported.out);

    const std::string fresh = dir_.File(std::string("fresh_") + gpu + ".db");
    const Result imported = Import(file, fresh);
    EXPECT_EQ(imported.code, kExitOk) << imported.err;
    // Only H100's stale layer_norm entry is worth a word.
    EXPECT_EQ(imported.err.empty(), std::string(gpu) == "a100") << imported.err;
    EXPECT_THAT(imported.err, Not(HasSubstr("skipped")));
    EXPECT_THAT(imported.out, HasSubstr("imported"));
    EXPECT_EQ(PortableList(fresh, gpu), PortableList(db_, gpu));
  }
  ExpectSameRows(StoreRows(dir_.File("fresh_h100.db"), testing::H100Sku()),
                 StoreRows(db_, testing::H100Sku()));
  ExpectSameRows(StoreRows(dir_.File("fresh_a100.db"), testing::A100Sku()),
                 StoreRows(db_, testing::A100Sku()));
  // Importing into the store it came from changes nothing and is no error.
  const Result again = Import(dir_.File("h100.json"), db_);
  EXPECT_EQ(again.code, kExitOk) << again.err;
  EXPECT_EQ(StoreRows(db_, testing::H100Sku()).size(), 4u);
}

// A file with legal and illegal entries, written as raw JSON edits of an
// export.
std::string MixedFile(const std::string& exported) {
  gpb::Struct document;
  EXPECT_TRUE(gpb::util::JsonStringToMessage(exported, &document).ok());
  gpb::ListValue& configs =
      *(*document.mutable_fields())["configs"].mutable_list_value();
  const gpb::Value legal = configs.values(0);  // layer_norm bfloat16 49152x4096
  const auto add = [&](const std::string& key, const gpb::Value& value,
                       const std::string& sub = "") {
    gpb::Value entry = legal;
    auto& fields = *entry.mutable_struct_value()->mutable_fields();
    fields["rows"].set_number_value(1000 + configs.values_size());
    if (sub.empty()) {
      fields[key] = value;
    } else {
      (*fields[key].mutable_struct_value()->mutable_fields())[sub] = value;
    }
    *configs.add_values() = entry;
  };
  gpb::Value text, number;
  text.set_string_value("softermax");
  add("op", text);                                   // 4: unknown op
  text.set_string_value("warp/b128/p8/g32/r1");
  add("config", text, "key");                        // 5: bad key
  number.set_number_value(96);
  add("config", number, "block_size");               // 6: fields disagree with key
  number.set_number_value(-1.5);
  add("median_us", number);                          // 7: negative time
  std::string json;
  EXPECT_TRUE(gpb::util::MessageToJsonString(document, &json).ok());
  return json;
}

TEST_F(ConfigsCliTest, ImportKeepsValidEntriesAndReportsSkippedOnes) {
  const Result exported = Export({"h100"});
  ASSERT_EQ(exported.code, kExitOk);
  const std::string file = dir_.File("mixed.json");
  WriteFile(file, MixedFile(exported.out));
  const std::string fresh = dir_.File("mixed.db");

  const Result result = Import(file, fresh);
  EXPECT_EQ(result.code, kExitFailure);
  EXPECT_THAT(result.out, HasSubstr("imported 4 of 8 tuned configs of NVIDIA H100"));
  EXPECT_THAT(result.out, HasSubstr("skipped 4"));
  EXPECT_THAT(result.err, HasSubstr("entry 4 skipped: softermax bfloat16 1004x4096: "
                                    "op=\"softermax\" is not one of"));
  EXPECT_THAT(result.err, HasSubstr("entry 5 skipped: "));
  EXPECT_THAT(result.err, HasSubstr("is not of the form"));
  EXPECT_THAT(result.err, HasSubstr("entry 6 skipped: "));
  EXPECT_THAT(result.err, HasSubstr("config.block_size=96 disagrees with config.key"));
  EXPECT_THAT(result.err, HasSubstr("entry 7 skipped: "));
  EXPECT_THAT(result.err, HasSubstr("median_us=-1.5 must be finite and > 0"));
  EXPECT_EQ(StoreRows(fresh, testing::H100Sku()).size(), 4u);

  const Result json = Import(file, dir_.File("mixed2.db"), OutputFormat::kJson);
  EXPECT_EQ(json.code, kExitFailure);
  gpb::Struct report;
  ASSERT_TRUE(gpb::util::JsonStringToMessage(json.out, &report).ok()) << json.out;
  EXPECT_EQ(report.fields().at("entries").number_value(), 8);
  EXPECT_EQ(report.fields().at("imported").number_value(), 4);
  const gpb::ListValue& skipped = report.fields().at("skipped").list_value();
  ASSERT_EQ(skipped.values_size(), 4);
  EXPECT_EQ(Field(skipped.values(0), "index").number_value(), 4);
  EXPECT_THAT(Field(skipped.values(3), "reason").string_value(), HasSubstr("median_us"));
}

TEST_F(ConfigsCliTest, ImportOfAnUnusableFileImportsNothing) {
  const std::string fresh = dir_.File("untouched.db");
  const auto expect_refused = [&](const std::string& name, const std::string& contents,
                                  const std::string& message) {
    const std::string file = dir_.File(name);
    WriteFile(file, contents);
    const Result result = Import(file, fresh);
    EXPECT_EQ(result.code, kExitUsage) << name;
    EXPECT_THAT(result.err, HasSubstr(message)) << name;
    EXPECT_THAT(result.err, HasSubstr("nothing imported")) << name;
  };
  expect_refused("not_json.json", "GPU configs, trust me",
                 "not valid JSON: line 1, column 1: expected a value");
  expect_refused("store.db", std::string("SQLite format 3\0\x10\x00\x01", 19),
                 "store.db is a SQLite tuning store, not a tuned-config file: read it with "
                 "--db=");
  expect_refused("other.json", R"({"format": "acme.settings", "format_version": 1})",
                 "format=\"acme.settings\" is not \"kerntune.tuned_configs\"");
  expect_refused("newer.json",
                 R"({"format": "kerntune.tuned_configs", "format_version": 7,
                     "configs": {"v7": "layout"}})",
                 "format_version=7 is newer than this kerntune reads (1)");
  expect_refused("no_sku.json",
                 R"({"format": "kerntune.tuned_configs", "format_version": 1,
                     "gpu": {"name": "X", "cc_major": 9}, "configs": []})",
                 "gpu.sm_count=0 must be >= 1");

  const Result missing = Import(dir_.File("does_not_exist.json"), fresh);
  EXPECT_EQ(missing.code, kExitUsage);
  EXPECT_THAT(missing.err, HasSubstr("cannot open"));
  EXPECT_EQ(Import("", fresh).code, kExitUsage);
  // Nothing was written: the store was never even created.
  EXPECT_FALSE(std::ifstream(fresh).good());
}

// issue 27: `kerntune configs import tuned.db` (a store, an easy mistake)
// printed raw binary bytes; now it names the mistake and both ways out.
TEST_F(ConfigsCliTest, ImportOfATuningStoreSaysToUseDb) {
  const Result result = Import(db_, dir_.File("other.db"));
  EXPECT_EQ(result.code, kExitUsage);
  EXPECT_EQ(result.err, "kerntune configs import: " + db_ +
                            " is a SQLite tuning store, not a tuned-config file: read it with "
                            "--db=" + db_ + " (`kerntune configs list --db=" + db_ +
                            "`), or write a file from it with `kerntune configs export --db=" +
                            db_ + " > FILE`; nothing imported\n");
  EXPECT_EQ(result.out, "");
}

// A file cut short (a full disk, an interrupted copy): where it ends.
TEST_F(ConfigsCliTest, ImportOfATruncatedFileSaysWhere) {
  const Result exported = Export({"h100"});
  ASSERT_EQ(exported.code, kExitOk) << exported.err;
  const std::string text = exported.out.substr(0, exported.out.size() / 2);
  const int lines = static_cast<int>(std::count(text.begin(), text.end(), '\n')) + 1;
  const std::string file = dir_.File("truncated.json");
  WriteFile(file, text);
  const Result result = Import(file, dir_.File("fresh.db"));
  EXPECT_EQ(result.code, kExitUsage);
  EXPECT_THAT(result.err, HasSubstr("truncated.json: not valid JSON: line " +
                                    std::to_string(lines) + ", column "));
  EXPECT_THAT(result.err, HasSubstr("found the end of the input; nothing imported"));
}

// Entries of another kernel library import (the store keeps them) but are
// never served: import says so instead of nothing.
TEST_F(ConfigsCliTest, ImportSaysWhichEntriesAreStale) {
  const Result exported = Export({"h100"});  // 4 entries, layer_norm bfloat16 stale
  ASSERT_EQ(exported.code, kExitOk) << exported.err;
  const std::string file = dir_.File("h100.json");
  WriteFile(file, exported.out);
  const Result result = Import(file, dir_.File("fresh.db"));
  EXPECT_EQ(result.code, kExitOk) << result.err;
  EXPECT_THAT(result.out, HasSubstr("imported 4 of 4 tuned configs"));
  EXPECT_THAT(result.out, HasSubstr("; 1 stale, not served (see stderr)"));
  EXPECT_EQ(result.err,
            "kerntune configs import: " + file +
                ": 1 of 4 imported entries were measured with kernel library " +
                testing::kStaleKernelVersion + ", not this kerntune's " +
                kernels::kKernelLibraryVersion +
                ": the daemon does not serve them (`kerntune configs list` marks them stale); "
                "re-tune, or import a file exported with kernels " +
                kernels::kKernelLibraryVersion + "\n");
  const Result json = Import(file, dir_.File("fresh2.db"), OutputFormat::kJson);
  EXPECT_THAT(json.out, HasSubstr("\"imported\": 4, \"stale\": 1"));
}

TEST_F(ConfigsCliTest, ImportOfAnEmptyConfigListIsFine) {
  const std::string file = dir_.File("empty.json");
  WriteFile(file, Export({"h100", {}, {}, 7}).out);  // no point has 7 rows
  const Result result = Import(file, dir_.File("empty.db"));
  EXPECT_EQ(result.code, kExitOk) << result.err;
  EXPECT_THAT(result.out, HasSubstr("imported 0 of 0"));
}

}  // namespace
}  // namespace kt::client
