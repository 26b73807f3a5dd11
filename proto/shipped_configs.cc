// Reading the shipped config files (shipped_configs.h).
#include "proto/shipped_configs.h"

#include <dlfcn.h>

#include <algorithm>
#include <filesystem>
#include <fstream>
#include <sstream>
#include <system_error>
#include <utility>

#include "absl/status/status.h"
#include "absl/strings/str_cat.h"

#ifndef KT_SOURCE_CONFIG_DIR
#error "KT_SOURCE_CONFIG_DIR (the source tree's deploy/configs) must be defined by the build"
#endif

namespace kt::proto {
namespace {

namespace fs = std::filesystem;

absl::StatusOr<std::string> ReadWholeFile(const fs::path& path) {
  std::ifstream in(path, std::ios::binary);
  if (!in) return absl::NotFoundError("cannot open it");
  std::ostringstream contents;
  contents << in.rdbuf();
  if (in.bad()) return absl::DataLossError("cannot read it");
  return contents.str();
}

}  // namespace

std::string DefaultShippedConfigDir() {
  // The file this code was linked into: the program (kerntuned, kerntune)
  // or a library in <prefix>/lib (libkerntune_runtime.so in a Python
  // process, whose program is python). <prefix>/bin and <prefix>/lib both
  // sit beside <prefix>/share.
  Dl_info info{};
  if (dladdr(reinterpret_cast<void*>(&DefaultShippedConfigDir), &info) != 0 &&
      info.dli_fname != nullptr) {
    std::error_code error;
    const fs::path file = fs::canonical(info.dli_fname, error);
    const fs::path installed =
        (file.parent_path() / ".." / "share" / "kerntune" / "configs").lexically_normal();
    if (!error && fs::is_directory(installed, error)) return installed.string();
  }
  return KT_SOURCE_CONFIG_DIR;
}

std::vector<ShippedConfigFile> ReadShippedConfigs(const std::string& dir) {
  std::vector<fs::path> paths;
  std::error_code error;
  for (fs::directory_iterator it(dir, error), end; !error && it != end; it.increment(error)) {
    if (it->path().extension() == ".json") paths.push_back(it->path());
  }
  std::sort(paths.begin(), paths.end());
  std::vector<ShippedConfigFile> files;
  for (const fs::path& path : paths) {
    absl::StatusOr<std::string> text = ReadWholeFile(path);
    files.push_back({path.string(), text.ok() ? ParseConfigFile(*text)
                                              : absl::StatusOr<ParsedConfigFile>(text.status())});
  }
  return files;
}

std::vector<std::string> DescribeProblems(absl::Span<const ShippedConfigFile> files) {
  std::vector<std::string> problems;
  for (const ShippedConfigFile& file : files) {
    if (!file.contents.ok()) {
      problems.push_back(absl::StrCat(file.path, ": ", file.contents.status().message(),
                                      "; none of it is used"));
    } else if (!file.contents->skipped.empty()) {
      const SkippedEntry& first = file.contents->skipped.front();
      problems.push_back(absl::StrCat(file.path, ": ", file.contents->skipped.size(), " of ",
                                      file.contents->entries, " entries skipped (entry ",
                                      first.index, ": ", first.reason, ")"));
    }
  }
  return problems;
}

ShippedEntries ShippedEntriesFor(absl::Span<const ShippedConfigFile> files,
                                 const db::GpuSku& sku) {
  ShippedEntries shipped;
  for (const ShippedConfigFile& file : files) {
    if (!file.contents.ok() || !(file.contents->sku == sku)) continue;
    shipped.files.push_back(file.path);
    for (const db::BestConfig& row : file.contents->valid) {
      // ParseConfigFile accepted the entry, so it reads as one.
      absl::StatusOr<tuner::TunedEntry> entry =
          tuner::EntryFromRow(row, tuner::EntryOrigin::kShipped);
      if (entry.ok()) shipped.entries.push_back(*std::move(entry));
    }
  }
  return shipped;
}

}  // namespace kt::proto
