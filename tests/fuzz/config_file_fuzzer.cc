// Fuzzes the tuned-config file as `kerntune configs import` reads it
// (ParseConfigFile), then imports what it accepted into a tuning store.
// Properties: the store takes every entry the parser accepted, and
// exporting the accepted entries and reading the export back gives the
// same entries, none skipped.
//
// Input: the file's bytes.
#include <stdlib.h>

#include <cstddef>
#include <cstdint>
#include <cstdio>
#include <filesystem>
#include <memory>
#include <string>

#include "absl/strings/str_cat.h"
#include "db/records.h"
#include "db/tuning_store.h"
#include "proto/config_file.h"
#include "tests/fuzz/fuzz_check.h"

namespace kt::fuzz {
namespace {

// One store for the whole run, in a fresh directory (/dev/shm when there
// is one: imports commit on every input).
db::TuningStore& Store() {
  static db::TuningStore* store = [] {
    const std::string base = std::filesystem::exists("/dev/shm") ? "/dev/shm" : "/tmp";
    std::string dir = base + "/kt-fuzz-config-file-XXXXXX";
    if (mkdtemp(dir.data()) == nullptr) PropertyFailed("mkdtemp", dir);
    static const std::string kept = dir;
    std::atexit([] { std::filesystem::remove_all(kept); });
    db::OpenOptions options;
    options.create_if_missing = true;
    absl::StatusOr<std::unique_ptr<db::TuningStore>> opened =
        db::TuningStore::Open(dir + "/tuning.db", options);
    if (!opened.ok()) PropertyFailed("TuningStore::Open", opened.status().ToString());
    return opened->release();
  }();
  return *store;
}

bool SameRow(const db::BestConfig& a, const db::BestConfig& b) {
  return a.point == b.point && a.config == b.config && a.median_us == b.median_us &&
         a.spread_low_us == b.spread_low_us && a.spread_high_us == b.spread_high_us &&
         a.gbps == b.gbps && a.pct_of_copy == b.pct_of_copy &&
         a.graph_replay == b.graph_replay && a.heuristic_key == b.heuristic_key &&
         a.heuristic_us == b.heuristic_us && a.env == b.env && a.updated_at == b.updated_at;
}

}  // namespace
}  // namespace kt::fuzz

extern "C" int LLVMFuzzerTestOneInput(const uint8_t* data, size_t size) {
  using namespace kt;  // NOLINT: the harness's own namespace
  const absl::string_view text(reinterpret_cast<const char*>(data), size);
  absl::StatusOr<proto::ParsedConfigFile> parsed = proto::ParseConfigFile(text);
  if (!parsed.ok() || parsed->valid.empty()) return 0;

  absl::StatusOr<kerntune::v1::TunedConfigFile> file =
      proto::MakeConfigFile(parsed->sku, parsed->valid, absl::FromUnixSeconds(0));
  KT_FUZZ_CHECK(file.ok(), file.status().ToString());
  absl::StatusOr<std::string> json = proto::ConfigFileToJson(*file);
  KT_FUZZ_CHECK(json.ok(), json.status().ToString());
  absl::StatusOr<proto::ParsedConfigFile> again = proto::ParseConfigFile(*json);
  KT_FUZZ_CHECK(again.ok() && again->sku == parsed->sku && again->skipped.empty() &&
                    again->valid.size() == parsed->valid.size(),
                again.ok() ? absl::StrCat(again->skipped.size(), " skipped, first: ",
                                          again->skipped.empty() ? ""
                                                                 : again->skipped[0].reason)
                           : again.status().ToString());
  for (size_t i = 0; i < parsed->valid.size(); ++i) {
    KT_FUZZ_CHECK(fuzz::SameRow(parsed->valid[i], again->valid[i]),
                  absl::StrCat("entry ", i, " changed through an export"));
  }

  absl::StatusOr<int64_t> imported =
      fuzz::Store().ImportBestConfigs(parsed->sku, parsed->valid);
  KT_FUZZ_CHECK(imported.ok(), imported.status().ToString());
  return 0;
}
