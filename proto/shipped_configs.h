// The tuned configs shipped with kerntune: one tuned-config file per GPU SKU
// (config_file.h), kept in the repository's deploy/configs, installed to
// share/kerntune/configs. kerntuned and `kerntune configs show/list` read
// them from the same directory (DefaultShippedConfigDir) and serve them
// after the local store's entries (tuner/config_lookup.h).
#ifndef KERNTUNE_PROTO_SHIPPED_CONFIGS_H_
#define KERNTUNE_PROTO_SHIPPED_CONFIGS_H_

#include <string>
#include <vector>

#include "absl/status/statusor.h"
#include "absl/types/span.h"
#include "db/records.h"
#include "proto/config_file.h"
#include "tuner/config_lookup.h"

namespace kt::proto {

// --configs's default for kerntuned and kerntune alike, and the in-process
// runtime's: <prefix>/share/kerntune/configs when it exists, <prefix> being
// the parent of the directory of the file this code is linked into (the
// program in <prefix>/bin, or libkerntune_runtime.so in <prefix>/lib: an
// installed kerntune or a bundle), else the source tree's deploy/configs (a
// program run from its build tree).
std::string DefaultShippedConfigDir();

struct ShippedConfigFile {
  std::string path;
  // The file as ParseConfigFile read it, or why it could not be read.
  absl::StatusOr<ParsedConfigFile> contents;
};

// Every *.json file of `dir`, by name. A file that cannot be read or is not
// a tuned-config file is kept with its error, so that the caller can name
// it; a missing directory has no files.
std::vector<ShippedConfigFile> ReadShippedConfigs(const std::string& dir);

// "deploy/configs/h100.json: not valid JSON: ..." for an unreadable file;
// "deploy/configs/h100.json: 2 of 40 entries skipped (entry 3: ...)" for one
// with bad entries. None for a good file.
std::vector<std::string> DescribeProblems(absl::Span<const ShippedConfigFile> files);

// The entries of the files whose SKU is `sku`, as lookup entries (origin
// shipped; stale ones included, for the table to count), and those files.
struct ShippedEntries {
  std::vector<std::string> files;
  std::vector<tuner::TunedEntry> entries;
};
ShippedEntries ShippedEntriesFor(absl::Span<const ShippedConfigFile> files,
                                 const db::GpuSku& sku);

}  // namespace kt::proto

#endif  // KERNTUNE_PROTO_SHIPPED_CONFIGS_H_
