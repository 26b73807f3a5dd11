// Command-line parsing for a tool with verbs: splits argv into flags and
// positional words, finds the verb, and sets only the flags that verb
// accepts (Abseil flags, set through absl::FindCommandLineFlag). Unlike
// absl::ParseCommandLine it never exits: every problem is a Status, so the
// caller can print usage and exit 2.
#ifndef KERNTUNE_CLIENT_CLI_ARGS_H_
#define KERNTUNE_CLIENT_CLI_ARGS_H_

#include <optional>
#include <string>
#include <vector>

#include "absl/status/status.h"
#include "absl/status/statusor.h"
#include "absl/types/span.h"

namespace kt::client {

// One flag as written: --name=value, --name value, --name / --noname for
// booleans (also with a single dash).
struct RawFlag {
  std::string name;
  std::string value;  // "true" / "false" for --name / --noname
  std::string text;   // as written, for messages
};

struct SplitCommandLine {
  std::vector<RawFlag> flags;
  std::vector<std::string> words;  // positional words, verbs first
  bool help = false;               // --help, -h or the word "help"
  bool version = false;            // --version
  // Flags no one defined, by name (without dashes), in order: the caller
  // knows the verb, and so which flags to suggest instead.
  std::vector<std::string> unknown;
};

// InvalidArgument for a flag missing its value. Everything after "--" is
// positional.
absl::StatusOr<SplitCommandLine> SplitArgs(absl::Span<char* const> args);

// Sets `flags` (which must all be in `allowed`) to their values.
// InvalidArgument naming the flag for one not in `allowed` ("--op is not a
// flag of `kerntune gpus`") or a value that does not parse.
absl::Status ApplyFlags(const std::vector<RawFlag>& flags,
                        const std::vector<std::string>& allowed,
                        const std::string& verb);

}  // namespace kt::client

#endif  // KERNTUNE_CLIENT_CLI_ARGS_H_
