// What the command lines of kerntune and kerntuned share, like the
// credential files of credentials.h: the line both print for --version,
// and the flag to suggest for a mistyped one.
#ifndef KERNTUNE_PROTO_COMMAND_LINE_H_
#define KERNTUNE_PROTO_COMMAND_LINE_H_

#include <string>
#include <vector>

#include "absl/strings/string_view.h"

namespace kt::proto {

// "kerntune 0.1.0 (kernels 0.1.0+k9)": `program`, the project's version
// (CMake's project(VERSION)) and the kernel library's (kernels/version.h,
// the one recorded beside every tuning result).
std::string VersionLine(absl::string_view program);

// The name in `candidates` nearest to `name` (edit distance, '-' and '_'
// alike), when near enough to be a typo of it: at most a third of the
// longer name's letters differ, and at least one may. Empty otherwise.
std::string NearestName(absl::string_view name, const std::vector<std::string>& candidates);

// "unknown flag --rowz; did you mean --rows?" (the second part only when
// NearestName finds one).
std::string UnknownFlagMessage(absl::string_view name,
                               const std::vector<std::string>& candidates);

}  // namespace kt::proto

#endif  // KERNTUNE_PROTO_COMMAND_LINE_H_
